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
#include <kiln/ops/detail/group_norm_blocks.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {
namespace {

using detail::GroupBlock;
using detail::GroupLayout;
using detail::groups_per_block;

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

// The blocks' kernels: kiln/ops/detail/isa/group_norm_blocks.inl, dispatched by instruction set (isa.hpp).
template <class T>
void group_norm_kernel(const KernelContext& k) {
  const GroupLayout l = layout_of(k.input_shape(0), k.attributes());
  const double epsilon = k.attributes().get_double("epsilon");
  const T* x = k.in<T>(0);
  const T* gamma = k.in<T>(1);
  const T* beta = k.in<T>(2);
  T* y = k.out<T>();
  const auto block_kernel = detail::group_norm_blocks<T>().forward;
  for_blocks(l, 3, [&](const GroupBlock& b) { block_kernel(l, x, gamma, beta, y, b, epsilon); });
}

template <class T>
void group_norm_grad_kernel(const KernelContext& k) {
  const GroupLayout l = layout_of(k.input_shape(0), k.attributes());
  const double epsilon = k.attributes().get_double("epsilon");
  const T* x = k.in<T>(0);
  const T* gamma = k.in<T>(1);
  const T* dy = k.in<T>(2);
  T* dx = k.out<T>();
  const auto block_kernel = detail::group_norm_blocks<T>().grad;
  for_blocks(l, 4, [&](const GroupBlock& b) { block_kernel(l, x, gamma, dy, dx, b, epsilon); });
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
  const auto block_kernel = detail::group_norm_blocks<T>().param_grad;
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
      block_kernel(l, x, dy, sums, GroupBlock{u / split.blocks, first, std::min(l.groups, first + split.per_block)},
                   epsilon);
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
