// Group normalization (Wu and He 2018; Keras's layers.GroupNormalization), fused forward and backward:
//   GroupNorm           (x, gamma, beta) -> y = (x − mean)·rsqrt(var + ε)·gamma + beta
//   GroupNormGrad       (x, gamma, dy)   -> dx = rstd·(g − mean(g) − x̂·mean(g·x̂)), g = dy·gamma
//   GroupNormParamGrad  (x, dy)          -> (2, C): sum(dy·x̂) and sum(dy) per channel: dgamma and dbeta
// where mean and var are those of one sample's group: its C/G channels over every axis but the batch.
// x is seen as (N, pre, C, post) around the channel axis, so a group of one sample is, for each of the
// `pre` positions, one contiguous run of C/G·post elements (post = 1 for channels_last). Statistics are
// two-pass and accumulated in double, as BatchMoments does. Backward recomputes them from x, as
// LayerNorm does: a pass over the group costs less than keeping another buffer alive.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <kiln/core/attributes.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/op.hpp>
#include <kiln/core/parallel.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {
namespace {

struct GroupLayout {
  std::int64_t batch = 0, pre = 1, channels = 0, post = 1, groups = 1;
  std::int64_t group_channels() const { return channels / groups; }
  std::int64_t group_size() const { return pre * group_channels() * post; }  // M: the values of one group
};

int channel_axis(const Attributes& a, int rank) {
  const auto axis = static_cast<int>(a.get_int("axis"));
  return axis < 0 ? axis + rank : axis;
}

GroupLayout layout_of(const Shape& x, const Attributes& a) {
  GroupLayout l;
  const int axis = channel_axis(a, x.rank());
  l.batch = x[0];
  for (int i = 1; i < axis; ++i) l.pre *= x[i];
  l.channels = x[axis];
  for (int i = axis + 1; i < x.rank(); ++i) l.post *= x[i];
  l.groups = a.get_int("groups");
  return l;
}

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

// The kernels work on blocks: a run of whole groups [g0, g1) of one sample n. For channels_last (post = 1) a block
// holds as many groups as fit in group_lanes channels, and its sums run in lanes, one per channel, over the
// positions, each group's lanes added up at the end in channel order: a sum in element order cannot vectorize (the
// compiler keeps its order), lanes can, and a block of several small groups keeps several vectors of lanes in
// flight at once. On the norms benchmark's (32, 256, 64) with 8 groups, GroupNorm took 4.7 ms a call element by
// element and 1.2 ms in one group's lanes (9f90d58); measured side by side later, one group's lanes 0.55 ms and a
// block's 0.27 (its gradients 0.96 and 0.69 ms against 0.52 and 0.40). A channel's lane and a group's order of lanes
// are the same however groups fall into blocks, so the results do not depend on the blocks (nor on the threads).
// Otherwise (a group wider than the lanes, or channels_first) a block is one group, summed element by element.
constexpr std::int64_t group_lanes = 64;

struct GroupBlock {
  std::int64_t n = 0, g0 = 0, g1 = 0;
};

// Groups in a block: as many as fit in the lanes, at most `most`.
std::int64_t groups_per_block(const GroupLayout& l, std::int64_t most) {
  if (l.post != 1 || l.group_channels() > group_lanes) return 1;
  return std::max<std::int64_t>(1, std::min(most, group_lanes / l.group_channels()));
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

struct BlockStats {
  double mean[group_lanes], rstd[group_lanes];  // per group of the block
};

template <class T>
void block_stats(const GroupLayout& l, const T* x, const GroupBlock& b, double epsilon, BlockStats& s) {
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

// Calls body(block) for every block of every sample on kiln's threads; each is independent of the others.
template <class Body>
void for_blocks(const GroupLayout& l, int passes, const Body& body) {
  const std::int64_t per_block = groups_per_block(l, l.groups);
  const std::int64_t blocks = (l.groups + per_block - 1) / per_block;
  const std::int64_t units = l.batch * blocks;
  detail::parallel_for(units, detail::workers_for_elements(l.batch * l.groups * l.group_size(), passes),
                       [&](std::int64_t begin, std::int64_t end, int) {
                         for (std::int64_t u = begin; u < end; ++u) {
                           const std::int64_t g0 = u % blocks * per_block;
                           body(GroupBlock{u / blocks, g0, std::min(l.groups, g0 + per_block)});
                         }
                       });
}

template <class T>
void group_norm_kernel(const KernelContext& k) {
  const GroupLayout l = layout_of(k.input_shape(0), k.attributes());
  const double epsilon = k.attributes().get_double("epsilon");
  const T* x = k.in<T>(0);
  const T* gamma = k.in<T>(1);
  const T* beta = k.in<T>(2);
  T* y = k.out<T>();
  for_blocks(l, 3, [&](const GroupBlock& b) {
    BlockStats s;
    block_stats(l, x, b, epsilon, s);
    const PerChannel<T> mean(l, b, s.mean), rstd(l, b, s.rstd);
    each_in_block(l, b,
                  [&](std::int64_t c, std::int64_t at) { y[at] = (x[at] - mean(c)) * rstd(c) * gamma[c] + beta[c]; });
  });
}

template <class T>
void group_norm_grad_kernel(const KernelContext& k) {
  const GroupLayout l = layout_of(k.input_shape(0), k.attributes());
  const double epsilon = k.attributes().get_double("epsilon");
  const T* x = k.in<T>(0);
  const T* gamma = k.in<T>(1);
  const T* dy = k.in<T>(2);
  T* dx = k.out<T>();
  const auto count = static_cast<double>(l.group_size());
  for_blocks(l, 4, [&](const GroupBlock& b) {
    BlockStats s;
    block_stats(l, x, b, epsilon, s);
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
  });
}

// Split over (sample, block of groups) units, as the forward kernels are: each worker adds its units, in order,
// into per-channel partial sums of its own (in the workspace, 64 bytes apart), and the partials are added in
// worker order. The sums depend on the thread count only; with one worker they run over the samples in order, as
// a serial loop would. (Splitting over groups alone kept at most groups ÷ block workers busy, 2 on the norms
// benchmark's (32, 256, 64).)
std::int64_t padded_doubles(std::int64_t count) { return (count + 7) / 8 * 8; }

struct ParamGradSplit {
  std::int64_t per_block, blocks, units;
  int max_workers;
};

ParamGradSplit param_grad_split(const GroupLayout& l) {
  ParamGradSplit split;
  split.per_block = groups_per_block(l, l.groups);
  split.blocks = (l.groups + split.per_block - 1) / split.per_block;
  split.units = l.batch * split.blocks;
  split.max_workers = detail::workers_for_elements(l.batch * l.pre * l.channels * l.post, 4);
  return split;
}

template <class T>
void group_norm_param_grad_kernel(const KernelContext& k) {
  const GroupLayout l = layout_of(k.input_shape(0), k.attributes());
  const double epsilon = k.attributes().get_double("epsilon");
  const T* x = k.in<T>(0);
  const T* dy = k.in<T>(1);
  T* out = k.out<T>();  // row 0: dgamma, row 1: dbeta
  const std::int64_t c_total = l.channels;
  const std::int64_t stride = padded_doubles(2 * c_total);
  const ParamGradSplit split = param_grad_split(l);
  auto start = reinterpret_cast<std::uintptr_t>(k.workspace);
  double* partials = reinterpret_cast<double*>((start + 63) / 64 * 64);
  const std::size_t used = static_cast<std::size_t>(reinterpret_cast<std::uintptr_t>(partials) - start);
  const std::size_t room = k.workspace_bytes > used ? k.workspace_bytes - used : 0;
  const auto capacity = static_cast<int>(room / (static_cast<std::size_t>(stride) * sizeof(double)));
  if (capacity < 1) throw Error("GroupNormParamGrad: the workspace holds no worker's sums (a planning bug)");
  const int workers = detail::parallel_workers(split.units, std::min(capacity, split.max_workers));
  std::fill(partials, partials + stride * workers, 0.0);
  detail::parallel_for(split.units, workers, [&](std::int64_t begin, std::int64_t end, int worker) {
    double* sums = partials + stride * worker;
    for (std::int64_t u = begin; u < end; ++u) {
      const std::int64_t first = u % split.blocks * split.per_block;
      const GroupBlock b{u / split.blocks, first, std::min(l.groups, first + split.per_block)};
      BlockStats s;
      block_stats(l, x, b, epsilon, s);
      const PerChannel<double> mean(l, b, s.mean), rstd(l, b, s.rstd);
      each_in_block(l, b, [&](std::int64_t c, std::int64_t at) {
        const auto grad = static_cast<double>(dy[at]);
        sums[c] += grad * (static_cast<double>(x[at]) - mean(c)) * rstd(c);
        sums[c_total + c] += grad;
      });
    }
  });
  for (std::int64_t c = 0; c < 2 * c_total; ++c) {
    double total = 0.0;
    for (int w = 0; w < workers; ++w) total += partials[stride * w + c];
    out[c] = static_cast<T>(total);
  }
}

// Room for the partial sums of the workers the plan's thread count gives.
std::size_t param_grad_workspace(const std::vector<Shape>& input_shapes, const Shape&, const Attributes& a, DType) {
  const GroupLayout l = layout_of(input_shapes[0], a);
  const ParamGradSplit split = param_grad_split(l);
  const int workers = detail::parallel_workers(split.units, split.max_workers);
  return static_cast<std::size_t>(padded_doubles(2 * l.channels) * workers) * sizeof(double) + 64;
}

// ---- shape rules ----------------------------------------------------------------------------------------

// Checks x, the axis and the groups; returns the channel count.
std::int64_t checked_channels(const InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  const std::int64_t axis = ctx.attributes().get_int("axis");
  const std::int64_t groups = ctx.attributes().get_int("groups");
  if (x.rank() < 2) ctx.fail("x must have a batch axis and a channel axis, got rank " + std::to_string(x.rank()));
  if (axis < -x.rank() || axis >= x.rank())
    ctx.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(x.rank()));
  if (channel_axis(ctx.attributes(), x.rank()) == 0) ctx.fail("the channel axis cannot be the batch axis 0");
  const std::int64_t channels = x[channel_axis(ctx.attributes(), x.rank())];
  if (channels == Shape::unknown) ctx.fail("the channel axis must be known");
  if (groups < 1 || groups > channels)
    ctx.fail("groups must be in [1, " + std::to_string(channels) + "] (the channels), got " + std::to_string(groups));
  if (channels % groups != 0)
    ctx.fail("the " + std::to_string(channels) + " channels do not divide into " + std::to_string(groups) + " groups");
  return channels;
}

Shape group_norm_shape(const InferContext& ctx) {
  const Shape features{checked_channels(ctx)};
  if (ctx.input_shape(1) != features || ctx.input_shape(2) != features)
    ctx.fail("gamma and beta must have shape " + features.to_string());
  return ctx.input_shape(0);
}

// Inputs: x, gamma, dy.
Shape group_norm_grad_shape(const InferContext& ctx) {
  const Shape features{checked_channels(ctx)};
  if (ctx.input_shape(1) != features) ctx.fail("gamma must have shape " + features.to_string());
  if (ctx.input_shape(2) != ctx.input_shape(0)) ctx.fail("the gradient and x differ in shape");
  return ctx.input_shape(0);
}

// Inputs: x, dy.
Shape group_norm_param_grad_shape(const InferContext& ctx) {
  const std::int64_t channels = checked_channels(ctx);
  if (ctx.input_shape(1) != ctx.input_shape(0)) ctx.fail("the gradient and x differ in shape");
  return Shape{2, channels};
}

// ---- backward -------------------------------------------------------------------------------------------

Attributes same_attributes(const Attributes& a) {
  return Attributes()
      .set("groups", a.get_int("groups"))
      .set("axis", a.get_int("axis"))
      .set("epsilon", a.get_double("epsilon"));
}

std::vector<Tensor> group_norm_backward(const GradContext& g) {
  const Tensor x = g.input(0), gamma = g.input(1), dy = g.output_grad();
  Graph& graph = x.graph();
  const Attributes a = same_attributes(g.attributes());
  std::vector<Tensor> grads(3);
  if (g.needs_grad(0)) grads[0] = graph.add_op("kiln>GroupNormGrad", {x, gamma, dy}, a, "group_norm_grad");
  if (g.needs_grad(1) || g.needs_grad(2)) {
    const Tensor sums = graph.add_op("kiln>GroupNormParamGrad", {x, dy}, a, "group_norm_param_grad");
    const std::int64_t c = gamma.shape()[0];
    if (g.needs_grad(1)) grads[1] = ops::reshape(ops::slice(sums, {0, 0}, {1, c}), {c});
    if (g.needs_grad(2)) grads[2] = ops::reshape(ops::slice(sums, {1, 0}, {1, c}), {c});
  }
  return grads;
}

constexpr const char* second_order = "second-order gradients of group_norm are not implemented";

}  // namespace

KILN_REGISTER_OP(OpDef("kiln>GroupNorm")
                     .inputs(3)
                     .attributes({"groups", "axis", "epsilon"})
                     .infer_shape(group_norm_shape)
                     .forward(group_norm_kernel<float>, group_norm_kernel<double>)
                     .backward(group_norm_backward));
KILN_REGISTER_OP(OpDef("kiln>GroupNormGrad")
                     .inputs(3)
                     .attributes({"groups", "axis", "epsilon"})
                     .infer_shape(group_norm_grad_shape)
                     .forward(group_norm_grad_kernel<float>, group_norm_grad_kernel<double>)
                     .not_differentiable(second_order));
KILN_REGISTER_OP(OpDef("kiln>GroupNormParamGrad")
                     .inputs(2)
                     .attributes({"groups", "axis", "epsilon"})
                     .infer_shape(group_norm_param_grad_shape)
                     .forward(group_norm_param_grad_kernel<float>, group_norm_param_grad_kernel<double>)
                     .not_differentiable(second_order)
                     .workspace(param_grad_workspace));

namespace ops {

Tensor group_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, std::int64_t groups, int axis,
                  double epsilon) {
  if (!(epsilon > 0.0))
    throw ConfigError("group_norm on " + x.node().describe() + ": epsilon must be positive, got " +
                      std::to_string(epsilon));
  return x.graph().add_op("kiln>GroupNorm", {x, gamma, beta},
                          Attributes().set("groups", groups).set("axis", axis).set("epsilon", epsilon), "group_norm");
}

}  // namespace ops
}  // namespace kiln
