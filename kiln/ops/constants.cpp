// Constants and fills.
#include <algorithm>
#include <string>

#include <kiln/core/array.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/op.hpp>
#include <kiln/ops/detail/kernel_util.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

namespace {
template <class T>
void fill_like_kernel(const KernelContext& k) {
  const T value = static_cast<T>(k.attributes().get_double("value"));
  T* out = k.out<T>();
  std::fill(out, out + k.output_size(), value);
}

// The run-time size of one axis, as a () value.
template <class T>
void dim_size_kernel(const KernelContext& k) {
  const Shape& x = k.input_shape(0);
  *k.out<T>() = static_cast<T>(x[static_cast<int>(k.attributes().get_int("axis"))]);
}

// 0, 1, ..., n - 1 for the run-time size n of one axis.
template <class T>
void positions_kernel(const KernelContext& k) {
  T* out = k.out<T>();
  const std::size_t size = k.output_size();
  for (std::size_t i = 0; i < size; ++i) out[i] = static_cast<T>(i);
}

// The "axis" attribute of an op that reads one axis of its input's size, checked against the input.
int read_axis(const InferContext& ctx) {
  const std::int64_t axis = ctx.attributes().get_int("axis");
  if (axis < 0 || axis >= ctx.input_shape(0).rank())
    ctx.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(ctx.input_shape(0).rank()));
  return static_cast<int>(axis);
}

Shape positions_shape(const InferContext& ctx) { return Shape{ctx.input_shape(0)[read_axis(ctx)]}; }

Shape dim_size_shape(const InferContext& ctx) {
  read_axis(ctx);
  return Shape{};
}
}  // namespace

// A fill shaped like its input at run time, so it follows the batch size.
KILN_REGISTER_OP(OpDef("kiln>FillLike")
                     .inputs(1)
                     .attributes({"value"})
                     .infer_shape(detail::first_input_shape)
                     .forward(fill_like_kernel<float>, fill_like_kernel<double>)
                     .non_differentiable_inputs({0}, "only its shape is read"));

KILN_REGISTER_OP(OpDef("kiln>DimSize")
                     .inputs(1)
                     .attributes({"axis"})
                     .infer_shape(dim_size_shape)
                     .forward(dim_size_kernel<float>, dim_size_kernel<double>)
                     .non_differentiable_inputs({0}, "only its shape is read"));

// Positions along an axis whose size may be known only when a plan is made (a sequence's length).
KILN_REGISTER_OP(OpDef("kiln>Positions")
                     .inputs(1)
                     .attributes({"axis"})
                     .infer_shape(positions_shape)
                     .forward(positions_kernel<float>, positions_kernel<double>)
                     .non_differentiable_inputs({0}, "only its shape is read"));

namespace ops {
Tensor positions(const Tensor& x, int axis) {
  const int resolved = axis < 0 ? axis + x.rank() : axis;
  return x.graph().add_op("kiln>Positions", {x}, Attributes().set("axis", resolved), "positions");
}
Tensor causal_mask_like(const Tensor& scores) {
  if (scores.rank() < 2) throw ShapeError("causal_mask_like: scores " + scores.shape().to_string() + " need two axes");
  const std::int64_t queries = scores.shape().dim(-2), keys = scores.shape().dim(-1);
  if (queries != Shape::unknown && keys != Shape::unknown)
    return causal_mask(scores.graph(), queries, keys, scores.dtype());
  // Key j is visible to query i when j <= i: the two position vectors compared across each other.
  return greater_equal(expand_dims(positions(scores, -2), 1), expand_dims(positions(scores, -1), 0));
}
Tensor dim_size(const Tensor& x, int axis) {
  return x.graph().add_op("kiln>DimSize", {x}, Attributes().set("axis", axis < 0 ? axis + x.rank() : axis), "dim_size");
}
Tensor constant(Graph& graph, const Array& value, const std::string& name) { return graph.constant(value, name); }
Tensor scalar_like(const Tensor& like, double value) { return like.graph().scalar(value, like.dtype()); }
Tensor causal_mask(Graph& graph, std::int64_t query_length, std::int64_t key_length, DType dtype) {
  Array mask({query_length, key_length}, dtype);
  for (std::int64_t i = 0; i < query_length; ++i)
    for (std::int64_t j = 0; j <= std::min(i, key_length - 1); ++j)
      mask.set_flat(static_cast<std::size_t>(i * key_length + j), 1.0);
  return graph.constant(mask, "causal_mask");
}
Tensor zeros_like(const Tensor& like) {
  return like.graph().add_op("kiln>FillLike", {like}, Attributes().set("value", 0.0), "zeros_like");
}
Tensor ones_like(const Tensor& like) {
  return like.graph().add_op("kiln>FillLike", {like}, Attributes().set("value", 1.0), "ones_like");
}
}  // namespace ops
}  // namespace kiln
