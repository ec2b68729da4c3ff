// GroupNorm's block kernels of one build (see group_norm_blocks.hpp and isa.hpp), in namespace KILN_ISA_NAMESPACE:
// included by all_kernels.inl, once for each build.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include <kiln/ops/detail/group_norm_blocks.hpp>

namespace kiln::detail::KILN_ISA_NAMESPACE {

namespace {

// Calls f(channel, index) for every element of sample n's group g. For channels_last (post = 1) the innermost
// loop runs along the group's contiguous channels, so an elementwise f vectorizes.
template <class F>
void each_in_group(const GroupLayout& l, std::int64_t n, std::int64_t g, F&& f) {
  const std::int64_t first_channel = g * l.group_channels();
  if (l.post == 1) {
    for (std::int64_t p = 0; p < l.pre; ++p) {
      const std::int64_t base = (n * l.pre + p) * l.channels + first_channel;
      for (std::int64_t c = 0; c < l.group_channels(); ++c) f(first_channel + c, base + c);
    }
    return;
  }
  for (std::int64_t p = 0; p < l.pre; ++p) {
    const std::int64_t base = ((n * l.pre + p) * l.channels + first_channel) * l.post;
    for (std::int64_t c = 0; c < l.group_channels(); ++c) {
      const std::int64_t start = base + c * l.post;
      for (std::int64_t q = 0; q < l.post; ++q) f(first_channel + c, start + q);
    }
  }
}

// totals[g − g0] ← Σ value(channel, index) over the block's group g, in double.
template <class F>
void block_sums(const GroupLayout& l, const GroupBlock& b, double* totals, F&& value) {
  std::fill(totals, totals + (b.g1 - b.g0), 0.0);
  if (l.post != 1) {
    for (std::int64_t g = b.g0; g < b.g1; ++g)
      each_in_group(l, b.n, g, [&](std::int64_t c, std::int64_t at) { totals[g - b.g0] += value(c, at); });
    return;
  }
  const std::int64_t first = b.g0 * l.group_channels(), last = b.g1 * l.group_channels();
  for (std::int64_t c0 = first; c0 < last; c0 += group_lanes) {
    const std::int64_t width = std::min(group_lanes, last - c0);
    double lanes[group_lanes] = {};
    for (std::int64_t p = 0; p < l.pre; ++p) {
      const std::int64_t base = (b.n * l.pre + p) * l.channels + c0;
      for (std::int64_t c = 0; c < width; ++c) lanes[c] += value(c0 + c, base + c);
    }
    for (std::int64_t c = 0; c < width; ++c) totals[(c0 + c - first) / l.group_channels()] += lanes[c];
  }
}

// Calls f(channel, index) for every element of the block, channels innermost for channels_last.
template <class F>
void each_in_block(const GroupLayout& l, const GroupBlock& b, F&& f) {
  if (l.post != 1) {
    for (std::int64_t g = b.g0; g < b.g1; ++g) each_in_group(l, b.n, g, f);
    return;
  }
  const std::int64_t first = b.g0 * l.group_channels(), width = (b.g1 - b.g0) * l.group_channels();
  for (std::int64_t p = 0; p < l.pre; ++p) {
    const std::int64_t base = (b.n * l.pre + p) * l.channels + first;
    for (std::int64_t c = 0; c < width; ++c) f(first + c, base + c);
  }
}

// A value per group of a block, looked up by channel: per channel when the block fits in the lanes (so that a
// loop over a block's channels vectorizes), else the block's one group's.
template <class T>
struct PerChannel {
  std::int64_t first = 0;
  bool lanes = false;
  T values[group_lanes];

  PerChannel(const GroupLayout& l, const GroupBlock& b, const double* per_group) : first(b.g0 * l.group_channels()) {
    const std::int64_t width = (b.g1 - b.g0) * l.group_channels();
    lanes = l.post == 1 && width <= group_lanes;
    if (!lanes) {
      values[0] = static_cast<T>(per_group[0]);
      return;
    }
    for (std::int64_t c = 0; c < width; ++c) values[c] = static_cast<T>(per_group[c / l.group_channels()]);
  }
  T operator()(std::int64_t channel) const { return lanes ? values[channel - first] : values[0]; }
};

struct GroupStats {
  double mean[group_lanes], rstd[group_lanes];  // per group of the block
};

template <class T>
void group_stats(const GroupLayout& l, const T* x, const GroupBlock& b, double epsilon, GroupStats& s) {
  const auto count = static_cast<double>(l.group_size());
  const std::int64_t groups = b.g1 - b.g0;
  block_sums(l, b, s.mean, [&](std::int64_t, std::int64_t at) { return static_cast<double>(x[at]); });
  for (std::int64_t g = 0; g < groups; ++g) s.mean[g] = count > 0 ? s.mean[g] / count : 0.0;
  const PerChannel<double> mean(l, b, s.mean);
  block_sums(l, b, s.rstd, [&](std::int64_t c, std::int64_t at) {
    const double d = static_cast<double>(x[at]) - mean(c);
    return d * d;
  });
  for (std::int64_t g = 0; g < groups; ++g)
    s.rstd[g] = 1.0 / std::sqrt((count > 0 ? s.rstd[g] / count : 0.0) + epsilon);
}

template <class T>
void group_forward(const GroupLayout& l, const T* x, const T* gamma, const T* beta, T* y, const GroupBlock& b,
             double epsilon) {
  GroupStats s;
  group_stats(l, x, b, epsilon, s);
  const PerChannel<T> mean(l, b, s.mean), rstd(l, b, s.rstd);
  each_in_block(l, b, [&](std::int64_t c, std::int64_t at) { y[at] = (x[at] - mean(c)) * rstd(c) * gamma[c] + beta[c]; });
}

template <class T>
void group_grad(const GroupLayout& l, const T* x, const T* gamma, const T* dy, T* dx, const GroupBlock& b, double epsilon) {
  const auto count = static_cast<double>(l.group_size());
  GroupStats s;
  group_stats(l, x, b, epsilon, s);
  const PerChannel<double> mean64(l, b, s.mean), rstd64(l, b, s.rstd);
  double sum_g[group_lanes], sum_g_xhat[group_lanes];
  block_sums(l, b, sum_g, [&](std::int64_t c, std::int64_t at) {
    return static_cast<double>(dy[at]) * static_cast<double>(gamma[c]);
  });
  block_sums(l, b, sum_g_xhat, [&](std::int64_t c, std::int64_t at) {
    return static_cast<double>(dy[at]) * static_cast<double>(gamma[c]) * (static_cast<double>(x[at]) - mean64(c)) *
           rstd64(c);
  });
  for (std::int64_t g = 0; g < b.g1 - b.g0; ++g) {
    sum_g[g] /= count;
    sum_g_xhat[g] /= count;
  }
  const PerChannel<T> mean(l, b, s.mean), rstd(l, b, s.rstd), mean_g(l, b, sum_g), mean_g_xhat(l, b, sum_g_xhat);
  each_in_block(l, b, [&](std::int64_t c, std::int64_t at) {
    const T xhat = (x[at] - mean(c)) * rstd(c);
    dx[at] = rstd(c) * (dy[at] * gamma[c] - mean_g(c) - xhat * mean_g_xhat(c));
  });
}

template <class T>
void group_param_grad(const GroupLayout& l, const T* x, const T* dy, double* sums, const GroupBlock& b, double epsilon) {
  GroupStats s;
  group_stats(l, x, b, epsilon, s);
  const PerChannel<double> mean(l, b, s.mean), rstd(l, b, s.rstd);
  const std::int64_t c_total = l.channels;
  each_in_block(l, b, [&](std::int64_t c, std::int64_t at) {
    const auto gradient = static_cast<double>(dy[at]);
    sums[c] += gradient * (static_cast<double>(x[at]) - mean(c)) * rstd(c);
    sums[c_total + c] += gradient;
  });
}

}  // namespace

const GroupNormBlocks<float> group_norm_blocks_float{group_forward<float>, group_grad<float>, group_param_grad<float>};
const GroupNormBlocks<double> group_norm_blocks_double{group_forward<double>, group_grad<double>, group_param_grad<double>};

}  // namespace kiln::detail::KILN_ISA_NAMESPACE
