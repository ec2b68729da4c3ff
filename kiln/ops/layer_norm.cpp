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
#include <kiln/ops/detail/row_sums.hpp>
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

// Each row's mean and 1/sqrt(variance + ε), for a block of rows (as many as a vector has lanes). Two passes (mean,
// then squared deviations) rather than E[x²] − E[x]², which cancels badly when the mean is large next to the spread.
// A block's rows are summed in vector lanes and reduced together (detail::row_sums), a row's last partial vector
// (or the whole of a row shorter than a vector) by one masked load, and the blocks' 1/σ are vectors of square roots.
// On mql5_block's rows of 12 features, row by row (each row a chain of dependent adds) the kernels ran 1.3-1.7x
// slower than with 16 rows as independent scalar chains (2a2d633); in lanes, LayerNorm of (64, 40, 12) takes 41 µs a
// call against those chains' 58 (in its train step: LayerNorm 45 → 35 µs, LayerNormGrad 73 → 60, the gamma
// gradient 45 → 38).
template <class T>
constexpr std::int64_t row_block = static_cast<std::int64_t>(xsimd::batch<T>::size);

template <class T>
struct BlockStats {
  alignas(64) T mean[row_block<T>];
  alignas(64) T rstd[row_block<T>];
};

// Rows [first, first + count) of x, count ≤ row_block<T>.
template <class T>
void block_stats(const T* x, std::int64_t first, std::int64_t count, std::int64_t size, double epsilon,
                 BlockStats<T>& stats) {
  using Batch = xsimd::batch<T>;
  const auto n = static_cast<T>(size);
  detail::row_sums<T>(first, count, size, stats.mean,
                      [&](std::int64_t r, std::int64_t c, std::int64_t width, const Batch& sum) {
                        return sum + detail::load_run(x + r * size + c, width, T(0));
                      });
  for (std::int64_t i = 0; i < count; ++i) stats.mean[i] /= n;
  detail::row_sums<T>(first, count, size, stats.rstd,
                      [&](std::int64_t r, std::int64_t c, std::int64_t width, const Batch& sum) {
                        const T mean = stats.mean[r - first];  // (the padding's deviations are 0)
                        const Batch deviation = detail::load_run(x + r * size + c, width, mean) - Batch(mean);
                        return xsimd::fma(deviation, deviation, sum);
                      });
  for (std::int64_t i = 0; i < count; ++i) stats.rstd[i] /= n;  // (the variance, until the next line)
  detail::reciprocal_roots(stats.rstd, 1.0, epsilon);
}

// Runs compute(first, count, stats) then body(first, count, stats) for each block of rows [first, first + count), on
// up to `workers` threads (1: in row order, for a sum over rows that must not depend on the thread count). A row's
// statistics depend only on the row, so how the blocks are split changes nothing.
template <class Stats, class T, class Compute, class Body>
void for_row_blocks(const Rows& rows, int workers, const Compute& compute, const Body& body) {
  detail::parallel_for((rows.count + row_block<T> - 1) / row_block<T>, workers,
                       [&](std::int64_t begin, std::int64_t end, int) {
                         Stats stats;
                         for (std::int64_t block = begin; block < end; ++block) {
                           const std::int64_t first = block * row_block<T>;
                           const std::int64_t count = std::min(row_block<T>, rows.count - first);
                           compute(first, count, stats);
                           body(first, count, stats);
                         }
                       });
}

// Threads for rows that each cost about `cost` times a memory-bound copy.
int workers_for(const Rows& rows, int cost) { return detail::workers_for_elements(rows.count * rows.size, cost); }

// for_row_blocks with each block's mean and 1/σ.
template <class T, class Body>
void for_stats_blocks(const T* x, const Rows& rows, double epsilon, int workers, const Body& body) {
  for_row_blocks<BlockStats<T>, T>(
      rows, workers,
      [&](std::int64_t first, std::int64_t count, BlockStats<T>& stats) {
        block_stats(x, first, count, rows.size, epsilon, stats);
      },
      body);
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

int sum_workers(const Rows& rows, std::int64_t row_block_size) {
  return detail::parallel_workers((rows.count + row_block_size - 1) / row_block_size, workers_for(rows, 4));
}

// Room for sum_over_rows' partials as planned (rows of x's last `trailing` axes).
template <class T>
std::size_t sums_workspace_of(const Shape& x, int trailing) {
  const Rows rows = rows_of(x, trailing);
  const int workers = sum_workers(rows, row_block<T>);
  if (workers <= 1) return 0;
  return static_cast<std::size_t>(padded_size<T>(rows.size) * workers) * sizeof(T) + 64;
}
std::size_t sums_workspace(const Shape& x, int trailing, DType dtype) {
  return dtype == DType::float64 ? sums_workspace_of<double>(x, trailing) : sums_workspace_of<float>(x, trailing);
}

// out (rows.size values) = the sum over the rows: compute(first, count, stats) then accumulate(first, count, stats,
// target) for each block of rows, target this worker's partial (or out itself).
template <class Stats, class T, class Compute, class Accumulate>
void sum_over_rows(const KernelContext& k, const Rows& rows, T* out, const Compute& compute,
                   const Accumulate& accumulate) {
  std::fill(out, out + rows.size, T(0));
  const std::int64_t blocks = (rows.count + row_block<T> - 1) / row_block<T>;
  const std::int64_t stride = padded_size<T>(rows.size);
  const std::size_t room = k.workspace_bytes > 64 ? k.workspace_bytes - 64 : 0;
  const auto capacity = static_cast<std::int64_t>(room / (static_cast<std::size_t>(stride) * sizeof(T)));
  const int workers = static_cast<int>(std::min<std::int64_t>(capacity, sum_workers(rows, row_block<T>)));
  const auto each_block = [&](std::int64_t begin, std::int64_t end, T* target) {
    Stats stats;
    for (std::int64_t block = begin; block < end; ++block) {
      const std::int64_t first = block * row_block<T>;
      const std::int64_t count = std::min(row_block<T>, rows.count - first);
      compute(first, count, stats);
      accumulate(first, count, stats, target);
    }
  };
  if (workers <= 1) {
    each_block(0, blocks, out);
    return;
  }
  auto start = reinterpret_cast<std::uintptr_t>(k.workspace);
  T* partials = reinterpret_cast<T*>((start + 63) / 64 * 64);
  std::fill(partials, partials + stride * workers, T(0));
  detail::parallel_for(blocks, workers, [&](std::int64_t begin, std::int64_t end, int worker) {
    each_block(begin, end, partials + stride * worker);
  });
  for (int worker = 0; worker < workers; ++worker) {
    const T* partial = partials + stride * worker;
    for (std::int64_t j = 0; j < rows.size; ++j) out[j] += partial[j];
  }
}

template <class T>
void layer_norm_kernel(const KernelContext& k) {
  using Batch = xsimd::batch<T>;
  constexpr auto lanes = static_cast<std::int64_t>(Batch::size);
  const T* x = k.in<T>(0);
  const T* gamma = k.in<T>(1);
  const T* beta = k.in<T>(2);
  T* out = k.out<T>();
  const Rows rows = rows_of(k);
  for_stats_blocks(x, rows, k.attributes().get_double("epsilon"), workers_for(rows, 8),
                   [&](std::int64_t first, std::int64_t count, const BlockStats<T>& stats) {
                     for (std::int64_t i = 0; i < count; ++i) {
                       const T* row = x + (first + i) * rows.size;
                       T* target = out + (first + i) * rows.size;
                       const Batch mean(stats.mean[i]), rstd(stats.rstd[i]);
                       for (std::int64_t j = 0; j < rows.size; j += lanes) {  // (a row's last vector masked)
                         const std::int64_t width = std::min(lanes, rows.size - j);
                         const Batch value = (detail::load_run(row + j, width, T(0)) - mean) * rstd *
                                                 detail::load_run(gamma + j, width, T(0)) +
                                             detail::load_run(beta + j, width, T(0));
                         detail::store_run(target + j, width, value);
                       }
                     }
                   });
}

// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dy * gamma, per row.
template <class T>
void layer_norm_grad_kernel(const KernelContext& k) {
  using Batch = xsimd::batch<T>;
  constexpr auto lanes = static_cast<std::int64_t>(Batch::size);
  const T* x = k.in<T>(0);
  const T* gamma = k.in<T>(1);
  const T* dy = k.in<T>(2);
  T* dx = k.out<T>();
  const Rows rows = rows_of(k);
  const auto n = static_cast<T>(rows.size);
  for_stats_blocks(
      x, rows, k.attributes().get_double("epsilon"), workers_for(rows, 8),
      [&](std::int64_t first, std::int64_t count, const BlockStats<T>& stats) {
        const std::int64_t size = rows.size;
        alignas(64) T sum_g[row_block<T>], sum_g_xhat[row_block<T>];
        detail::row_sums<T>(first, count, size, sum_g,
                            [&](std::int64_t r, std::int64_t c, std::int64_t width, const Batch& sum) {
                              return xsimd::fma(detail::load_run(dy + r * size + c, width, T(0)),
                                                detail::load_run(gamma + c, width, T(0)), sum);
                            });
        detail::row_sums<T>(
            first, count, size, sum_g_xhat, [&](std::int64_t r, std::int64_t c, std::int64_t width, const Batch& sum) {
              const T mean = stats.mean[r - first], rstd = stats.rstd[r - first];
              const Batch g =
                  detail::load_run(dy + r * size + c, width, T(0)) * detail::load_run(gamma + c, width, T(0));
              const Batch xhat = (detail::load_run(x + r * size + c, width, mean) - Batch(mean)) * rstd;
              return xsimd::fma(g, xhat, sum);
            });
        for (std::int64_t i = 0; i < count; ++i) {
          const std::int64_t offset = (first + i) * rows.size;
          const T mean = stats.mean[i], rstd = stats.rstd[i];
          const T mean_g = sum_g[i] / n;
          const T mean_g_xhat = sum_g_xhat[i] / n;
          for (std::int64_t j = 0; j < size; j += lanes) {  // (a row's last vector masked)
            const std::int64_t width = std::min(lanes, size - j);
            const Batch xhat = (detail::load_run(x + offset + j, width, T(0)) - Batch(mean)) * rstd;
            const Batch g = detail::load_run(dy + offset + j, width, T(0)) * detail::load_run(gamma + j, width, T(0));
            detail::store_run(dx + offset + j, width, Batch(rstd) * (g - Batch(mean_g) - xhat * Batch(mean_g_xhat)));
          }
        }
      });
}

// dgamma = the sum over rows of dy * xhat (sum_over_rows).
template <class T>
void layer_norm_param_grad_kernel(const KernelContext& k) {
  const double epsilon = k.attributes().get_double("epsilon");
  const T* x = k.in<T>(0);
  const T* dy = k.in<T>(1);
  T* dgamma = k.out<T>();
  const Rows rows = rows_of(k);
  using Batch = xsimd::batch<T>;
  constexpr auto lanes = static_cast<std::int64_t>(Batch::size);
  // A vector of columns at a time, over a block's rows in order, in a register: each column's sum runs in row order
  // as before. One scalar column at a time, a row at a time, took 35 µs a call on mql5_block's (64, 40, 12).
  sum_over_rows<BlockStats<T>>(
      k, rows, dgamma,
      [&](std::int64_t first, std::int64_t count, BlockStats<T>& stats) {
        block_stats(x, first, count, rows.size, epsilon, stats);
      },
      [&](std::int64_t first, std::int64_t count, const BlockStats<T>& stats, T* target) {
        for (std::int64_t j = 0; j < rows.size; j += lanes) {
          const std::int64_t width = std::min(lanes, rows.size - j);
          Batch sum = detail::load_run(target + j, width, T(0));
          for (std::int64_t i = 0; i < count; ++i) {
            const std::int64_t offset = (first + i) * rows.size + j;
            const Batch deviation = detail::load_run(x + offset, width, T(0)) - Batch(stats.mean[i]);
            sum += detail::load_run(dy + offset, width, T(0)) * deviation * Batch(stats.rstd[i]);
          }
          detail::store_run(target + j, width, sum);
        }
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

// Each row's r = 1/sqrt(mean(x²) + ε), for a block of rows [first, first + count), count ≤ row_block<T>: the sums
// of squares in vector lanes, a block's rows reduced together (detail::row_sums). Row by row, a row of 64 features
// (the norms benchmark's) was a chain of 64 dependent adds: the forward took 0.6 ms and the input gradient 1 ms on
// (32, 256, 64).
template <class T>
struct BlockRrms {
  alignas(64) T rrms[row_block<T>];
};

template <class T>
void block_rrms(const T* x, std::int64_t first, std::int64_t count, std::int64_t size, double epsilon,
                BlockRrms<T>& block) {
  const T* rows = x + first * size;
  detail::row_dots(rows, rows, size, count, size, block.rrms);
  detail::reciprocal_roots(block.rrms, static_cast<double>(size), epsilon);
}

// for_row_blocks with each block's r.
template <class T, class Body>
void for_rms_blocks(const T* x, const Rows& rows, double epsilon, int workers, const Body& body) {
  for_row_blocks<BlockRrms<T>, T>(
      rows, workers,
      [&](std::int64_t first, std::int64_t count, BlockRrms<T>& block) {
        block_rrms(x, first, count, rows.size, epsilon, block);
      },
      body);
}

template <class T>
void rms_norm_kernel(const KernelContext& k) {
  const T* x = k.in<T>(0);
  const T* scale = k.in<T>(1);
  T* out = k.out<T>();
  const Rows rows = rows_of(k.input_shape(0), trailing_of(k.attributes()));
  for_rms_blocks(x, rows, k.attributes().get_double("epsilon"), workers_for(rows, 4),
                 [&](std::int64_t first, std::int64_t count, const BlockRrms<T>& block) {
                   for (std::int64_t i = 0; i < count; ++i) {
                     const T* row = x + (first + i) * rows.size;
                     T* target = out + (first + i) * rows.size;
                     const T rrms = block.rrms[i];
                     for (std::int64_t j = 0; j < rows.size; ++j) target[j] = row[j] * rrms * scale[j];
                   }
                 });
}

// dx = r·(g − x·r²·mean(g·x)) with g = dy·scale, per row (r depends on x through mean(x²)).
template <class T>
void rms_norm_grad_kernel(const KernelContext& k) {
  using Batch = xsimd::batch<T>;
  const T* x = k.in<T>(0);
  const T* scale = k.in<T>(1);
  const T* dy = k.in<T>(2);
  T* dx = k.out<T>();
  const Rows rows = rows_of(k.input_shape(0), trailing_of(k.attributes()));
  const std::int64_t n = rows.size;
  for_rms_blocks(x, rows, k.attributes().get_double("epsilon"), workers_for(rows, 6),
                 [&](std::int64_t first, std::int64_t count, const BlockRrms<T>& block) {
                   alignas(64) T sum_gx[row_block<T>];
                   detail::row_sums<T>(first, count, n, sum_gx,
                                       [&](std::int64_t r, std::int64_t c, std::int64_t width, const Batch& sum) {
                                         const Batch g = detail::load_run(dy + r * n + c, width, T(0)) *
                                                         detail::load_run(scale + c, width, T(0));
                                         return xsimd::fma(g, detail::load_run(x + r * n + c, width, T(0)), sum);
                                       });
                   for (std::int64_t i = 0; i < count; ++i) {
                     const std::int64_t offset = (first + i) * n;
                     const T rrms = block.rrms[i];
                     const T coefficient = rrms * rrms * sum_gx[i] / static_cast<T>(n);
                     for (std::int64_t j = 0; j < n; ++j)
                       dx[offset + j] = rrms * (dy[offset + j] * scale[j] - x[offset + j] * coefficient);
                   }
                 });
}

// dscale = the sum over rows of dy·x·r, in row order on one thread (its order would otherwise depend on the
// thread count).
// dscale = the sum over rows of dy * x * r (sum_over_rows).
template <class T>
void rms_norm_scale_grad_kernel(const KernelContext& k) {
  const double epsilon = k.attributes().get_double("epsilon");
  const T* x = k.in<T>(0);
  const T* dy = k.in<T>(1);
  T* dscale = k.out<T>();
  const Rows rows = rows_of(k.input_shape(0), trailing_of(k.attributes()));
  sum_over_rows<BlockRrms<T>>(
      k, rows, dscale,
      [&](std::int64_t first, std::int64_t count, BlockRrms<T>& block) {
        block_rrms(x, first, count, rows.size, epsilon, block);
      },
      [&](std::int64_t first, std::int64_t count, const BlockRrms<T>& block, T* target) {
        for (std::int64_t i = 0; i < count; ++i) {
          const std::int64_t offset = (first + i) * rows.size;
          const T rrms = block.rrms[i];
          for (std::int64_t j = 0; j < rows.size; ++j) target[j] += dy[offset + j] * x[offset + j] * rrms;
        }
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
