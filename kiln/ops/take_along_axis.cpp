// take_along_axis: NumPy's and Keras's take_along_axis, x's entries at integer-valued positions along one axis
// (keras-hub's MaskedLMHead gathers the masked tokens' vectors with it), and its gradient, a scatter-add along that
// axis. Kernels walk x as `outer` blocks of `extent` x `inner` elements, the indices and the output as `outer`
// blocks of `picks` x `inner`.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include <kiln/core/attributes.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/op.hpp>
#include <kiln/ops/detail/kernel_util.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

namespace {

int axis_of(const Attributes& attributes, int rank) {
  const auto axis = static_cast<int>(attributes.get_int("axis"));
  return axis < 0 ? axis + rank : axis;
}

// x's shape with indices' size on the axis; both of one rank, the same size off the axis (unknown matches itself).
Shape picked_shape(const InferContext& ctx, const Shape& x, const Shape& indices) {
  const std::int64_t given = ctx.attributes().get_int("axis");
  if (x.rank() == 0) ctx.fail("x must have at least one axis to take along");
  if (given < -x.rank() || given >= x.rank())
    ctx.fail("axis " + std::to_string(given) + " is out of range for rank " + std::to_string(x.rank()));
  if (indices.rank() != x.rank())
    ctx.fail("indices must have x's rank (" + std::to_string(x.rank()) + "), got rank " + std::to_string(indices.rank()));
  const int axis = axis_of(ctx.attributes(), x.rank());
  std::vector<std::int64_t> dims = x.dims();
  for (int a = 0; a < x.rank(); ++a) {
    if (a == axis) {
      dims[static_cast<std::size_t>(a)] = indices[a];
    } else if (indices[a] != x[a]) {
      ctx.fail("indices must have x's size on every axis but " + std::to_string(given) + " (axis " +
               std::to_string(a) + ": " + std::to_string(indices[a]) + " against " + std::to_string(x[a]) + ")");
    }
  }
  return Shape(std::move(dims));
}

Shape take_shape(const InferContext& ctx) { return picked_shape(ctx, ctx.input_shape(0), ctx.input_shape(1)); }

// Inputs: the gradient of a take's output, its indices, and x (for the shape only).
Shape put_add_shape(const InferContext& ctx) {
  const Shape& like = ctx.input_shape(2);
  if (ctx.input_shape(0) != picked_shape(ctx, like, ctx.input_shape(1)))
    ctx.fail("the gradient does not have the shape of x with indices' size on the axis");
  return like;
}

// Only reached on bad data, so building the message may allocate.
[[noreturn]] void throw_bad_index(const KernelContext& k, double value, std::size_t position, std::int64_t extent,
                                  const Shape& x) {
  std::ostringstream message;
  message << k.node->describe() << ": index " << value << " at position " << position;
  if (value == std::floor(value))
    message << " is out of range [" << -extent << ", " << extent << ")";
  else
    message << " is not an integer";
  message << " for an axis of size " << extent << " in x of shape " << x.to_string();
  throw ValueError(message.str());
}

// Indices are data, not shapes: they are checked here, at run time. Negative ones count from the axis's end.
template <class T>
std::int64_t position_at(const KernelContext& k, const T* indices, std::size_t i, std::int64_t extent, const Shape& x) {
  double value = static_cast<double>(indices[i]);
  if (!(value >= static_cast<double>(-extent) && value < static_cast<double>(extent) && value == std::floor(value)))
    throw_bad_index(k, value, i, extent, x);
  if (value < 0) value += static_cast<double>(extent);
  return static_cast<std::int64_t>(value);
}

template <class T>
void take_kernel(const KernelContext& k) {
  const Shape& x_shape = k.input_shape(0);
  const detail::AxisSplit split = detail::split_at_axis(x_shape, axis_of(k.attributes(), x_shape.rank()));
  const std::int64_t picks = (*k.output_shape)[axis_of(k.attributes(), x_shape.rank())];
  const T* x = k.in<T>(0);
  const T* indices = k.in<T>(1);
  T* out = k.out<T>();
  for (std::int64_t o = 0; o < split.outer; ++o)
    for (std::int64_t m = 0; m < picks; ++m) {
      const std::int64_t base = (o * picks + m) * split.inner;
      for (std::int64_t i = 0; i < split.inner; ++i) {
        const std::int64_t p = position_at(k, indices, static_cast<std::size_t>(base + i), split.extent, x_shape);
        out[base + i] = x[(o * split.extent + p) * split.inner + i];
      }
    }
}

// Repeated positions accumulate: every pick of an entry sends its gradient there.
template <class T>
void put_add_kernel(const KernelContext& k) {
  const Shape& x_shape = *k.output_shape;
  const int axis = axis_of(k.attributes(), x_shape.rank());
  const detail::AxisSplit split = detail::split_at_axis(x_shape, axis);
  const std::int64_t picks = k.input_shape(0)[axis];
  const T* dy = k.in<T>(0);
  const T* indices = k.in<T>(1);
  T* out = k.out<T>();
  std::fill(out, out + k.output_size(), T(0));
  for (std::int64_t o = 0; o < split.outer; ++o)
    for (std::int64_t m = 0; m < picks; ++m) {
      const std::int64_t base = (o * picks + m) * split.inner;
      for (std::int64_t i = 0; i < split.inner; ++i) {
        const std::int64_t p = position_at(k, indices, static_cast<std::size_t>(base + i), split.extent, x_shape);
        out[(o * split.extent + p) * split.inner + i] += dy[base + i];
      }
    }
}

Attributes axis_attribute(const GradContext& g) { return Attributes().set("axis", g.attributes().get_int("axis")); }

std::vector<Tensor> take_backward(const GradContext& g) {
  const Tensor dy = g.output_grad();
  return {dy.graph().add_op("kiln>PutAlongAxisAdd", {dy, g.input(1), g.input(0)}, axis_attribute(g), "put_along_axis_add"),
          Tensor{}};
}

std::vector<Tensor> put_add_backward(const GradContext& g) {
  return {g.output_grad().graph().add_op("kiln>TakeAlongAxis", {g.output_grad(), g.input(1)}, axis_attribute(g),
                                         "take_along_axis"),
          Tensor{}, Tensor{}};
}

}  // namespace

KILN_REGISTER_OP(OpDef("kiln>TakeAlongAxis")
                     .inputs(2)
                     .attributes({"axis"})
                     .infer_shape(take_shape)
                     .forward(take_kernel<float>, take_kernel<double>)
                     .backward(take_backward)
                     .non_differentiable_inputs({1}, "integer indices"));
KILN_REGISTER_OP(OpDef("kiln>PutAlongAxisAdd")
                     .inputs(3)
                     .attributes({"axis"})
                     .infer_shape(put_add_shape)
                     .forward(put_add_kernel<float>, put_add_kernel<double>)
                     .backward(put_add_backward)
                     .non_differentiable_inputs({1, 2}, "integer indices, and a shape reference"));

namespace ops {

Tensor take_along_axis(const Tensor& x, const Tensor& indices, int axis) {
  Tensor picks = indices;
  if (x.rank() > 0 && indices.rank() == x.rank()) {
    // NumPy's broadcasting of the indices over x's other axes: a size-1 axis of indices stretches to x's size.
    const int a = axis < 0 ? axis + x.rank() : axis;
    std::vector<std::int64_t> dims = x.shape().dims();
    bool stretch = false;
    for (int d = 0; d < x.rank(); ++d) {
      if (d == a) {
        dims[static_cast<std::size_t>(d)] = indices.shape()[d];
      } else if (indices.shape()[d] == 1 && x.shape()[d] != 1) {
        stretch = true;
      } else {
        dims[static_cast<std::size_t>(d)] = indices.shape()[d];
      }
    }
    if (stretch) picks = broadcast_to(indices, Shape(std::move(dims)));
  }
  return x.graph().add_op("kiln>TakeAlongAxis", {x, picks}, Attributes().set("axis", axis), "take_along_axis");
}

}  // namespace ops
}  // namespace kiln
