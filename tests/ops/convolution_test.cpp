#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/autodiff.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/core/threads.hpp>
#include <kiln/ops/ops.hpp>
#include "support/gradcheck.hpp"

using namespace kiln;
using Catch::Contains;

namespace {

// ---- a direct nested-loop convolution, from Keras's formulas ---------------------------------------------

struct Axis {
  std::int64_t in, size, stride, dilation, before, out;
};

// Keras's compute_conv_output_shape, and the padding TensorFlow and JAX put before the input for "same"
// (half the total, rounded down); "causal" pads dilation·(size − 1) before, then runs "valid".
Axis axis_of(std::int64_t in, std::int64_t size, std::int64_t stride, std::int64_t dilation,
             const std::string& padding) {
  const std::int64_t span = dilation * (size - 1) + 1;
  Axis a{in, size, stride, dilation, 0, 0};
  if (padding == "valid") {
    a.out = (in - span) / stride + 1;
  } else if (padding == "same") {
    a.out = (in + stride - 1) / stride;
    a.before = std::max<std::int64_t>((a.out - 1) * stride + span - in, 0) / 2;
  } else {  // causal
    a.before = span - 1;
    a.out = (in + a.before - span) / stride + 1;
  }
  return a;
}

struct Image {
  std::int64_t n, c, h, w;
  bool last;
  std::size_t at(std::int64_t b, std::int64_t ch, std::int64_t i, std::int64_t j) const {
    return static_cast<std::size_t>(last ? ((b * h + i) * w + j) * c + ch : ((b * c + ch) * h + i) * w + j);
  }
};

Image image_of(const Shape& s, bool last) {
  if (s.rank() == 3) return last ? Image{s[0], s[2], 1, s[1], last} : Image{s[0], s[1], 1, s[2], last};
  return last ? Image{s[0], s[3], s[1], s[2], last} : Image{s[0], s[1], s[2], s[3], last};
}

std::int64_t option(const std::vector<std::int64_t>& values, std::size_t axis) {
  return values.empty() ? 1 : values.size() == 1 ? values[0] : values[axis];
}

Array reference_conv(const Array& x, const Array& kernel, const ops::ConvOptions& o) {
  const bool last = o.data_format == "channels_last";
  const Shape& ks = kernel.shape();
  const bool two_d = ks.rank() == 4;
  const Image in = image_of(x.shape(), last);
  const std::int64_t kh = two_d ? ks[0] : 1, kw = ks[ks.rank() - 3], cg = ks[ks.rank() - 2], f = ks[ks.rank() - 1];
  const std::int64_t groups = in.c / cg, fg = f / groups;
  const Axis rows =
      two_d ? axis_of(in.h, kh, option(o.strides, 0), option(o.dilation_rate, 0), o.padding) : Axis{1, 1, 1, 1, 0, 1};
  const std::size_t wa = two_d ? 1 : 0;
  const Axis cols = axis_of(in.w, kw, option(o.strides, wa), option(o.dilation_rate, wa), o.padding);
  const Image out{in.n, f, rows.out, cols.out, last};
  const Shape out_shape = two_d ? (last ? Shape{in.n, rows.out, cols.out, f} : Shape{in.n, f, rows.out, cols.out})
                                : (last ? Shape{in.n, cols.out, f} : Shape{in.n, f, cols.out});
  Array y = Array::full(out_shape, 0.0, DType::float64);
  for (std::int64_t b = 0; b < in.n; ++b)
    for (std::int64_t filter = 0; filter < f; ++filter)
      for (std::int64_t oi = 0; oi < rows.out; ++oi)
        for (std::int64_t oj = 0; oj < cols.out; ++oj) {
          double total = 0;
          const std::int64_t group = filter / fg;
          for (std::int64_t ki = 0; ki < kh; ++ki)
            for (std::int64_t kj = 0; kj < kw; ++kj)
              for (std::int64_t c = 0; c < cg; ++c) {
                const std::int64_t i = oi * rows.stride - rows.before + ki * rows.dilation;
                const std::int64_t j = oj * cols.stride - cols.before + kj * cols.dilation;
                if (i < 0 || i >= in.h || j < 0 || j >= in.w) continue;
                total += x.flat(in.at(b, group * cg + c, i, j)) *
                         kernel.flat(static_cast<std::size_t>(((ki * kw + kj) * cg + c) * f + filter));
              }
          y.set_flat(out.at(b, filter, oi, oj), total);
        }
  return y;
}

struct ConvCase {
  Shape x, kernel;
  ops::ConvOptions options;
  std::string label() const {
    std::string text = "x " + x.to_string() + " kernel " + kernel.to_string() + " " + options.padding + " " +
                       options.data_format + " strides";
    for (auto s : options.strides) text += " " + std::to_string(s);
    text += " dilation";
    for (auto d : options.dilation_rate) text += " " + std::to_string(d);
    return text;
  }
};

Shape image(bool two_d, bool last, std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w) {
  if (two_d) return last ? Shape{n, h, w, c} : Shape{n, c, h, w};
  return last ? Shape{n, w, c} : Shape{n, c, w};
}

// The grid: kernel sizes 1-3, strides 1-2, dilations 1-2, every padding, 1 or 2 groups, both layouts,
// 1-D and 2-D (non-square in 2-D, so height and width cannot be swapped unnoticed).
std::vector<ConvCase> grid() {
  std::vector<ConvCase> cases;
  for (const bool two_d : {false, true})
    for (const bool last : {true, false})
      for (const std::int64_t size : {1, 2, 3})
        for (const std::int64_t stride : {1, 2})
          for (const std::int64_t dilation : {1, 2})
            for (const std::int64_t groups : {1, 2})
              for (const char* padding : {"valid", "same", "causal"}) {
                if (two_d && std::string(padding) == "causal") continue;
                ConvCase c;
                c.x = image(two_d, last, 2, 2 * groups, 5, 7);
                c.kernel = two_d ? Shape{size, size == 1 ? 1 : size - 1, 2, 3 * groups} : Shape{size, 2, 3 * groups};
                c.options.padding = padding;
                c.options.data_format = last ? "channels_last" : "channels_first";
                c.options.strides = two_d ? std::vector<std::int64_t>{stride, 1} : std::vector<std::int64_t>{stride};
                c.options.dilation_rate =
                    two_d ? std::vector<std::int64_t>{1, dilation} : std::vector<std::int64_t>{dilation};
                cases.push_back(c);
              }
  return cases;
}

Tensor conv_of(const ConvCase& c, const std::vector<Tensor>& t) { return ops::conv(t[0], t[1], c.options); }

double dot(const Array& a, const Array& b) {
  double total = 0;
  for (std::size_t i = 0; i < a.size(); ++i) total += a.flat(i) * b.flat(i);
  return total;
}

}  // namespace

TEST_CASE("conv matches the nested-loop reference over a grid of windows, groups and layouts", "[ops][conv]") {
  Rng rng(11);
  for (const ConvCase& c : grid()) {
    INFO(c.label());
    const Array x = testing::random_array(c.x, rng);
    const Array kernel = testing::random_array(c.kernel, rng);
    const Array expected = reference_conv(x, kernel, c.options);
    const auto f = [&c](const std::vector<Tensor>& t) { return conv_of(c, t); };
    const Array actual = testing::evaluate(f, {x, kernel});
    REQUIRE(actual.shape() == expected.shape());
    CHECK(testing::max_relative_difference(actual, expected) < 1e-12);
    const Array single = testing::evaluate(f, {x.astype(DType::float32), kernel.astype(DType::float32)});
    CHECK(testing::max_relative_difference(single.astype(DType::float64), expected) < 1e-5);
  }
}

TEST_CASE("conv with several chunks of samples and a pointwise kernel matches the reference", "[ops][conv]") {
  // 2^19 buffer elements per chunk: 40 samples of 31×31 positions × 72 taps and channels take six.
  Rng rng(5);
  for (const ConvCase& c : {ConvCase{{40, 33, 33, 8}, {3, 3, 8, 2}, {}}, ConvCase{{3, 6, 5, 4}, {1, 1, 4, 6}, {}},
                            ConvCase{{3, 6, 5, 4}, {1, 1, 2, 6}, {}},
                            ConvCase{{40, 8, 33, 33}, {3, 3, 8, 2}, {{}, {}, "same", "channels_first"}}}) {
    INFO(c.label());
    const Array x = testing::random_array(c.x, rng);
    const Array kernel = testing::random_array(c.kernel, rng);
    const Array actual = testing::evaluate([&c](const std::vector<Tensor>& t) { return conv_of(c, t); }, {x, kernel});
    CHECK(testing::max_relative_difference(actual, reference_conv(x, kernel, c.options)) < 1e-12);
  }
}

TEST_CASE("conv gradients match central differences", "[ops][conv][grad]") {
  Rng rng(3);
  const std::vector<ConvCase> cases = grid();
  // Every 7th case of the grid: all layouts, paddings and groups appear, at a fraction of the time.
  for (std::size_t i = 0; i < cases.size(); i += 7) {
    const ConvCase& c = cases[i];
    testing::GradcheckOptions o;
    o.label = "conv " + c.label();
    const auto r =
        testing::gradcheck([&c](const std::vector<Tensor>& t) { return conv_of(c, t); }, {c.x, c.kernel}, rng, o);
    INFO(o.label << ": " << r.worst_entry());
    REQUIRE(r.max_relative_error <= 1e-6);
  }
}

TEST_CASE("conv gradient with an unknown batch dimension", "[ops][conv][grad]") {
  Rng rng(4);
  const Array kernel = testing::random_array({3, 2, 4}, rng);
  testing::GradcheckOptions o;
  o.label = "conv unknown batch";
  ops::ConvOptions options;
  options.padding = "causal";
  options.dilation_rate = {2};
  const auto r = testing::gradcheck(
      [&](const std::vector<Tensor>& t) { return ops::conv(t[0], ops::constant(t[0].graph(), kernel), options); },
      {testing::random_array({3, 6, 2}, rng)}, o, /*unknown_batch=*/true);
  INFO(r.worst_entry());
  REQUIRE(r.max_relative_error <= 1e-6);
}

TEST_CASE("the backprop ops are each other's adjoints and have their own gradients", "[ops][conv][grad]") {
  Rng rng(9);
  const std::vector<ConvCase> cases = grid();
  for (std::size_t i = 3; i < cases.size(); i += 11) {
    const ConvCase& c = cases[i];
    INFO(c.label());
    const Array x = testing::random_array(c.x, rng);
    const Array kernel = testing::random_array(c.kernel, rng);
    const Array y = reference_conv(x, kernel, c.options);
    const Array w = testing::random_array(y.shape(), rng);
    const bool last = c.options.data_format == "channels_last";
    std::vector<std::int64_t> spatial;
    for (int axis = last ? 1 : 2; axis < (last ? 1 : 2) + c.x.rank() - 2; ++axis) spatial.push_back(c.x[axis]);
    const auto transpose = [&](const std::vector<Tensor>& t) {
      return ops::conv_transpose(t[0], t[1], spatial, c.options);
    };
    if (c.x[last ? c.x.rank() - 1 : 1] == c.kernel.dim(-2)) {  // one group: conv_transpose is public for those
      // <conv(x, K), w> = <x, conv_transpose(w, K)>.
      const Array back = testing::evaluate(transpose, {w, kernel});
      REQUIRE(back.shape() == x.shape());
      CHECK(std::abs(dot(y, w) - dot(x, back)) < 1e-10 * std::max(1.0, std::abs(dot(y, w))));
      testing::GradcheckOptions o;
      o.label = "conv_transpose " + c.label();
      const auto r = testing::gradcheck(transpose, {w, kernel}, o);
      INFO(r.worst_entry());
      CHECK(r.max_relative_error <= 1e-6);
    }
    // The gradients of conv are differentiable again: the gradient check of d(sum(conv · R))/dx.
    testing::GradcheckOptions o;
    o.label = "conv second order " + c.label();
    o.step = 1e-4;  // a quartic of sums: the round-off of a smaller step would dominate
    const auto second = testing::gradcheck(
        [&](const std::vector<Tensor>& t) {
          const Tensor out = ops::conv(t[0], t[1], c.options);
          const std::vector<Tensor> grads = gradients(ops::sum(ops::square(out)), {t[0], t[1]});
          return ops::sum(ops::square(grads[0])) + ops::sum(ops::square(grads[1]));
        },
        {x, kernel}, o);
    INFO(second.worst_entry());
    CHECK(second.max_relative_error <= 1e-6);
  }
}

// Depthwise convolutions (every channel its own group) on channels_last data run direct kernels
// (ops/detail/depthwise), not im2col and GEMMs: the same reference, gradients, and the GEMM path.
// The grid's channels_last single-group windows, on 3 channels with 1 or 2 filters each.
std::vector<ConvCase> depthwise_grid() {
  std::vector<ConvCase> cases;
  for (ConvCase c : grid()) {
    if (c.options.data_format != "channels_last" || c.x.dim(-1) != c.kernel.dim(-2)) continue;
    const std::vector<std::int64_t> window(c.kernel.dims().begin(), c.kernel.dims().end() - 2);
    c.x = image(window.size() == 2, true, 2, 3, 5, 7);
    for (const std::int64_t multiplier : {1, 2}) {
      std::vector<std::int64_t> kernel = window;
      kernel.insert(kernel.end(), {1, 3 * multiplier});
      c.kernel = Shape(kernel);
      cases.push_back(c);
    }
  }
  return cases;
}

TEST_CASE("depthwise conv matches the reference and central differences", "[ops][conv][grad]") {
  Rng rng(21);
  const std::vector<ConvCase> cases = depthwise_grid();
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const ConvCase& c = cases[i];
    INFO(c.label());
    const Array x = testing::random_array(c.x, rng);
    const Array kernel = testing::random_array(c.kernel, rng);
    const auto f = [&c](const std::vector<Tensor>& t) { return conv_of(c, t); };
    CHECK(testing::max_relative_difference(testing::evaluate(f, {x, kernel}), reference_conv(x, kernel, c.options)) <
          1e-12);
    if (i % 3 != 0) continue;
    testing::GradcheckOptions o;
    o.label = "depthwise conv " + c.label();
    const auto r = testing::gradcheck(f, {x, kernel}, o);
    INFO(r.worst_entry());
    CHECK(r.max_relative_error <= 1e-6);
  }
}

TEST_CASE("depthwise conv's direct kernels agree with the GEMM path on any number of threads", "[ops][conv]") {
  // channels_first runs the same convolution as im2col and one GEMM per channel; the direct kernels of
  // channels_last must give its output and gradients, with the kernel gradient summed over 1 or 3 workers.
  Rng rng(22);
  for (const std::int64_t multiplier : {1, 2}) {
    ops::ConvOptions last;
    last.padding = "same";
    last.strides = {2, 1};
    ops::ConvOptions first = last;
    first.data_format = "channels_first";
    const Array x = testing::random_array({4, 19, 17, 24}, rng);
    const Array kernel = testing::random_array({3, 3, 1, 24 * multiplier}, rng);
    const auto direct = [&](const std::vector<Tensor>& t) { return ops::conv(t[0], t[1], last); };
    const auto gemm = [&](const std::vector<Tensor>& t) {
      return ops::transpose(ops::conv(ops::transpose(t[0], {0, 3, 1, 2}), t[1], first), {0, 2, 3, 1});
    };
    const Array weights = testing::random_array(testing::evaluate(direct, {x, kernel}).shape(), rng);
    const std::vector<Array> expected = testing::evaluate_with_gradients_on(1, gemm, {x, kernel}, weights);
    for (const int threads : {1, 3}) {
      INFO("multiplier " << multiplier << ", " << threads << " threads");
      const std::vector<Array> actual = testing::evaluate_with_gradients_on(threads, direct, {x, kernel}, weights);
      for (std::size_t i = 0; i < expected.size(); ++i) CHECK(testing::max_relative_difference(actual[i], expected[i]) < 1e-12);
    }
  }
}

namespace {

// ---- conv_bias_activation (kiln>FusedConv) and the direct kernel of short windows -----------------------

// activation(conv + bias) as separate ops: what kiln>FusedConv replaces. The bias is over the channel axis.
Tensor composed_conv(const ConvCase& c, const std::string& activation, const std::vector<Tensor>& t) {
  Tensor bias = t[2];
  if (c.options.data_format == "channels_first")
    bias = ops::reshape(bias, c.x.rank() == 4 ? std::vector<std::int64_t>{-1, 1, 1} : std::vector<std::int64_t>{-1, 1});
  return ops::activation(ops::conv(t[0], t[1], c.options) + bias, activation);
}
Tensor fused_conv(const ConvCase& c, const std::string& activation, const std::vector<Tensor>& t) {
  return ops::conv_bias_activation(t[0], t[1], t[2], activation, c.options);
}

// y + bias (over the last axis), then a ReLU: the reference's fused form on channels_last data.
Array biased(const Array& y, const Array& bias, bool relu) {
  Array out = y.astype(DType::float64);
  const std::size_t filters = bias.size();
  for (std::size_t i = 0; i < out.size(); ++i) {
    const double v = out.flat(i) + bias.flat(i % filters);
    out.set_flat(i, relu && v < 0 ? 0.0 : v);
  }
  return out;
}

// Short windows (at most 32 values: 1 or 3 channels under 3 taps, or 3 × 3) with whole vectors of filters on
// channels_last data run the direct kernel (ops/detail/direct_conv): 16, 48 and 112 filters are 1, 2 + 1 and
// 4 + 2 + 1 vectors of AVX-512 floats; rows of 23 give full groups of pixels, a tail, and padded borders.
std::vector<ConvCase> direct_grid() {
  std::vector<ConvCase> cases;
  for (const bool two_d : {false, true})
    for (const std::int64_t channels : {1, 3})
      for (const std::int64_t filters : {16, 48, 112})
        for (const std::int64_t stride : {1, 2})
          for (const std::int64_t dilation : {1, 2})
            for (const char* padding : {"valid", "same", "causal"}) {
              if (two_d && std::string(padding) == "causal") continue;
              ConvCase c;
              c.x = image(two_d, true, 2, channels, 9, 23);
              c.kernel = two_d ? Shape{3, 3, channels, filters} : Shape{3, channels, filters};
              c.options.padding = padding;
              c.options.strides = two_d ? std::vector<std::int64_t>{1, stride} : std::vector<std::int64_t>{stride};
              c.options.dilation_rate =
                  two_d ? std::vector<std::int64_t>{dilation, 1} : std::vector<std::int64_t>{dilation};
              cases.push_back(c);
            }
  return cases;
}

}  // namespace

TEST_CASE("conv's direct kernel for short windows matches the reference, with the bias and ReLU fused", "[ops][conv]") {
  Rng rng(31);
  for (const ConvCase& c : direct_grid()) {
    INFO(c.label());
    const Array x = testing::random_array(c.x, rng);
    const Array kernel = testing::random_array(c.kernel, rng);
    const Array bias = testing::random_array({c.kernel.dim(-1)}, rng);
    const Array expected = reference_conv(x, kernel, c.options);
    const auto plain = [&c](const std::vector<Tensor>& t) { return conv_of(c, t); };
    CHECK(testing::max_relative_difference(testing::evaluate(plain, {x, kernel}), expected) < 1e-12);
    const Array single = testing::evaluate(plain, {x.astype(DType::float32), kernel.astype(DType::float32)});
    CHECK(testing::max_relative_difference(single.astype(DType::float64), expected) < 1e-5);
    for (const char* activation : {"linear", "relu"}) {
      INFO(activation);
      const auto f = [&c, activation](const std::vector<Tensor>& t) { return fused_conv(c, activation, t); };
      const Array want = biased(expected, bias, std::string(activation) == "relu");
      CHECK(testing::max_relative_difference(testing::evaluate(f, {x, kernel, bias}), want) < 1e-12);
      const Array got32 = testing::evaluate(
          f, {x.astype(DType::float32), kernel.astype(DType::float32), bias.astype(DType::float32)});
      CHECK(testing::max_relative_difference(got32.astype(DType::float64), want) < 1e-5);
    }
  }
}

TEST_CASE("conv's direct kernels give the im2col path's output and gradients on any number of threads",
          "[ops][conv][grad]") {
  // The same convolution on channels_first data runs im2col and GEMMs; channels_last with short windows runs the
  // direct kernels (forward and the kernel's gradient, summed over 1 or 3 workers). Every direct_grid case.
  Rng rng(34);
  for (const ConvCase& c : direct_grid()) {
    INFO(c.label());
    const bool two_d = c.x.rank() == 4;
    ConvCase first = c;
    first.options.data_format = "channels_first";
    const std::vector<std::int64_t> to_first = two_d ? std::vector<std::int64_t>{0, 3, 1, 2} : std::vector<std::int64_t>{0, 2, 1};
    const std::vector<std::int64_t> to_last = two_d ? std::vector<std::int64_t>{0, 2, 3, 1} : std::vector<std::int64_t>{0, 2, 1};
    const Array x = testing::random_array(c.x, rng);
    const Array kernel = testing::random_array(c.kernel, rng);
    const auto direct = [&c](const std::vector<Tensor>& t) { return conv_of(c, t); };
    const auto gemm = [&](const std::vector<Tensor>& t) {
      return ops::transpose(conv_of(first, {ops::transpose(t[0], to_first), t[1]}), to_last);
    };
    const Array weights = testing::random_array(testing::evaluate(direct, {x, kernel}).shape(), rng);
    const std::vector<Array> expected = testing::evaluate_with_gradients_on(1, gemm, {x, kernel}, weights);
    for (const int threads : {1, 3}) {
      INFO(threads << " threads");
      const std::vector<Array> actual = testing::evaluate_with_gradients_on(threads, direct, {x, kernel}, weights);
      const std::vector<Array> single = testing::evaluate_with_gradients_on(
          threads, direct, {x.astype(DType::float32), kernel.astype(DType::float32)}, weights.astype(DType::float32));
      for (std::size_t i = 0; i < expected.size(); ++i) {
        INFO("result " << i);
        CHECK(testing::max_relative_difference(actual[i], expected[i]) < 1e-12);
        CHECK(testing::max_relative_difference(single[i].astype(DType::float64), expected[i]) < 1e-4);
      }
    }
  }
}

TEST_CASE("conv by taps (16 channels or more, read in place) matches the reference on any number of threads",
          "[ops][conv]") {
  // float32 channels_last with one group, at least 16 channels and at most 128 filters: each output row is one
  // batch-reduce product over its taps, the positions whose windows reach into the padding one window each.
  Rng rng(35);
  std::vector<ConvCase> cases;
  for (const std::int64_t channels : {16, 40})
    for (const char* padding : {"valid", "same"})
      for (const std::vector<std::int64_t>& strides : {std::vector<std::int64_t>{1, 1}, std::vector<std::int64_t>{2, 2},
                                                       std::vector<std::int64_t>{1, 3}})
        for (const std::int64_t dilation : {1, 2}) {
          ConvCase c;
          c.x = {3, 9, 12, channels};
          c.kernel = {3, 3, channels, channels == 16 ? 24 : 64};
          c.options.padding = padding;
          c.options.strides = strides;
          c.options.dilation_rate = {dilation, dilation};
          cases.push_back(c);
        }
  cases.push_back(ConvCase{{2, 5, 7, 32}, {5, 5, 32, 16}, {{}, {}, "same", "channels_last"}});  // mostly border
  cases.push_back(ConvCase{{2, 20, 16}, {5, 16, 32}, {{}, {2}, "causal", "channels_last"}});    // 1-D, causal
  for (const ConvCase& c : cases) {
    INFO(c.label());
    const Array x = testing::random_array(c.x, rng);
    const Array kernel = testing::random_array(c.kernel, rng);
    const Array bias = testing::random_array({c.kernel.dim(-1)}, rng);
    const Array expected = reference_conv(x, kernel, c.options);
    const std::vector<Array> inputs{x.astype(DType::float32), kernel.astype(DType::float32)};
    for (const int threads : {1, 3}) {
      INFO(threads << " threads");
      const int saved = get_num_threads();
      set_num_threads(threads);
      const Array plain = testing::evaluate([&c](const std::vector<Tensor>& t) { return conv_of(c, t); }, inputs);
      const Array fused = testing::evaluate(
          [&c](const std::vector<Tensor>& t) { return fused_conv(c, "relu", t); },
          {inputs[0], inputs[1], bias.astype(DType::float32)});
      set_num_threads(saved);
      CHECK(testing::max_relative_difference(plain.astype(DType::float64), expected) < 1e-5);
      CHECK(testing::max_relative_difference(fused.astype(DType::float64), biased(expected, bias, true)) < 1e-5);
    }
  }
}

TEST_CASE("conv_bias_activation gives conv, bias and activation's outputs and gradients on any number of threads",
          "[ops][conv][grad]") {
  // Every layout, group count, padding and kind of kernel of the grid, and besides: the fused path's blocks of
  // output rows (4 × 28 × 28 positions of 72 + 20 values: nine blocks), a pointwise kernel, a depthwise one, and
  // the direct kernel; ReLU and linear are fused, sigmoid follows as its own op.
  Rng rng(32);
  std::vector<ConvCase> cases;
  const std::vector<ConvCase> all = grid();
  for (std::size_t i = 0; i < all.size(); i += 5) cases.push_back(all[i]);
  cases.push_back(ConvCase{{4, 30, 30, 8}, {3, 3, 8, 20}, {}});
  cases.push_back(ConvCase{{3, 6, 5, 4}, {1, 1, 4, 6}, {}});
  cases.push_back(ConvCase{{2, 7, 6, 3}, {3, 3, 1, 6}, {{2}, {}, "same", "channels_last"}});
  cases.push_back(ConvCase{{2, 11, 13, 3}, {3, 3, 3, 32}, {{}, {}, "same", "channels_last"}});
  for (const ConvCase& c : cases)
    for (const char* activation : {"relu", "linear", "sigmoid"}) {
      INFO(c.label() << " " << activation);
      const Array x = testing::random_array(c.x, rng);
      const Array kernel = testing::random_array(c.kernel, rng);
      const Array bias = testing::random_array({c.kernel.dim(-1)}, rng);
      const auto composed = [&c, activation](const std::vector<Tensor>& t) { return composed_conv(c, activation, t); };
      const auto fused = [&c, activation](const std::vector<Tensor>& t) { return fused_conv(c, activation, t); };
      const Array weights = testing::random_array(testing::evaluate(composed, {x, kernel, bias}).shape(), rng);
      const std::vector<Array> expected = testing::evaluate_with_gradients_on(1, composed, {x, kernel, bias}, weights);
      for (const int threads : {1, 3}) {
        INFO(threads << " threads");
        const std::vector<Array> actual = testing::evaluate_with_gradients_on(threads, fused, {x, kernel, bias}, weights);
        REQUIRE(actual.size() == expected.size());
        for (std::size_t i = 0; i < expected.size(); ++i) {
          INFO("result " << i);
          CHECK(testing::max_relative_difference(actual[i], expected[i]) < 1e-12);
        }
      }
    }
}

TEST_CASE("conv_bias_activation gradients match central differences", "[ops][conv][grad]") {
  Rng rng(33);
  const std::vector<ConvCase> cases{ConvCase{{2, 5, 7, 2}, {2, 3, 2, 3}, {{1, 2}, {}, "same", "channels_last"}},
                                    ConvCase{{2, 2, 5, 7}, {3, 2, 2, 3}, {{}, {}, "valid", "channels_first"}},
                                    ConvCase{{2, 9, 2}, {3, 2, 16}, {{2}, {}, "causal", "channels_last"}},
                                    ConvCase{{2, 5, 7, 4}, {1, 1, 4, 3}, {}}};
  for (const ConvCase& c : cases)
    for (const char* activation : {"relu", "linear"}) {
      testing::GradcheckOptions o;
      o.label = std::string("conv_bias_activation ") + activation + " " + c.label();
      const auto r = testing::gradcheck([&c, activation](const std::vector<Tensor>& t) { return fused_conv(c, activation, t); },
                                        {c.x, c.kernel, Shape{c.kernel.dim(-1)}}, rng, o);
      INFO(o.label << ": " << r.worst_entry());
      CHECK(r.max_relative_error <= 1e-6);
    }
}

TEST_CASE("conv_bias_activation refuses a bias that is not one value per filter and unknown activations",
          "[ops][conv][errors]") {
  Graph g;
  const Tensor x = g.placeholder({Shape::unknown, 8, 8, 4}, DType::float32, "x");
  const Tensor kernel = g.placeholder({3, 3, 4, 6}, DType::float32, "kernel");
  CHECK_THROWS_WITH(ops::conv_bias_activation(x, kernel, g.placeholder({5}, DType::float32, "b")),
                    Contains("the bias must be (6,)") && Contains("(5,)"));
  CHECK_THROWS_AS(ops::conv_bias_activation(x, kernel, g.placeholder({1, 6}, DType::float32, "b")), ShapeError);
  CHECK_THROWS_AS(ops::conv_bias_activation(x, kernel, g.placeholder({6}, DType::float32, "b"), "rleu"), ConfigError);
  CHECK_THROWS_WITH(ops::conv_bias_activation(x, g.placeholder({3, 3, 3, 6}, DType::float32, "k"),
                                              g.placeholder({6}, DType::float32, "b")),
                    Contains("4 channels"));
}

TEST_CASE("conv refuses bad shapes and options with the shapes in the message", "[ops][conv][errors]") {
  Graph g;
  const Tensor x1 = g.placeholder({Shape::unknown, 10, 4}, DType::float32, "x1");
  const Tensor x2 = g.placeholder({Shape::unknown, 8, 8, 4}, DType::float32, "x2");
  auto kernel = [&g](const Shape& s) { return g.placeholder(s, DType::float32, "kernel"); };
  ops::ConvOptions o;
  CHECK_THROWS_WITH(ops::conv(x1, kernel({11, 4, 2})),
                    Contains("spans more than the input's (10,)") && Contains("(None, 10, 4)"));
  CHECK_THROWS_AS(ops::conv(x1, kernel({3, 3, 2})), ShapeError);  // 4 channels are not 3 per group
  CHECK_THROWS_WITH(ops::conv(x1, kernel({3, 2, 3})), Contains("3 filters do not divide into 2 groups"));
  CHECK_THROWS_WITH(ops::conv(x2, kernel({3, 4, 2})), Contains("must have rank 3"));
  o.strides = {0};
  CHECK_THROWS_WITH(ops::conv(x1, kernel({3, 4, 2}), o), Contains("strides must be positive"));
  o = {};
  o.dilation_rate = {1, 1};
  CHECK_THROWS_WITH(ops::conv(x1, kernel({3, 4, 2}), o), Contains("one per spatial axis"));
  o = {};
  o.padding = "causal";
  CHECK_THROWS_WITH(ops::conv(x2, kernel({3, 3, 4, 2}), o), Contains("only for 1-D"));
  o.padding = "full";
  CHECK_THROWS_WITH(ops::conv(x1, kernel({3, 4, 2}), o), Contains("padding must be 'valid', 'same' or 'causal'"));
  o = {};
  o.data_format = "channels_middle";
  CHECK_THROWS_WITH(ops::conv(x1, kernel({3, 4, 2}), o), Contains("data_format must be"));
  CHECK_THROWS_AS(ops::conv_transpose(x1, kernel({3, 2, 4}), {9}), ShapeError);  // conv of 9 steps gives 7, not 10
}
