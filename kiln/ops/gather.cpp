// gather: rows of params picked by integer-valued indices (embeddings), and its gradient, a scatter-add.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/op.hpp>
#include <kiln/ops/detail/kernel_util.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

namespace {

// indices.shape + params.shape[1:]
Shape gathered_shape(const Shape& params, const Shape& indices) {
  std::vector<std::int64_t> dims = indices.dims();
  dims.insert(dims.end(), params.dims().begin() + 1, params.dims().end());
  return Shape(std::move(dims));
}

Shape gather_shape(const InferContext& ctx) {
  if (ctx.input_shape(0).rank() == 0) ctx.fail("params must have at least one axis to pick rows from");
  return gathered_shape(ctx.input_shape(0), ctx.input_shape(1));
}

// Inputs: the gradient of a gather's output, its indices, and params (for the shape only).
Shape scatter_add_shape(const InferContext& ctx) {
  const Shape& like = ctx.input_shape(2);
  if (like.rank() == 0 || ctx.input_shape(0) != gathered_shape(like, ctx.input_shape(1)))
    ctx.fail("the gradient does not have the shape indices.shape + params.shape[1:]");
  return like;
}

struct Rows {
  std::int64_t count = 0;
  std::int64_t size = 1;  // elements per row
};

Rows rows_of(const Shape& params) {
  Rows rows;
  rows.count = params[0];
  for (int axis = 1; axis < params.rank(); ++axis) rows.size *= params[axis];
  return rows;
}

// Only reached on bad data, so building the message may allocate.
[[noreturn]] void throw_bad_index(const KernelContext& k, double value, std::size_t position, const Shape& params) {
  std::ostringstream message;
  message << k.node->describe() << ": index " << value << " at position " << position;
  if (value == std::floor(value))
    message << " is out of range [0, " << params[0] << ")";
  else
    message << " is not an integer";
  message << " for params of shape " << params.to_string();
  throw ValueError(message.str());
}

// Indices are data, not shapes: they can only be checked here, at run time.
template <class T>
std::int64_t row_at(const KernelContext& k, const T* indices, std::size_t position, const Shape& params) {
  const double value = static_cast<double>(indices[position]);
  if (!(value >= 0.0 && value < static_cast<double>(params[0]) && value == std::floor(value)))
    throw_bad_index(k, value, position, params);
  return static_cast<std::int64_t>(value);
}

template <class T>
void gather_kernel(const KernelContext& k) {
  const Shape& params_shape = k.input_shape(0);
  const T* params = k.in<T>(0);
  const T* indices = k.in<T>(1);
  T* out = k.out<T>();
  const Rows rows = rows_of(params_shape);
  const std::size_t count = detail::num_elements(k.input_shape(1));
  for (std::size_t i = 0; i < count; ++i) {
    const T* row = params + row_at(k, indices, i, params_shape) * rows.size;
    std::copy(row, row + rows.size, out + static_cast<std::int64_t>(i) * rows.size);
  }
}

// Repeated indices accumulate: every pick of a row sends its gradient there.
template <class T>
void scatter_add_kernel(const KernelContext& k) {
  const Shape& params_shape = *k.output_shape;
  const T* dy = k.in<T>(0);
  const T* indices = k.in<T>(1);
  T* out = k.out<T>();
  std::fill(out, out + k.output_size(), T(0));
  const Rows rows = rows_of(params_shape);
  const std::size_t count = detail::num_elements(k.input_shape(1));
  for (std::size_t i = 0; i < count; ++i) {
    T* row = out + row_at(k, indices, i, params_shape) * rows.size;
    const T* source = dy + static_cast<std::int64_t>(i) * rows.size;
    for (std::int64_t j = 0; j < rows.size; ++j) row[j] += source[j];
  }
}

std::vector<Tensor> gather_backward(const GradContext& g) {
  const Tensor dy = g.output_grad();
  return {dy.graph().add_op("kiln>ScatterAdd", {dy, g.input(1), g.input(0)}, {}, "scatter_add"), Tensor{}};
}

std::vector<Tensor> scatter_add_backward(const GradContext& g) {
  return {ops::gather(g.output_grad(), g.input(1)), Tensor{}, Tensor{}};
}

}  // namespace

KILN_REGISTER_OP(OpDef("kiln>Gather")
                     .inputs(2)
                     .infer_shape(gather_shape)
                     .forward(gather_kernel<float>, gather_kernel<double>)
                     .backward(gather_backward)
                     .non_differentiable_inputs({1}, "integer indices"));
KILN_REGISTER_OP(OpDef("kiln>ScatterAdd")
                     .inputs(3)
                     .infer_shape(scatter_add_shape)
                     .forward(scatter_add_kernel<float>, scatter_add_kernel<double>)
                     .backward(scatter_add_backward)
                     .non_differentiable_inputs({1, 2}, "integer indices, and a shape reference"));

namespace ops {

Tensor gather(const Tensor& params, const Tensor& indices) {
  return params.graph().add_op("kiln>Gather", {params, indices}, {}, "gather");
}

}  // namespace ops
}  // namespace kiln
