// softmax and log_softmax over any axis, with fused backward ops. Kernels walk the input as `outer`
// blocks of `extent` x `inner` elements (the axis being `extent`), so every inner loop is contiguous
// and the same code serves the last axis (inner = 1) and any other.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <kiln/core/attributes.hpp>
#include <kiln/core/detail/op_recording.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/op.hpp>
#include <kiln/core/parallel.hpp>
#include <kiln/ops/detail/kernel_util.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {
namespace {

// ---- layout ---------------------------------------------------------------------------------------------

detail::AxisSplit split_of(const Shape& shape, const Attributes& attributes) {
  const std::int64_t axis = attributes.get_int("axis");
  return detail::split_at_axis(shape, static_cast<int>(axis < 0 ? axis + shape.rank() : axis));
}

// Per-column statistics (a max and a sum for each of the `inner` columns of a block). With inner = 1
// they fit in locals; otherwise they live in the op's workspace, so kernels never touch the heap.
template <class T>
struct ColumnStats {
  T local[2];
  T* first;
  T* second;
  ColumnStats(const KernelContext& k, std::int64_t inner) {
    T* storage = inner == 1 ? local : k.scratch<T>();
    first = storage;
    second = storage + inner;
  }
  ColumnStats(const ColumnStats&) = delete;  // the pointers may point into this object
  ColumnStats& operator=(const ColumnStats&) = delete;
};

std::size_t column_stats_workspace(const std::vector<Shape>& input_shapes, const Shape& /*output_shape*/,
                                   const Attributes& attributes, DType dtype) {
  const detail::AxisSplit split = split_of(input_shapes[0], attributes);
  return split.inner == 1 ? 0 : 2 * static_cast<std::size_t>(split.inner) * dtype_size(dtype);
}

// ---- forward kernels ------------------------------------------------------------------------------------

template <class T>
void column_max(const T* x, std::int64_t extent, std::int64_t inner, T* max) {
  std::copy(x, x + inner, max);
  for (std::int64_t e = 1; e < extent; ++e) {
    const T* row = x + e * inner;
    for (std::int64_t i = 0; i < inner; ++i) max[i] = std::max(max[i], row[i]);
  }
}

// softmax is shift-invariant; subtracting the column max keeps exp() finite when logits exceed ~88
// (float). Each element is read before it is written, so y may be x (the op runs in place).
template <class T>
void softmax_block(const T* x, T* y, std::int64_t extent, std::int64_t inner, T* max, T* sum) {
  column_max(x, extent, inner, max);
  std::fill(sum, sum + inner, T(0));
  for (std::int64_t e = 0; e < extent; ++e) {
    const std::int64_t row = e * inner;
    for (std::int64_t i = 0; i < inner; ++i) {
      y[row + i] = std::exp(x[row + i] - max[i]);
      sum[i] += y[row + i];
    }
  }
  for (std::int64_t i = 0; i < inner; ++i) sum[i] = T(1) / sum[i];
  for (std::int64_t e = 0; e < extent; ++e)
    for (std::int64_t i = 0; i < inner; ++i) y[e * inner + i] *= sum[i];
}

// log_softmax = (x - max) - log(sum(exp(x - max))): never log(softmax), which is -inf once softmax
// underflows.
template <class T>
void log_softmax_block(const T* x, T* y, std::int64_t extent, std::int64_t inner, T* max, T* sum) {
  column_max(x, extent, inner, max);
  std::fill(sum, sum + inner, T(0));
  for (std::int64_t e = 0; e < extent; ++e)
    for (std::int64_t i = 0; i < inner; ++i) sum[i] += std::exp(x[e * inner + i] - max[i]);
  // (x - max) - log(sum), in this order: folding log(sum) into max first would round it at the
  // magnitude of the logits (an error of ~3e-5 at 1000 in float).
  for (std::int64_t i = 0; i < inner; ++i) sum[i] = std::log(sum[i]);
  for (std::int64_t e = 0; e < extent; ++e)
    for (std::int64_t i = 0; i < inner; ++i) y[e * inner + i] = (x[e * inner + i] - max[i]) - sum[i];
}

// Over the last axis (inner = 1) the blocks are rows, each normalized alone with its statistics in locals: they
// are split over kiln's threads (an exp and a few operations an element), and every row's values are the same on
// any thread count. Over another axis the columns' statistics live in the one workspace: one thread.
constexpr std::int64_t row_cost = 16;

// blocks(begin, end) over the outer blocks [0, outer): split over the threads when they are rows, else at once.
template <class Blocks>
void for_blocks(const detail::AxisSplit& split, const Blocks& blocks) {
  if (split.inner != 1) return blocks(0, split.outer);
  detail::parallel_for(split.outer, detail::workers_for_elements(split.outer * split.extent, row_cost),
                       [&](std::int64_t begin, std::int64_t end, int) { blocks(begin, end); });
}

template <class T, void (*Block)(const T*, T*, std::int64_t, std::int64_t, T*, T*)>
void softmax_family_kernel(const KernelContext& k) {
  const detail::AxisSplit split = split_of(k.input_shape(0), k.attributes());
  if (split.extent == 0) return;  // nothing to normalize, and no row 0 to seed the max
  const std::int64_t block = split.extent * split.inner;
  const T* x = k.in<T>(0);
  T* y = k.out<T>();
  const auto blocks = [&](std::int64_t begin, std::int64_t end) {
    ColumnStats<T> stats(k, split.inner);  // (locals when inner = 1: one per worker)
    for (std::int64_t o = begin; o < end; ++o)
      Block(x + o * block, y + o * block, split.extent, split.inner, stats.first, stats.second);
  };
  for_blocks(split, blocks);
}

// ---- fused gradient kernels: inputs (y, dy), y being the forward output ---------------------------------

// dx = y * (dy - sum(dy * y)) along the axis.
template <class T>
void softmax_grad_block(const T* y, const T* dy, T* dx, std::int64_t extent, std::int64_t inner, T* dot, T*) {
  std::fill(dot, dot + inner, T(0));
  for (std::int64_t e = 0; e < extent; ++e)
    for (std::int64_t i = 0; i < inner; ++i) dot[i] += dy[e * inner + i] * y[e * inner + i];
  for (std::int64_t e = 0; e < extent; ++e) {
    const std::int64_t row = e * inner;
    for (std::int64_t i = 0; i < inner; ++i) dx[row + i] = y[row + i] * (dy[row + i] - dot[i]);
  }
}

// dx = dy - exp(y) * sum(dy) along the axis; exp(y) is the softmax.
template <class T>
void log_softmax_grad_block(const T* y, const T* dy, T* dx, std::int64_t extent, std::int64_t inner, T* total, T*) {
  std::fill(total, total + inner, T(0));
  for (std::int64_t e = 0; e < extent; ++e)
    for (std::int64_t i = 0; i < inner; ++i) total[i] += dy[e * inner + i];
  for (std::int64_t e = 0; e < extent; ++e) {
    const std::int64_t row = e * inner;
    for (std::int64_t i = 0; i < inner; ++i) dx[row + i] = dy[row + i] - std::exp(y[row + i]) * total[i];
  }
}

template <class T, void (*Block)(const T*, const T*, T*, std::int64_t, std::int64_t, T*, T*)>
void softmax_family_grad_kernel(const KernelContext& k) {
  const detail::AxisSplit split = split_of(k.input_shape(0), k.attributes());
  const std::int64_t block = split.extent * split.inner;
  const T* y = k.in<T>(0);
  const T* dy = k.in<T>(1);
  T* dx = k.out<T>();
  const auto blocks = [&](std::int64_t begin, std::int64_t end) {
    ColumnStats<T> stats(k, split.inner);
    for (std::int64_t o = begin; o < end; ++o)
      Block(y + o * block, dy + o * block, dx + o * block, split.extent, split.inner, stats.first, stats.second);
  };
  for_blocks(split, blocks);
}

// ---- shape rules ----------------------------------------------------------------------------------------

void check_axis(const InferContext& ctx) {
  const std::int64_t axis = ctx.attributes().get_int("axis");
  const int rank = ctx.input_shape(0).rank();
  if (axis < -rank || axis >= rank)
    ctx.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
}

Shape softmax_shape(const InferContext& ctx) {
  check_axis(ctx);
  return ctx.input_shape(0);
}

Shape softmax_grad_shape(const InferContext& ctx) {
  check_axis(ctx);
  if (ctx.input_shape(0) != ctx.input_shape(1)) ctx.fail("the output and its gradient differ in shape");
  return ctx.input_shape(0);
}

// ---- backward rules -------------------------------------------------------------------------------------

Tensor fused_grad(const char* op_name, const GradContext& g) {
  return g.output().graph().add_op(op_name, {g.output(), g.output_grad()},
                                   Attributes().set("axis", g.attributes().get_int("axis")), "grad");
}

std::vector<Tensor> softmax_backward(const GradContext& g) { return {fused_grad("kiln>SoftmaxGrad", g)}; }

std::vector<Tensor> log_softmax_backward(const GradContext& g) { return {fused_grad("kiln>LogSoftmaxGrad", g)}; }

// ---- registration ---------------------------------------------------------------------------------------

KILN_REGISTER_OP(OpDef("kiln>Softmax")
                     .inputs(1)
                     .attributes({"axis"})
                     .infer_shape(softmax_shape)
                     .forward(softmax_family_kernel<float, softmax_block<float>>,
                              softmax_family_kernel<double, softmax_block<double>>)
                     .backward(softmax_backward)
                     .workspace(column_stats_workspace)
                     .sharing(Sharing::inplace));

KILN_REGISTER_OP(OpDef("kiln>LogSoftmax")
                     .inputs(1)
                     .attributes({"axis"})
                     .infer_shape(softmax_shape)
                     .forward(softmax_family_kernel<float, log_softmax_block<float>>,
                              softmax_family_kernel<double, log_softmax_block<double>>)
                     .backward(log_softmax_backward)
                     .workspace(column_stats_workspace)
                     .sharing(Sharing::inplace));

KILN_REGISTER_OP(OpDef("kiln>SoftmaxGrad")
                     .inputs(2)
                     .attributes({"axis"})
                     .infer_shape(softmax_grad_shape)
                     .forward(softmax_family_grad_kernel<float, softmax_grad_block<float>>,
                              softmax_family_grad_kernel<double, softmax_grad_block<double>>)
                     .not_differentiable("second-order gradients are not supported")
                     .workspace(column_stats_workspace)
                     .sharing(Sharing::inplace));

KILN_REGISTER_OP(OpDef("kiln>LogSoftmaxGrad")
                     .inputs(2)
                     .attributes({"axis"})
                     .infer_shape(softmax_grad_shape)
                     .forward(softmax_family_grad_kernel<float, log_softmax_grad_block<float>>,
                              softmax_family_grad_kernel<double, log_softmax_grad_block<double>>)
                     .not_differentiable("second-order gradients are not supported")
                     .workspace(column_stats_workspace)
                     .sharing(Sharing::inplace));

}  // namespace

namespace ops {

Tensor softmax(const Tensor& x, int axis) {
  return detail::add_or_record_op("kiln>Softmax", {x}, Attributes().set("axis", axis), "softmax");
}

Tensor log_softmax(const Tensor& x, int axis) {
  return detail::add_or_record_op("kiln>LogSoftmax", {x}, Attributes().set("axis", axis), "log_softmax");
}

}  // namespace ops
}  // namespace kiln
