// Layer normalization over the last axis and RMS normalization over trailing axes, each fused forward and
// backward. Both work on rows (the normalized elements of one sample, contiguous). Backward recomputes
// each row's statistics from x instead of saving them: one pass over a row is cheaper than another buffer.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/op.hpp>
#include <kiln/core/parallel.hpp>
#include <kiln/ops/detail/norm_rows.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

namespace {

Shape layer_norm_shape(const InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  if (x.rank() == 0) ctx.fail("x must have a last axis to normalize");
  const Shape features{x[x.rank() - 1]};
  if (ctx.input_shape(1) != features || ctx.input_shape(2) != features)
    ctx.fail("gamma and beta must have shape " + features.to_string());
  return x;
}

// Inputs: x, gamma, dy.
Shape layer_norm_grad_shape(const InferContext& ctx) {
  if (ctx.input_shape(2) != ctx.input_shape(0)) ctx.fail("the gradient and x differ in shape");
  return ctx.input_shape(0);
}

// Inputs: x, dy.
Shape layer_norm_param_grad_shape(const InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  if (x.rank() == 0 || ctx.input_shape(1) != x) ctx.fail("the gradient and x differ in shape");
  return Shape{x[x.rank() - 1]};
}

struct Rows {
  std::int64_t count = 0;
  std::int64_t size = 0;
};

// Rows of the last `trailing` axes of x.
Rows rows_of(const Shape& x, int trailing = 1) {
  std::int64_t size = 1;
  for (int axis = x.rank() - trailing; axis < x.rank(); ++axis) size *= x[axis];
  return {size == 0 ? 0 : static_cast<std::int64_t>(x.num_elements()) / size, size};
}
Rows rows_of(const KernelContext& k) { return rows_of(k.input_shape(0)); }

// Threads for rows that each cost about `cost` times a memory-bound copy.
int workers_for(const Rows& rows, int cost) { return detail::workers_for_elements(rows.count * rows.size, cost); }

// Rows in units of detail::kNormRowUnit (every build's block of rows divides it), on up to `workers` threads:
// body(first, end) for each worker's rows.
template <class Body>
void for_row_units(const Rows& rows, int workers, const Body& body) {
  const std::int64_t units = (rows.count + detail::kNormRowUnit - 1) / detail::kNormRowUnit;
  detail::parallel_for(units, workers, [&](std::int64_t begin, std::int64_t end, int) {
    body(begin * detail::kNormRowUnit, std::min(end * detail::kNormRowUnit, rows.count));
  });
}

// ---- the parameter gradients: sums over rows -------------------------------------------------------------
// Split by blocks of rows: each worker adds its blocks, in row order, into a partial of its own (in the workspace,
// 64 bytes apart), and the partials are added in worker order. The result depends on the thread count only; with
// one worker (one thread, a few rows, or a workspace planned for one) it is the serial sum, written into the
// output directly. (Split by features instead, every worker would read every row for a few columns of each.)

template <class T>
constexpr std::int64_t padded_size(std::int64_t size) {
  constexpr std::int64_t per_line = 64 / static_cast<std::int64_t>(sizeof(T));
  return (size + per_line - 1) / per_line * per_line;
}

int sum_workers(const Rows& rows) {
  return detail::parallel_workers((rows.count + detail::kNormRowUnit - 1) / detail::kNormRowUnit, workers_for(rows, 4));
}

// Room for sum_over_rows' partials as planned (rows of x's last `trailing` axes).
template <class T>
std::size_t sums_workspace_of(const Shape& x, int trailing) {
  const Rows rows = rows_of(x, trailing);
  const int workers = sum_workers(rows);
  if (workers <= 1) return 0;
  return static_cast<std::size_t>(padded_size<T>(rows.size) * workers) * sizeof(T) + 64;
}
std::size_t sums_workspace(const Shape& x, int trailing, DType dtype) {
  return dtype == DType::float64 ? sums_workspace_of<double>(x, trailing) : sums_workspace_of<float>(x, trailing);
}

// out (rows.size values) = the sum over the rows: accumulate(first, end, target) adds rows [first, end), in order,
// into target, this worker's partial (or out itself).
template <class T, class Accumulate>
void sum_over_rows(const KernelContext& k, const Rows& rows, T* out, const Accumulate& accumulate) {
  std::fill(out, out + rows.size, T(0));
  const std::int64_t units = (rows.count + detail::kNormRowUnit - 1) / detail::kNormRowUnit;
  const std::int64_t stride = padded_size<T>(rows.size);
  const std::size_t room = k.workspace_bytes > 64 ? k.workspace_bytes - 64 : 0;
  const auto capacity = static_cast<std::int64_t>(room / (static_cast<std::size_t>(stride) * sizeof(T)));
  const int workers = static_cast<int>(std::min<std::int64_t>(capacity, sum_workers(rows)));
  if (workers <= 1) {
    accumulate(0, rows.count, out);
    return;
  }
  auto start = reinterpret_cast<std::uintptr_t>(k.workspace);
  T* partials = reinterpret_cast<T*>((start + 63) / 64 * 64);
  std::fill(partials, partials + stride * workers, T(0));
  detail::parallel_for(units, workers, [&](std::int64_t begin, std::int64_t end, int worker) {
    accumulate(begin * detail::kNormRowUnit, std::min(end * detail::kNormRowUnit, rows.count),
               partials + stride * worker);
  });
  for (int worker = 0; worker < workers; ++worker) {
    const T* partial = partials + stride * worker;
    for (std::int64_t j = 0; j < rows.size; ++j) out[j] += partial[j];
  }
}

// ---- LayerNorm's kernels: the rows through detail::norm_rows (kiln/ops/detail/isa/norm_rows.inl, dispatched by
// instruction set) ----------------------------------------------------------------------------------------------

template <class T>
void layer_norm_kernel(const KernelContext& k) {
  const T* x = k.in<T>(0);
  const T* gamma = k.in<T>(1);
  const T* beta = k.in<T>(2);
  T* out = k.out<T>();
  const Rows rows = rows_of(k);
  const double epsilon = k.attributes().get_double("epsilon");
  const auto rows_kernel = detail::norm_rows<T>().layer_norm;
  for_row_units(rows, workers_for(rows, 8), [&](std::int64_t first, std::int64_t end) {
    rows_kernel(x, gamma, beta, out, first, end, rows.size, epsilon);
  });
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * gamma, per row.
template <class T>
void layer_norm_grad_kernel(const KernelContext& k) {
  const T* x = k.in<T>(0);
  const T* gamma = k.in<T>(1);
  const T* dy = k.in<T>(2);
  T* dx = k.out<T>();
  const Rows rows = rows_of(k);
  const double epsilon = k.attributes().get_double("epsilon");
  const auto rows_kernel = detail::norm_rows<T>().layer_norm_grad;
  for_row_units(rows, workers_for(rows, 8), [&](std::int64_t first, std::int64_t end) {
    rows_kernel(x, gamma, dy, dx, first, end, rows.size, epsilon);
  });
}

// dgamma = the sum over rows of dy * xhat (sum_over_rows).
template <class T>
void layer_norm_param_grad_kernel(const KernelContext& k) {
  const double epsilon = k.attributes().get_double("epsilon");
  const T* x = k.in<T>(0);
  const T* dy = k.in<T>(1);
  const Rows rows = rows_of(k);
  const auto rows_kernel = detail::norm_rows<T>().layer_norm_gamma_grad;
  sum_over_rows(k, rows, k.out<T>(), [&](std::int64_t first, std::int64_t end, T* target) {
    rows_kernel(x, dy, target, first, end, rows.size, epsilon);
  });
}

std::size_t layer_norm_param_grad_workspace(const std::vector<Shape>& inputs, const Shape&, const Attributes&,
                                            DType dtype) {
  return sums_workspace(inputs[0], 1, dtype);
}


Attributes epsilon_of(const GradContext& g) {
  return Attributes().set("epsilon", g.attributes().get_double("epsilon"));
}

Tensor sum_over_rows(const Tensor& dy) {
  if (dy.rank() == 1) return dy;
  ops::Axes axes;
  for (int axis = 0; axis + 1 < dy.rank(); ++axis) axes.push_back(axis);
  return ops::sum(dy, axes);
}

std::vector<Tensor> layer_norm_backward(const GradContext& g) {
  const Tensor dy = g.output_grad();
  const Tensor x = g.input(0);
  Graph& graph = dy.graph();
  Tensor dx, dgamma, dbeta;
  if (g.needs_grad(0)) dx = graph.add_op("kiln>LayerNormGrad", {x, g.input(1), dy}, epsilon_of(g), "layer_norm_grad");
  if (g.needs_grad(1))
    dgamma = graph.add_op("kiln>LayerNormParamGrad", {x, dy}, epsilon_of(g), "layer_norm_param_grad");
  if (g.needs_grad(2)) dbeta = sum_over_rows(dy);
  return {dx, dgamma, dbeta};
}

constexpr const char* second_order = "second-order gradients of layer_norm are not implemented";

// ---- RMS normalization ----------------------------------------------------------------------------------
// y = x·r·scale per row, with r = rsqrt(mean(x²) + ε) (Keras's ops.rms_normalization, torch's rms_norm);
// scale has the shape of the row (the trailing axes). Attributes: epsilon, trailing_axes (how many).

int trailing_of(const Attributes& a) { return static_cast<int>(a.get_int("trailing_axes")); }

Shape trailing_shape(const InferContext& ctx, const Shape& x) {
  const int trailing = trailing_of(ctx.attributes());
  if (trailing < 1 || trailing > x.rank())
    ctx.fail("cannot normalize the last " + std::to_string(trailing) + " axes of a rank-" + std::to_string(x.rank()) +
             " input");
  std::vector<std::int64_t> dims(x.dims().end() - trailing, x.dims().end());
  for (const std::int64_t dim : dims)
    if (dim == Shape::unknown) ctx.fail("the normalized axes must be known");
  return Shape(std::move(dims));
}

// Inputs: x, scale.
Shape rms_norm_shape(const InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  const Shape row = trailing_shape(ctx, x);
  if (ctx.input_shape(1) != row) ctx.fail("scale must have the normalized axes' shape " + row.to_string());
  return x;
}

// Inputs: x, scale, dy.
Shape rms_norm_grad_shape(const InferContext& ctx) {
  rms_norm_shape(ctx);
  if (ctx.input_shape(2) != ctx.input_shape(0)) ctx.fail("the gradient and x differ in shape");
  return ctx.input_shape(0);
}

// Inputs: x, dy.
Shape rms_norm_scale_grad_shape(const InferContext& ctx) {
  if (ctx.input_shape(1) != ctx.input_shape(0)) ctx.fail("the gradient and x differ in shape");
  return trailing_shape(ctx, ctx.input_shape(0));
}

template <class T>
void rms_norm_kernel(const KernelContext& k) {
  const T* x = k.in<T>(0);
  const T* scale = k.in<T>(1);
  T* out = k.out<T>();
  const Rows rows = rows_of(k.input_shape(0), trailing_of(k.attributes()));
  const double epsilon = k.attributes().get_double("epsilon");
  const auto rows_kernel = detail::norm_rows<T>().rms_norm;
  for_row_units(rows, workers_for(rows, 4), [&](std::int64_t first, std::int64_t end) {
    rows_kernel(x, scale, out, first, end, rows.size, epsilon);
  });
}

// dx = r·(g − x·r²·mean(g·x)) with g = dy·scale, per row (r depends on x through mean(x²)).
template <class T>
void rms_norm_grad_kernel(const KernelContext& k) {
  const T* x = k.in<T>(0);
  const T* scale = k.in<T>(1);
  const T* dy = k.in<T>(2);
  T* dx = k.out<T>();
  const Rows rows = rows_of(k.input_shape(0), trailing_of(k.attributes()));
  const double epsilon = k.attributes().get_double("epsilon");
  const auto rows_kernel = detail::norm_rows<T>().rms_norm_grad;
  for_row_units(rows, workers_for(rows, 6), [&](std::int64_t first, std::int64_t end) {
    rows_kernel(x, scale, dy, dx, first, end, rows.size, epsilon);
  });
}

// dscale = the sum over rows of dy * x * r (sum_over_rows).
template <class T>
void rms_norm_scale_grad_kernel(const KernelContext& k) {
  const double epsilon = k.attributes().get_double("epsilon");
  const T* x = k.in<T>(0);
  const T* dy = k.in<T>(1);
  const Rows rows = rows_of(k.input_shape(0), trailing_of(k.attributes()));
  const auto rows_kernel = detail::norm_rows<T>().rms_norm_scale_grad;
  sum_over_rows(k, rows, k.out<T>(), [&](std::int64_t first, std::int64_t end, T* target) {
    rows_kernel(x, dy, target, first, end, rows.size, epsilon);
  });
}


std::size_t rms_norm_scale_grad_workspace(const std::vector<Shape>& inputs, const Shape&, const Attributes& a,
                                          DType dtype) {
  return sums_workspace(inputs[0], trailing_of(a), dtype);
}

Attributes rms_attributes_of(const GradContext& g) {
  return Attributes()
      .set("epsilon", g.attributes().get_double("epsilon"))
      .set("trailing_axes", g.attributes().get_int("trailing_axes"));
}

std::vector<Tensor> rms_norm_backward(const GradContext& g) {
  const Tensor dy = g.output_grad();
  const Tensor x = g.input(0);
  Graph& graph = dy.graph();
  Tensor dx, dscale;
  if (g.needs_grad(0))
    dx = graph.add_op("kiln>RMSNormGrad", {x, g.input(1), dy}, rms_attributes_of(g), "rms_norm_grad");
  if (g.needs_grad(1))
    dscale = graph.add_op("kiln>RMSNormScaleGrad", {x, dy}, rms_attributes_of(g), "rms_norm_scale_grad");
  return {dx, dscale};
}

constexpr const char* rms_second_order = "second-order gradients of rms_norm are not implemented";

}  // namespace

KILN_REGISTER_OP(OpDef("kiln>LayerNorm")
                     .inputs(3)
                     .attributes({"epsilon"})
                     .infer_shape(layer_norm_shape)
                     .forward(layer_norm_kernel<float>, layer_norm_kernel<double>)
                     .backward(layer_norm_backward));
KILN_REGISTER_OP(OpDef("kiln>LayerNormGrad")
                     .inputs(3)
                     .attributes({"epsilon"})
                     .infer_shape(layer_norm_grad_shape)
                     .forward(layer_norm_grad_kernel<float>, layer_norm_grad_kernel<double>)
                     .not_differentiable(second_order));
KILN_REGISTER_OP(OpDef("kiln>LayerNormParamGrad")
                     .inputs(2)
                     .attributes({"epsilon"})
                     .infer_shape(layer_norm_param_grad_shape)
                     .forward(layer_norm_param_grad_kernel<float>, layer_norm_param_grad_kernel<double>)
                     .workspace(layer_norm_param_grad_workspace)
                     .not_differentiable(second_order));

KILN_REGISTER_OP(OpDef("kiln>RMSNorm")
                     .inputs(2)
                     .attributes({"epsilon", "trailing_axes"})
                     .infer_shape(rms_norm_shape)
                     .forward(rms_norm_kernel<float>, rms_norm_kernel<double>)
                     .backward(rms_norm_backward));
KILN_REGISTER_OP(OpDef("kiln>RMSNormGrad")
                     .inputs(3)
                     .attributes({"epsilon", "trailing_axes"})
                     .infer_shape(rms_norm_grad_shape)
                     .forward(rms_norm_grad_kernel<float>, rms_norm_grad_kernel<double>)
                     .not_differentiable(rms_second_order));
KILN_REGISTER_OP(OpDef("kiln>RMSNormScaleGrad")
                     .inputs(2)
                     .attributes({"epsilon", "trailing_axes"})
                     .infer_shape(rms_norm_scale_grad_shape)
                     .forward(rms_norm_scale_grad_kernel<float>, rms_norm_scale_grad_kernel<double>)
                     .workspace(rms_norm_scale_grad_workspace)
                     .not_differentiable(rms_second_order));

namespace ops {

Tensor layer_norm(const Tensor& x, const Tensor& gamma, const Tensor& beta, double epsilon) {
  if (!(epsilon > 0.0))
    throw ConfigError("layer_norm on " + x.node().describe() + ": epsilon must be positive, got " +
                      std::to_string(epsilon));
  return x.graph().add_op("kiln>LayerNorm", {x, gamma, beta}, Attributes().set("epsilon", epsilon), "layer_norm");
}

Tensor rms_norm(const Tensor& x, const Tensor& scale, double epsilon, int trailing_axes) {
  if (!(epsilon > 0.0))
    throw ConfigError("rms_norm on " + x.node().describe() + ": epsilon must be positive, got " +
                      std::to_string(epsilon));
  return x.graph().add_op("kiln>RMSNorm", {x, scale},
                          Attributes().set("epsilon", epsilon).set("trailing_axes", trailing_axes), "rms_norm");
}

}  // namespace ops
}  // namespace kiln
