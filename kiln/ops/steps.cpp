// write_steps and read_steps: a run of steps of a sequence (axis 1) written into or read from a buffer at
// a start that is data, not a shape (a decoder's position in its key/value cache). Each is the other's
// gradient.
#include <algorithm>
#include <cmath>
#include <cstring>
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

// buffer (batch, S, ...) and rows (batch, T, ...): the same rank and dimensions but on axis 1, T <= S.
void check_steps(const InferContext& ctx, const Shape& buffer, const Shape& rows, const Shape& start) {
  if (buffer.rank() < 2) ctx.fail("the buffer needs a batch and a steps axis");
  if (rows.rank() != buffer.rank()) ctx.fail("the steps and the buffer differ in rank");
  for (int axis = 0; axis < buffer.rank(); ++axis) {
    if (axis == 1) continue;
    if (buffer[axis] != rows[axis] && buffer[axis] != Shape::unknown && rows[axis] != Shape::unknown)
      ctx.fail("the steps and the buffer differ off the steps axis");
  }
  if (rows[1] == Shape::unknown || buffer[1] == Shape::unknown) ctx.fail("the steps axes must be known");
  if (rows[1] > buffer[1]) ctx.fail("more steps than the buffer holds");
  for (std::int64_t d : start.dims())
    if (d != 1) ctx.fail("the start must be one number");
}

// Inputs: buffer, rows, start.
Shape write_steps_shape(const InferContext& ctx) {
  check_steps(ctx, ctx.input_shape(0), ctx.input_shape(1), ctx.input_shape(2));
  return ctx.input_shape(0);
}

// Inputs: buffer, start; attribute "steps".
Shape read_steps_shape(const InferContext& ctx) {
  const Shape& buffer = ctx.input_shape(0);
  std::vector<std::int64_t> dims = buffer.dims();
  if (dims.size() < 2) ctx.fail("the buffer needs a batch and a steps axis");
  dims[1] = ctx.attributes().get_int("steps");
  if (dims[1] < 1) ctx.fail("steps must be positive");
  const Shape rows(dims);
  check_steps(ctx, buffer, rows, ctx.input_shape(1));
  return rows;
}

// The start, read at run time: a whole number with the run inside the buffer.
template <class T>
std::int64_t start_of(const KernelContext& k, const T* start, std::int64_t steps, std::int64_t extent) {
  const double value = static_cast<double>(start[0]);
  if (!(value >= 0.0 && value == std::floor(value) && value + static_cast<double>(steps) <= static_cast<double>(extent))) {
    std::ostringstream message;
    message << k.node->describe() << ": start " << value << " with " << steps << " steps does not fit " << extent
            << " steps, or is not a whole number";
    throw ValueError(message.str());
  }
  return static_cast<std::int64_t>(value);
}

// Per batch row, the buffer is `extent` blocks of `width` elements (everything after axis 1).
struct StepLayout {
  std::int64_t batch = 0, extent = 0, width = 1;
};

StepLayout layout_of(const Shape& buffer) {
  StepLayout layout;
  layout.batch = buffer[0];
  layout.extent = buffer[1];
  for (int axis = 2; axis < buffer.rank(); ++axis) layout.width *= buffer[axis];
  return layout;
}

// The output is the buffer (copied unless the planner gave input 0's memory) with the run overwritten.
template <class T>
void write_steps_kernel(const KernelContext& k) {
  const StepLayout b = layout_of(k.input_shape(0));
  const std::int64_t steps = k.input_shape(1)[1];
  const std::int64_t start = start_of(k, k.in<T>(2), steps, b.extent);
  const T* buffer = k.in<T>(0);
  const T* rows = k.in<T>(1);
  T* out = k.out<T>();
  if (out != buffer) std::memcpy(out, buffer, k.output_size() * sizeof(T));
  const std::size_t run = static_cast<std::size_t>(steps * b.width);
  for (std::int64_t r = 0; r < b.batch; ++r)
    std::memcpy(out + (r * b.extent + start) * b.width, rows + r * steps * b.width, run * sizeof(T));
}

template <class T>
void read_steps_kernel(const KernelContext& k) {
  const StepLayout b = layout_of(k.input_shape(0));
  const std::int64_t steps = (*k.output_shape)[1];
  const std::int64_t start = start_of(k, k.in<T>(1), steps, b.extent);
  const T* buffer = k.in<T>(0);
  T* out = k.out<T>();
  const std::size_t run = static_cast<std::size_t>(steps * b.width);
  for (std::int64_t r = 0; r < b.batch; ++r)
    std::memcpy(out + r * steps * b.width, buffer + (r * b.extent + start) * b.width, run * sizeof(T));
}

// d buffer: dy with the written run zeroed; d rows: the run of dy.
std::vector<Tensor> write_steps_backward(const GradContext& g) {
  const Tensor dy = g.output_grad();
  const Tensor start = g.input(2);
  std::vector<Tensor> grads(3);
  if (g.needs_grad(0)) grads[0] = ops::write_steps(dy, ops::zeros_like(g.input(1)), start);
  if (g.needs_grad(1)) grads[1] = ops::read_steps(dy, start, g.input(1).shape()[1]);
  return grads;
}

// d buffer: zeros with dy written at the run.
std::vector<Tensor> read_steps_backward(const GradContext& g) {
  return {ops::write_steps(ops::zeros_like(g.input(0)), g.output_grad(), g.input(1)), Tensor{}};
}

}  // namespace

KILN_REGISTER_OP(OpDef("kiln>WriteSteps")
                     .inputs(3)
                     .infer_shape(write_steps_shape)
                     .forward(write_steps_kernel<float>, write_steps_kernel<double>)
                     .backward(write_steps_backward)
                     .non_differentiable_inputs({2}, "a start position")
                     .sharing(Sharing::inplace));
KILN_REGISTER_OP(OpDef("kiln>ReadSteps")
                     .inputs(2)
                     .attributes({"steps"})
                     .infer_shape(read_steps_shape)
                     .forward(read_steps_kernel<float>, read_steps_kernel<double>)
                     .backward(read_steps_backward)
                     .non_differentiable_inputs({1}, "a start position"));

namespace ops {

Tensor write_steps(const Tensor& buffer, const Tensor& rows, const Tensor& start) {
  return buffer.graph().add_op("kiln>WriteSteps", {buffer, rows, start}, {}, "write_steps");
}

Tensor read_steps(const Tensor& buffer, const Tensor& start, std::int64_t steps) {
  return buffer.graph().add_op("kiln>ReadSteps", {buffer, start}, Attributes().set("steps", steps), "read_steps");
}

}  // namespace ops

}  // namespace kiln
