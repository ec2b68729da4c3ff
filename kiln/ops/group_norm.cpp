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

// Σ value(channel, index) over sample n's group g, in double. For channels_last the sum runs in lanes, one per
// channel of the group (up to group_lanes at a time), added up at the end: a sum in element order cannot
// vectorize (the compiler keeps its order), lanes can: the norms benchmark's GroupNorm of (32, 256, 64) took
// 4.7 ms element by element and 1.2 ms in lanes, its gradients 3.4-3.8× less.
constexpr std::int64_t group_lanes = 64;

template <class F>
double group_sum(const GroupLayout& l, std::int64_t n, std::int64_t g, F&& value) {
  double total = 0;
  if (l.post != 1) {
    each_in_group(l, n, g, [&](std::int64_t c, std::int64_t at) { total += value(c, at); });
    return total;
  }
  const std::int64_t first_channel = g * l.group_channels();
  for (std::int64_t c0 = 0; c0 < l.group_channels(); c0 += group_lanes) {
    const std::int64_t width = std::min(group_lanes, l.group_channels() - c0);
    double lanes[group_lanes] = {};
    for (std::int64_t p = 0; p < l.pre; ++p) {
      const std::int64_t base = (n * l.pre + p) * l.channels + first_channel + c0;
      for (std::int64_t c = 0; c < width; ++c) lanes[c] += value(first_channel + c0 + c, base + c);
    }
    for (std::int64_t c = 0; c < width; ++c) total += lanes[c];
  }
  return total;
}

struct GroupStats {
  double mean = 0, rstd = 0;
};

template <class T>
GroupStats group_stats(const GroupLayout& l, const T* x, std::int64_t n, std::int64_t g, double epsilon) {
  const auto count = static_cast<double>(l.group_size());
  const double sum = group_sum(l, n, g, [&](std::int64_t, std::int64_t at) { return static_cast<double>(x[at]); });
  const double mean = count > 0 ? sum / count : 0.0;
  const double squares = group_sum(l, n, g, [&](std::int64_t, std::int64_t at) {
    const double d = static_cast<double>(x[at]) - mean;
    return d * d;
  });
  return {mean, 1.0 / std::sqrt((count > 0 ? squares / count : 0.0) + epsilon)};
}

// Calls body(n, g) for every (sample, group) on kiln's threads; each is independent of the others.
template <class Body>
void for_groups(const GroupLayout& l, int passes, const Body& body) {
  const std::int64_t units = l.batch * l.groups;
  detail::parallel_for(units, detail::workers_for_elements(units * l.group_size(), passes),
                       [&](std::int64_t begin, std::int64_t end, int) {
                         for (std::int64_t u = begin; u < end; ++u) body(u / l.groups, u % l.groups);
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
  for_groups(l, 3, [&](std::int64_t n, std::int64_t g) {
    const GroupStats s = group_stats(l, x, n, g, epsilon);
    const auto mean = static_cast<T>(s.mean);
    const auto rstd = static_cast<T>(s.rstd);
    each_in_group(l, n, g,
                  [&](std::int64_t c, std::int64_t at) { y[at] = (x[at] - mean) * rstd * gamma[c] + beta[c]; });
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
  for_groups(l, 4, [&](std::int64_t n, std::int64_t g) {
    const GroupStats s = group_stats(l, x, n, g, epsilon);
    const double sum_g = group_sum(l, n, g, [&](std::int64_t c, std::int64_t at) {
      return static_cast<double>(dy[at]) * static_cast<double>(gamma[c]);
    });
    const double sum_g_xhat = group_sum(l, n, g, [&](std::int64_t c, std::int64_t at) {
      return static_cast<double>(dy[at]) * static_cast<double>(gamma[c]) * (static_cast<double>(x[at]) - s.mean) *
             s.rstd;
    });
    const auto mean = static_cast<T>(s.mean);
    const auto rstd = static_cast<T>(s.rstd);
    const auto mean_g = static_cast<T>(sum_g / count);
    const auto mean_g_xhat = static_cast<T>(sum_g_xhat / count);
    each_in_group(l, n, g, [&](std::int64_t c, std::int64_t at) {
      const T xhat = (x[at] - mean) * rstd;
      dx[at] = rstd * (dy[at] * gamma[c] - mean_g - xhat * mean_g_xhat);
    });
  });
}

// Split over groups, not samples: a worker owns its groups' channels, so the per-channel sums never
// depend on the thread count.
template <class T>
void group_norm_param_grad_kernel(const KernelContext& k) {
  const GroupLayout l = layout_of(k.input_shape(0), k.attributes());
  const double epsilon = k.attributes().get_double("epsilon");
  const T* x = k.in<T>(0);
  const T* dy = k.in<T>(1);
  T* out = k.out<T>();  // row 0: dgamma, row 1: dbeta
  double* sums = k.scratch<double>();
  const std::int64_t c_total = l.channels;
  detail::parallel_for(l.groups, detail::workers_for_elements(l.batch * l.pre * l.channels * l.post, 4),
                       [&](std::int64_t g0, std::int64_t g1, int) {
                         const std::int64_t c0 = g0 * l.group_channels(), c1 = g1 * l.group_channels();
                         std::fill(sums + c0, sums + c1, 0.0);
                         std::fill(sums + c_total + c0, sums + c_total + c1, 0.0);
                         for (std::int64_t g = g0; g < g1; ++g)
                           for (std::int64_t n = 0; n < l.batch; ++n) {
                             const GroupStats s = group_stats(l, x, n, g, epsilon);
                             each_in_group(l, n, g, [&](std::int64_t c, std::int64_t at) {
                               const auto grad = static_cast<double>(dy[at]);
                               sums[c] += grad * (static_cast<double>(x[at]) - s.mean) * s.rstd;
                               sums[c_total + c] += grad;
                             });
                           }
                         for (std::int64_t c = c0; c < c1; ++c) {
                           out[c] = static_cast<T>(sums[c]);
                           out[c_total + c] = static_cast<T>(sums[c_total + c]);
                         }
                       });
}

std::size_t param_grad_workspace(const std::vector<Shape>& input_shapes, const Shape&, const Attributes& a, DType) {
  return 2 * static_cast<std::size_t>(layout_of(input_shapes[0], a).channels) * sizeof(double);
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
