#include "support/attention_reference.hpp"

#include <cmath>

namespace kiln::testing {

ReferenceAttention reference_attention(const Array& q, const Array& k, const Array& v, const Array& mask, bool causal,
                                       double scale) {
  const std::int64_t batch = q.shape()[0], queries = q.shape()[1], depth = q.shape()[2];
  const std::int64_t keys = k.shape()[1], value_depth = v.shape()[2];
  ReferenceAttention result{Array({batch, queries, value_depth}, DType::float64),
                            Array({batch, queries, keys}, DType::float64)};
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t i = 0; i < queries; ++i) {
      std::vector<double> scores(static_cast<std::size_t>(keys));
      std::vector<bool> allowed(static_cast<std::size_t>(keys));
      double largest = -INFINITY;
      for (std::int64_t j = 0; j < keys; ++j) {
        double dot = 0;
        for (std::int64_t c = 0; c < depth; ++c)
          dot += q.flat(static_cast<std::size_t>((b * queries + i) * depth + c)) *
                 k.flat(static_cast<std::size_t>((b * keys + j) * depth + c));
        const bool by_mask = mask.empty() || mask.flat(static_cast<std::size_t>((b * queries + i) * keys + j)) != 0.0;
        allowed[static_cast<std::size_t>(j)] = by_mask && (!causal || j <= i);
        scores[static_cast<std::size_t>(j)] = dot * scale;
        if (allowed[static_cast<std::size_t>(j)]) largest = std::max(largest, dot * scale);
      }
      double total = 0;
      for (std::int64_t j = 0; j < keys; ++j) {
        const double e =
            allowed[static_cast<std::size_t>(j)] ? std::exp(scores[static_cast<std::size_t>(j)] - largest) : 0.0;
        scores[static_cast<std::size_t>(j)] = e;
        total += e;
      }
      for (std::int64_t j = 0; j < keys; ++j) {
        const double w = total > 0 ? scores[static_cast<std::size_t>(j)] / total : 0.0;
        result.weights.set_flat(static_cast<std::size_t>((b * queries + i) * keys + j), w);
      }
      for (std::int64_t c = 0; c < value_depth; ++c) {
        double sum = 0;
        for (std::int64_t j = 0; j < keys; ++j)
          sum += result.weights.flat(static_cast<std::size_t>((b * queries + i) * keys + j)) *
                 v.flat(static_cast<std::size_t>((b * keys + j) * value_depth + c));
        result.output.set_flat(static_cast<std::size_t>((b * queries + i) * value_depth + c), sum);
      }
    }
  return result;
}

Array reference_dense(const Array& x, const Array& kernel, const Array& bias) {
  const std::int64_t rows = static_cast<std::int64_t>(x.size()) / x.shape().dim(-1);
  const std::int64_t in = kernel.shape()[0], out = kernel.shape()[1];
  std::vector<std::int64_t> dims = x.shape().dims();
  dims.back() = out;
  Array y{Shape(dims), DType::float64};
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t o = 0; o < out; ++o) {
      double sum = bias.empty() ? 0.0 : bias.flat(static_cast<std::size_t>(o));
      for (std::int64_t i = 0; i < in; ++i)
        sum += x.flat(static_cast<std::size_t>(r * in + i)) * kernel.flat(static_cast<std::size_t>(i * out + o));
      y.set_flat(static_cast<std::size_t>(r * out + o), sum);
    }
  return y;
}

Array reference_layer_norm(const Array& x, const Array& gamma, const Array& beta, double epsilon) {
  const std::int64_t width = x.shape().dim(-1), rows = static_cast<std::int64_t>(x.size()) / width;
  Array y(x.shape(), DType::float64);
  for (std::int64_t r = 0; r < rows; ++r) {
    double mean = 0, variance = 0;
    for (std::int64_t c = 0; c < width; ++c) mean += x.flat(static_cast<std::size_t>(r * width + c));
    mean /= static_cast<double>(width);
    for (std::int64_t c = 0; c < width; ++c) {
      const double d = x.flat(static_cast<std::size_t>(r * width + c)) - mean;
      variance += d * d;
    }
    variance /= static_cast<double>(width);
    for (std::int64_t c = 0; c < width; ++c) {
      const std::size_t index = static_cast<std::size_t>(r * width + c);
      y.set_flat(index,
                 (x.flat(index) - mean) / std::sqrt(variance + epsilon) * gamma.flat(static_cast<std::size_t>(c)) +
                     beta.flat(static_cast<std::size_t>(c)));
    }
  }
  return y;
}

Array last_axis_slice(const Array& x, std::int64_t begin, std::int64_t count) {
  const std::int64_t width = x.shape().dim(-1), rows = static_cast<std::int64_t>(x.size()) / width;
  std::vector<std::int64_t> dims = x.shape().dims();
  dims.back() = count;
  Array y{Shape(dims), DType::float64};
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < count; ++c)
      y.set_flat(static_cast<std::size_t>(r * count + c), x.flat(static_cast<std::size_t>(r * width + begin + c)));
  return y;
}

Array last_axis_concat(const std::vector<Array>& parts) {
  std::int64_t width = 0;
  for (const Array& part : parts) width += part.shape().dim(-1);
  std::vector<std::int64_t> dims = parts[0].shape().dims();
  dims.back() = width;
  Array y{Shape(dims), DType::float64};
  const std::int64_t rows = static_cast<std::int64_t>(y.size()) / width;
  std::int64_t offset = 0;
  for (const Array& part : parts) {
    const std::int64_t w = part.shape().dim(-1);
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < w; ++c)
        y.set_flat(static_cast<std::size_t>(r * width + offset + c), part.flat(static_cast<std::size_t>(r * w + c)));
    offset += w;
  }
  return y;
}

Array expand_padding_mask(const Array& padding, std::int64_t query_length) {
  const std::int64_t batch = padding.shape()[0], keys = padding.shape()[1];
  Array mask({batch, query_length, keys}, padding.dtype());
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t i = 0; i < query_length; ++i)
      for (std::int64_t j = 0; j < keys; ++j)
        mask.set_flat(static_cast<std::size_t>((b * query_length + i) * keys + j),
                      padding.flat(static_cast<std::size_t>(b * keys + j)));
  return mask;
}

}  // namespace kiln::testing
