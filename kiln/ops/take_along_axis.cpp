// take_along_axis: NumPy's and Keras's take_along_axis, x's entries at integer-valued positions along one axis
// (keras-hub's MaskedLMHead gathers the masked tokens' vectors with it), and its gradient, a scatter-add along that
// axis. Kernels walk x as `outer` blocks of `extent` x `inner` elements and the output as `outer` blocks of `picks` x
// `inner`; the indices' offsets follow with a stride of 0 along their size-1 axes, which stretch to x's sizes as
// NumPy's broadcasting does, so no stretched copy of the indices is made.
#include <algorithm>
#include <array>
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

constexpr int kMaxRank = 12;

// x's shape with indices' size on the axis; both of one rank, and off the axis indices of x's size or 1 (stretched).
// An unknown size matches any: the sizes fed are checked again when the program runs.
Shape picked_shape(const InferContext& ctx, const Shape& x, const Shape& indices) {
  const std::int64_t given = ctx.attributes().get_int("axis");
  if (x.rank() == 0) ctx.fail("x must have at least one axis to take along");
  if (x.rank() > kMaxRank) ctx.fail("x has rank " + std::to_string(x.rank()) + "; take_along_axis takes up to " + std::to_string(kMaxRank));
  if (given < -x.rank() || given >= x.rank())
    ctx.fail("axis " + std::to_string(given) + " is out of range for rank " + std::to_string(x.rank()));
  if (indices.rank() != x.rank())
    ctx.fail("indices must have x's rank (" + std::to_string(x.rank()) + "), got rank " + std::to_string(indices.rank()));
  const int axis = axis_of(ctx.attributes(), x.rank());
  std::vector<std::int64_t> dims = x.dims();
  for (int a = 0; a < x.rank(); ++a) {
    const auto at = static_cast<std::size_t>(a);
    if (a == axis) {
      dims[at] = indices[a];
    } else if (indices[a] == 1 || indices[a] == x[a] || indices[a] == Shape::unknown) {
      // x's size (the stretched or matching one).
    } else if (x[a] == Shape::unknown) {
      dims[at] = indices[a];
    } else {
      ctx.fail("indices must have x's size or 1 on every axis but " + std::to_string(given) + " (axis " +
               std::to_string(a) + ": " + std::to_string(indices[a]) + " against " + std::to_string(x[a]) + ")");
    }
  }
  return Shape(std::move(dims));
}

// The indices' offsets over a run of the output's axes [from, to) in row-major order: stride 0 along an axis
// where the indices have size 1 (stretched), so one index serves the whole run of that axis.
struct OffsetWalk {
  int count = 0;
  std::array<std::int64_t, kMaxRank> dims{}, strides{}, at{};
  std::int64_t offset = 0;

  OffsetWalk(const Shape& out, const Shape& indices, int from, int to) {
    for (int a = from; a < to; ++a, ++count) {
      std::int64_t stride = 1;
      for (int b = a + 1; b < indices.rank(); ++b) stride *= indices[b];
      dims[static_cast<std::size_t>(count)] = out[a];
      strides[static_cast<std::size_t>(count)] = indices[a] == 1 ? 0 : stride;
    }
  }
  void reset() {
    at.fill(0);
    offset = 0;
  }
  void next() {
    for (int d = count - 1; d >= 0; --d) {
      const auto i = static_cast<std::size_t>(d);
      if (++at[i] < dims[i]) {
        offset += strides[i];
        return;
      }
      offset -= strides[i] * (dims[i] - 1);
      at[i] = 0;
    }
  }
};

// The stride of the indices along the axis (their size there is the output's).
std::int64_t axis_stride(const Shape& indices, int axis) {
  std::int64_t stride = 1;
  for (int b = axis + 1; b < indices.rank(); ++b) stride *= indices[b];
  return stride;
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

// Visits every output element as (its offset in the output, its position along the axis in x's block, x's offset
// of that block's column): `visit(out_offset, x_offset)`.
template <class T, class Visit>
void walk(const KernelContext& k, const Shape& x_shape, const Shape& out_shape, const Shape& indices_shape,
          const T* indices, Visit visit) {
  const int axis = axis_of(k.attributes(), x_shape.rank());
  const detail::AxisSplit split = detail::split_at_axis(x_shape, axis);
  const std::int64_t picks = out_shape[axis], step = axis_stride(indices_shape, axis);
  OffsetWalk outer(out_shape, indices_shape, 0, axis), inner(out_shape, indices_shape, axis + 1, x_shape.rank());
  outer.reset();
  for (std::int64_t o = 0; o < split.outer; ++o, outer.next())
    for (std::int64_t m = 0; m < picks; ++m) {
      const std::int64_t base = (o * picks + m) * split.inner;
      inner.reset();
      for (std::int64_t i = 0; i < split.inner; ++i, inner.next()) {
        const auto at = static_cast<std::size_t>(outer.offset + m * step + inner.offset);
        const std::int64_t p = position_at(k, indices, at, split.extent, x_shape);
        visit(base + i, (o * split.extent + p) * split.inner + i);
      }
    }
}

template <class T>
void take_kernel(const KernelContext& k) {
  const T* x = k.in<T>(0);
  T* out = k.out<T>();
  walk(k, k.input_shape(0), *k.output_shape, k.input_shape(1), k.in<T>(1),
       [&](std::int64_t to, std::int64_t from) { out[to] = x[from]; });
}

// Repeated positions accumulate: every pick of an entry sends its gradient there.
template <class T>
void put_add_kernel(const KernelContext& k) {
  const T* dy = k.in<T>(0);
  T* out = k.out<T>();
  std::fill(out, out + k.output_size(), T(0));
  walk(k, *k.output_shape, k.input_shape(0), k.input_shape(1), k.in<T>(1),
       [&](std::int64_t from, std::int64_t to) { out[to] += dy[from]; });
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
  return x.graph().add_op("kiln>TakeAlongAxis", {x, indices}, Attributes().set("axis", axis), "take_along_axis");
}

}  // namespace ops
}  // namespace kiln
