// Batch normalization in training mode, fused (inference mode is x·scale + shift, composed by the layer
// from primitive ops on its moving statistics). Over every axis but the feature axis, with M values
// per feature:
//   BatchMoments    x -> (2, C): the batch mean and the biased variance (Keras's ops.moments), each
//                   accumulated in double, the variance from a second pass (no E[x²] − E[x]² cancellation)
//   BatchNormTrain  (x, moments, gamma, beta) -> y = (x − mean)·rsqrt(var + ε)·gamma + beta
//   BatchNormSums   (x, moments, dy) -> (2, C): sum(dy·x̂) and sum(dy), which are dgamma and dbeta
//   BatchNormTrainGrad (x, moments, gamma, dy, sums) -> dx = gamma·rstd/M · (M·dy − sum(dy) − x̂·sum(dy·x̂))
// BatchNormTrain's moments must be BatchMoments of its own x (ops::batch_norm_train makes both): its
// backward is the whole derivative through the batch statistics, so the moments input carries none.
// Features are split over kiln's threads; each worker owns its features, so sums never depend on the
// thread count. The layout is (outer, C, inner): inner = 1 for channels_last, H·W for channels_first.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include <kiln/core/attributes.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/op.hpp>
#include <kiln/core/parallel.hpp>
#include <kiln/ops/detail/kernel_util.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {
namespace {

detail::AxisSplit split_of(const Shape& shape, const Attributes& a) {
  const auto axis = static_cast<int>(a.get_int("axis"));
  return detail::split_at_axis(shape, axis < 0 ? axis + shape.rank() : axis);
}

// Calls body(c0, c1) for feature ranges on kiln's threads, each range walking every (outer, inner) value.
template <class Body>
void for_features(const detail::AxisSplit& s, const Body& body) {
  const std::int64_t total = s.outer * s.extent * s.inner;
  detail::parallel_for(s.extent, detail::workers_for_elements(total, 2),
                       [&](std::int64_t c0, std::int64_t c1, int) { body(c0, c1); });
}

// Visits every element of features [c0, c1) as f(c, index), index into the (outer, C, inner) array. The
// channels_last case (inner = 1) walks each row's features as one contiguous loop, which vectorizes.
template <class F>
void each_element(const detail::AxisSplit& s, std::int64_t c0, std::int64_t c1, F&& f) {
  if (s.inner == 1) {
    for (std::int64_t o = 0; o < s.outer; ++o) {
      const std::int64_t base = o * s.extent;
      for (std::int64_t c = c0; c < c1; ++c) f(c, base + c);
    }
    return;
  }
  for (std::int64_t o = 0; o < s.outer; ++o)
    for (std::int64_t c = c0; c < c1; ++c) {
      const std::int64_t base = (o * s.extent + c) * s.inner;
      for (std::int64_t i = 0; i < s.inner; ++i) f(c, base + i);
    }
}

// ---- channels_last (inner = 1): rows split over the workers -------------------------------------------
// Splitting the features instead would have every worker read every row for a few features of each, and write
// neighbours' cache lines (16 workers over 32 features: 15x slower than 2 workers). Rows are split; each worker
// sums its rows into partial sums of its own (cache-line apart), added up in worker order afterwards, so the
// result depends on the thread count only, and with one worker equals the serial sum.

std::int64_t padded_doubles(std::int64_t count) { return (count + 7) / 8 * 8; }  // 64-byte multiples

int row_workers(const detail::AxisSplit& s) {
  return detail::parallel_workers(s.outer, detail::workers_for_elements(s.outer * s.extent, 2));
}

// Workspace for `totals` accumulators per feature, plus per-worker partials of them for the row split.
std::size_t reduction_workspace(const detail::AxisSplit& s, int totals) {
  std::size_t doubles = static_cast<std::size_t>(totals * s.extent);
  if (s.inner == 1) doubles += static_cast<std::size_t>(totals * padded_doubles(s.extent) * row_workers(s)) + 8;
  return doubles * sizeof(double);
}

// Sums add_row(o, partial) over the rows o into totals[a · C + c], a < accumulators: each worker adds its rows
// into its own partial (accumulator a of feature c at partial[a · padded(C) + c]), then the partials are added in
// worker order. totals sits at the workspace's start, the partials after it.
template <class AddRow>
void reduce_rows(const KernelContext& k, const detail::AxisSplit& s, int accumulators, double* totals,
                 const AddRow& add_row) {
  const std::int64_t stride = accumulators * padded_doubles(s.extent);
  auto first = reinterpret_cast<std::uintptr_t>(totals + accumulators * s.extent);
  first = (first + 63) / 64 * 64;
  double* partials = reinterpret_cast<double*>(first);
  const std::size_t used_bytes = static_cast<std::size_t>(first - reinterpret_cast<std::uintptr_t>(totals));
  const std::size_t room = k.workspace_bytes > used_bytes ? k.workspace_bytes - used_bytes : 0;
  const auto capacity = static_cast<int>(room / (static_cast<std::size_t>(stride) * sizeof(double)));
  if (capacity < 1) throw Error("BatchNorm kernels: the workspace holds no worker's partial sums (a planning bug)");
  const int max_workers = std::min(capacity, detail::workers_for_elements(s.outer * s.extent, 2));
  const int workers = detail::parallel_workers(s.outer, max_workers);
  std::fill(partials, partials + stride * workers, 0.0);
  detail::parallel_for(s.outer, workers, [&](std::int64_t o0, std::int64_t o1, int worker) {
    double* partial = partials + stride * worker;
    for (std::int64_t o = o0; o < o1; ++o) add_row(o, partial);
  });
  const std::int64_t padded = padded_doubles(s.extent);
  for (int a = 0; a < accumulators; ++a)
    for (std::int64_t c = 0; c < s.extent; ++c) {
      double total = 0.0;
      for (int w = 0; w < workers; ++w) total += partials[stride * w + a * padded + c];
      totals[a * s.extent + c] = total;
    }
}

// Calls body(o0, o1) for ranges of rows on kiln's threads.
template <class Body>
void for_rows(const detail::AxisSplit& s, const Body& body) {
  detail::parallel_for(s.outer, detail::workers_for_elements(s.outer * s.extent, 2),
                       [&](std::int64_t o0, std::int64_t o1, int) { body(o0, o1); });
}

template <class T>
void moments_kernel(const KernelContext& k) {
  const detail::AxisSplit s = split_of(k.input_shape(0), k.attributes());
  const T* x = k.in<T>(0);
  T* out = k.out<T>();  // row 0: means, row 1: variances
  const auto count = static_cast<double>(s.outer * s.inner);
  double* sums = k.scratch<double>();  // one double per feature
  if (s.inner == 1) {
    const std::int64_t C = s.extent;
    reduce_rows(k, s, 1, sums, [&](std::int64_t o, double* partial) {
      const T* row = x + o * C;
      for (std::int64_t c = 0; c < C; ++c) partial[c] += static_cast<double>(row[c]);
    });
    for (std::int64_t c = 0; c < C; ++c) {
      sums[c] = count > 0 ? sums[c] / count : 0.0;
      out[c] = static_cast<T>(sums[c]);
    }
    // The second pass, around the double mean.
    reduce_rows(k, s, 1, sums + C, [&](std::int64_t o, double* partial) {
      const T* row = x + o * C;
      for (std::int64_t c = 0; c < C; ++c) {
        const double d = static_cast<double>(row[c]) - sums[c];
        partial[c] += d * d;
      }
    });
    for (std::int64_t c = 0; c < C; ++c) out[C + c] = static_cast<T>(count > 0 ? sums[C + c] / count : 0.0);
    return;
  }
  for_features(s, [&](std::int64_t c0, std::int64_t c1) {
    std::fill(sums + c0, sums + c1, 0.0);
    each_element(s, c0, c1, [&](std::int64_t c, std::int64_t at) { sums[c] += static_cast<double>(x[at]); });
    for (std::int64_t c = c0; c < c1; ++c) {
      sums[c] = count > 0 ? sums[c] / count : 0.0;
      out[c] = static_cast<T>(sums[c]);
    }
    // The second pass, around the double mean; its sums go straight into a double per feature too.
    std::fill(sums + s.extent + c0, sums + s.extent + c1, 0.0);
    each_element(s, c0, c1, [&](std::int64_t c, std::int64_t at) {
      const double d = static_cast<double>(x[at]) - sums[c];
      sums[s.extent + c] += d * d;
    });
    for (std::int64_t c = c0; c < c1; ++c)
      out[s.extent + c] = static_cast<T>(count > 0 ? sums[s.extent + c] / count : 0.0);
  });
}

std::size_t moments_workspace(const std::vector<Shape>& input_shapes, const Shape&, const Attributes& a, DType) {
  return reduction_workspace(split_of(input_shapes[0], a), 2);
}

// y = x·scale + shift per feature, scale = gamma·rsqrt(var + ε), shift = beta − mean·scale.
template <class T>
void train_kernel(const KernelContext& k) {
  const detail::AxisSplit s = split_of(k.input_shape(0), k.attributes());
  const T* x = k.in<T>(0);
  const T* moments = k.in<T>(1);
  const T* gamma = k.in<T>(2);
  const T* beta = k.in<T>(3);
  T* y = k.out<T>();
  const double epsilon = k.attributes().get_double("epsilon");
  T* scale = k.scratch<T>();
  T* shift = scale + s.extent;
  if (s.inner == 1) {
    const std::int64_t C = s.extent;
    for (std::int64_t c = 0; c < C; ++c) {
      const double rstd = 1.0 / std::sqrt(static_cast<double>(moments[C + c]) + epsilon);
      scale[c] = static_cast<T>(static_cast<double>(gamma[c]) * rstd);
      shift[c] = static_cast<T>(static_cast<double>(beta[c]) - static_cast<double>(moments[c]) * gamma[c] * rstd);
    }
    for_rows(s, [&](std::int64_t o0, std::int64_t o1) {
      for (std::int64_t o = o0; o < o1; ++o)
        for (std::int64_t c = 0; c < C; ++c) y[o * C + c] = x[o * C + c] * scale[c] + shift[c];
    });
    return;
  }
  for_features(s, [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t c = c0; c < c1; ++c) {
      const double rstd = 1.0 / std::sqrt(static_cast<double>(moments[s.extent + c]) + epsilon);
      scale[c] = static_cast<T>(static_cast<double>(gamma[c]) * rstd);
      shift[c] = static_cast<T>(static_cast<double>(beta[c]) - static_cast<double>(moments[c]) * gamma[c] * rstd);
    }
    each_element(s, c0, c1, [&](std::int64_t c, std::int64_t at) { y[at] = x[at] * scale[c] + shift[c]; });
  });
}

std::size_t two_per_feature(const std::vector<Shape>& input_shapes, const Shape&, const Attributes& a, DType dtype) {
  return 2 * static_cast<std::size_t>(split_of(input_shapes[0], a).extent) * dtype_size(dtype);
}

double rstd_of(const double variance, const double epsilon) { return 1.0 / std::sqrt(variance + epsilon); }

template <class T>
void sums_kernel(const KernelContext& k) {
  const detail::AxisSplit s = split_of(k.input_shape(0), k.attributes());
  const T* x = k.in<T>(0);
  const T* moments = k.in<T>(1);
  const T* dy = k.in<T>(2);
  T* out = k.out<T>();  // row 0: sum(dy·x̂), row 1: sum(dy)
  const double epsilon = k.attributes().get_double("epsilon");
  double* acc = k.scratch<double>();
  if (s.inner == 1) {
    const std::int64_t C = s.extent, padded = padded_doubles(C);
    reduce_rows(k, s, 2, acc, [&](std::int64_t o, double* partial) {
      const T* xs = x + o * C;
      const T* dys = dy + o * C;
      for (std::int64_t c = 0; c < C; ++c) {
        partial[c] += static_cast<double>(dys[c]) * (static_cast<double>(xs[c]) - static_cast<double>(moments[c]));
        partial[padded + c] += static_cast<double>(dys[c]);
      }
    });
    for (std::int64_t c = 0; c < C; ++c) {
      out[c] = static_cast<T>(acc[c] * rstd_of(static_cast<double>(moments[C + c]), epsilon));
      out[C + c] = static_cast<T>(acc[C + c]);
    }
    return;
  }
  for_features(s, [&](std::int64_t c0, std::int64_t c1) {
    std::fill(acc + c0, acc + c1, 0.0);
    std::fill(acc + s.extent + c0, acc + s.extent + c1, 0.0);
    each_element(s, c0, c1, [&](std::int64_t c, std::int64_t at) {
      acc[c] += static_cast<double>(dy[at]) * (static_cast<double>(x[at]) - static_cast<double>(moments[c]));
      acc[s.extent + c] += static_cast<double>(dy[at]);
    });
    for (std::int64_t c = c0; c < c1; ++c) {
      out[c] = static_cast<T>(acc[c] * rstd_of(static_cast<double>(moments[s.extent + c]), epsilon));
      out[s.extent + c] = static_cast<T>(acc[s.extent + c]);
    }
  });
}

template <class T>
void train_grad_kernel(const KernelContext& k) {
  const detail::AxisSplit s = split_of(k.input_shape(0), k.attributes());
  const T* x = k.in<T>(0);
  const T* moments = k.in<T>(1);
  const T* gamma = k.in<T>(2);
  const T* dy = k.in<T>(3);
  const T* sums = k.in<T>(4);
  T* dx = k.out<T>();
  const double epsilon = k.attributes().get_double("epsilon");
  const double count = static_cast<double>(s.outer * s.inner);
  // dx = a·dy + b·x + c per feature, with a = gamma·rstd, b = −a·rstd·sum(dy·x̂)/M and
  // c = −a·sum(dy)/M − b·mean (x̂ = (x − mean)·rstd expanded).
  T* a = k.scratch<T>();
  T* b = a + s.extent;
  T* c = b + s.extent;
  auto coefficients = [&](std::int64_t c0, std::int64_t c1) {
    for (std::int64_t f = c0; f < c1; ++f) {
      const double rstd = rstd_of(static_cast<double>(moments[s.extent + f]), epsilon);
      const double af = static_cast<double>(gamma[f]) * rstd;
      const double bf = count > 0 ? -af * rstd * static_cast<double>(sums[f]) / count : 0.0;
      a[f] = static_cast<T>(af);
      b[f] = static_cast<T>(bf);
      c[f] = static_cast<T>((count > 0 ? -af * static_cast<double>(sums[s.extent + f]) / count : 0.0) -
                            bf * static_cast<double>(moments[f]));
    }
  };
  if (s.inner == 1) {
    const std::int64_t C = s.extent;
    coefficients(0, C);
    for_rows(s, [&](std::int64_t o0, std::int64_t o1) {
      for (std::int64_t o = o0; o < o1; ++o)
        for (std::int64_t f = 0; f < C; ++f) dx[o * C + f] = a[f] * dy[o * C + f] + b[f] * x[o * C + f] + c[f];
    });
    return;
  }
  for_features(s, [&](std::int64_t c0, std::int64_t c1) {
    coefficients(c0, c1);
    each_element(s, c0, c1, [&](std::int64_t f, std::int64_t at) { dx[at] = a[f] * dy[at] + b[f] * x[at] + c[f]; });
  });
}

std::size_t three_per_feature(const std::vector<Shape>& input_shapes, const Shape&, const Attributes& a, DType dtype) {
  return 3 * static_cast<std::size_t>(split_of(input_shapes[0], a).extent) * dtype_size(dtype);
}

// ---- shape rules ----------------------------------------------------------------------------------------

std::int64_t checked_features(const InferContext& ctx) {
  const Shape& x = ctx.input_shape(0);
  const std::int64_t axis = ctx.attributes().get_int("axis");
  if (axis < -x.rank() || axis >= x.rank())
    ctx.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(x.rank()));
  const std::int64_t features = x[static_cast<int>(axis < 0 ? axis + x.rank() : axis)];
  if (features == Shape::unknown) ctx.fail("the feature axis must be known");
  return features;
}

void check_vector(const InferContext& ctx, int input, const Shape& expected, const char* what) {
  if (ctx.input_shape(input) != expected) ctx.fail(std::string(what) + " must have shape " + expected.to_string());
}

Shape moments_shape(const InferContext& ctx) { return Shape{2, checked_features(ctx)}; }

Shape train_shape(const InferContext& ctx) {
  const std::int64_t c = checked_features(ctx);
  check_vector(ctx, 1, {2, c}, "the moments");
  check_vector(ctx, 2, {c}, "gamma");
  check_vector(ctx, 3, {c}, "beta");
  return ctx.input_shape(0);
}

Shape sums_shape(const InferContext& ctx) {
  const std::int64_t c = checked_features(ctx);
  check_vector(ctx, 1, {2, c}, "the moments");
  if (ctx.input_shape(2) != ctx.input_shape(0)) ctx.fail("the gradient must have the input's shape");
  return Shape{2, c};
}

Shape train_grad_shape(const InferContext& ctx) {
  const std::int64_t c = checked_features(ctx);
  check_vector(ctx, 1, {2, c}, "the moments");
  check_vector(ctx, 2, {c}, "gamma");
  if (ctx.input_shape(3) != ctx.input_shape(0)) ctx.fail("the gradient must have the input's shape");
  check_vector(ctx, 4, {2, c}, "the sums");
  return ctx.input_shape(0);
}

// ---- backward -------------------------------------------------------------------------------------------

Attributes same_attributes(const Attributes& a) {
  return Attributes().set("axis", a.get_int("axis")).set("epsilon", a.get_double("epsilon"));
}

std::vector<Tensor> train_backward(const GradContext& g) {
  const Tensor x = g.input(0), moments = g.input(1), gamma = g.input(2), dy = g.output_grad();
  Graph& graph = x.graph();
  const Attributes a = same_attributes(g.attributes());
  const Tensor sums = graph.add_op("kiln>BatchNormSums", {x, moments, dy}, a, "grad_sums");
  const std::int64_t c = gamma.shape()[0];
  std::vector<Tensor> grads(4);
  if (g.needs_grad(0)) grads[0] = graph.add_op("kiln>BatchNormTrainGrad", {x, moments, gamma, dy, sums}, a, "grad");
  if (g.needs_grad(2)) grads[2] = ops::reshape(ops::slice(sums, {0, 0}, {1, c}), {c});
  if (g.needs_grad(3)) grads[3] = ops::reshape(ops::slice(sums, {1, 0}, {1, c}), {c});
  return grads;
}

KILN_REGISTER_OP(OpDef("kiln>BatchMoments")
                     .inputs(1)
                     .attributes({"axis"})
                     .infer_shape(moments_shape)
                     .forward(moments_kernel<float>, moments_kernel<double>)
                     .not_differentiable("the batch statistics' gradient is part of BatchNormTrain's")
                     .workspace(moments_workspace));

KILN_REGISTER_OP(OpDef("kiln>BatchNormTrain")
                     .inputs(4)
                     .attributes({"axis", "epsilon"})
                     .infer_shape(train_shape)
                     .forward(train_kernel<float>, train_kernel<double>)
                     .backward(train_backward)
                     .non_differentiable_inputs({1}, "the derivative through the batch statistics is part of x's")
                     .workspace(two_per_feature));

KILN_REGISTER_OP(OpDef("kiln>BatchNormSums")
                     .inputs(3)
                     .attributes({"axis", "epsilon"})
                     .infer_shape(sums_shape)
                     .forward(sums_kernel<float>, sums_kernel<double>)
                     .not_differentiable("second-order gradients of batch normalization are not supported")
                     .workspace(moments_workspace));

KILN_REGISTER_OP(OpDef("kiln>BatchNormTrainGrad")
                     .inputs(5)
                     .attributes({"axis", "epsilon"})
                     .infer_shape(train_grad_shape)
                     .forward(train_grad_kernel<float>, train_grad_kernel<double>)
                     .not_differentiable("second-order gradients of batch normalization are not supported")
                     .workspace(three_per_feature));

}  // namespace

namespace ops {

BatchNormTraining batch_norm_train(const Tensor& x, const Tensor& gamma, const Tensor& beta, double epsilon, int axis) {
  Graph& graph = x.graph();
  const Tensor moments = graph.add_op("kiln>BatchMoments", {x}, Attributes().set("axis", axis), "moments");
  const Tensor y = graph.add_op("kiln>BatchNormTrain", {x, moments, gamma, beta},
                                Attributes().set("axis", axis).set("epsilon", epsilon), "batch_norm");
  const std::int64_t c = moments.shape()[1];
  return {y, ops::reshape(ops::slice(moments, {0, 0}, {1, c}), {c}),
          ops::reshape(ops::slice(moments, {1, 0}, {1, c}), {c})};
}

}  // namespace ops
}  // namespace kiln
