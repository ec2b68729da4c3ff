// LayerNorm's and RMSNorm's row kernels of one build (see norm_rows.hpp and isa.hpp), in namespace
// KILN_ISA_NAMESPACE: included by all_kernels.inl, once for each build.
#include <algorithm>
#include <cstdint>

#include <kiln/ops/detail/norm_rows.hpp>
#include <kiln/ops/detail/row_sums.hpp>
#include <kiln/ops/detail/simd.hpp>

namespace kiln::detail::KILN_ISA_NAMESPACE {

namespace {

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
static_assert(kNormRowUnit % row_block<float> == 0 && kNormRowUnit % row_block<double> == 0);

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

// body(first, count, stats) for each block of rows [first, first + count) of [begin, end), in order.
template <class Stats, class T, class Compute, class Body>
void for_blocks(std::int64_t begin, std::int64_t end, const Compute& compute, const Body& body) {
  Stats stats;
  for (std::int64_t first = begin; first < end; first += row_block<T>) {
    const std::int64_t count = std::min(row_block<T>, end - first);
    compute(first, count, stats);
    body(first, count, stats);
  }
}

template <class T>
void layer_norm(const T* x, const T* gamma, const T* beta, T* out, std::int64_t begin, std::int64_t end,
                std::int64_t size, double epsilon) {
  using Batch = xsimd::batch<T>;
  constexpr auto lanes = static_cast<std::int64_t>(Batch::size);
  for_blocks<BlockStats<T>, T>(
      begin, end,
      [&](std::int64_t first, std::int64_t count, BlockStats<T>& stats) {
        block_stats(x, first, count, size, epsilon, stats);
      },
      [&](std::int64_t first, std::int64_t count, const BlockStats<T>& stats) {
        for (std::int64_t i = 0; i < count; ++i) {
          const T* row = x + (first + i) * size;
          T* target = out + (first + i) * size;
          const Batch mean(stats.mean[i]), rstd(stats.rstd[i]);
          for (std::int64_t j = 0; j < size; j += lanes) {  // (a row's last vector masked)
            const std::int64_t width = std::min(lanes, size - j);
            const Batch value = (detail::load_run(row + j, width, T(0)) - mean) * rstd *
                                    detail::load_run(gamma + j, width, T(0)) +
                                detail::load_run(beta + j, width, T(0));
            detail::store_run(target + j, width, value);
          }
        }
      });
}

template <class T>
void layer_norm_grad(const T* x, const T* gamma, const T* dy, T* dx, std::int64_t begin, std::int64_t end,
                     std::int64_t size, double epsilon) {
  using Batch = xsimd::batch<T>;
  constexpr auto lanes = static_cast<std::int64_t>(Batch::size);
  const auto n = static_cast<T>(size);
  for_blocks<BlockStats<T>, T>(
      begin, end,
      [&](std::int64_t first, std::int64_t count, BlockStats<T>& stats) {
        block_stats(x, first, count, size, epsilon, stats);
      },
      [&](std::int64_t first, std::int64_t count, const BlockStats<T>& stats) {
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
          const std::int64_t offset = (first + i) * size;
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

// A vector of columns at a time, over a block's rows in order, in a register: each column's sum runs in row order.
// One scalar column at a time, a row at a time, took 35 µs a call on mql5_block's (64, 40, 12).
template <class T>
void layer_norm_gamma_grad(const T* x, const T* dy, T* target, std::int64_t begin, std::int64_t end,
                           std::int64_t size, double epsilon) {
  using Batch = xsimd::batch<T>;
  constexpr auto lanes = static_cast<std::int64_t>(Batch::size);
  for_blocks<BlockStats<T>, T>(
      begin, end,
      [&](std::int64_t first, std::int64_t count, BlockStats<T>& stats) {
        block_stats(x, first, count, size, epsilon, stats);
      },
      [&](std::int64_t first, std::int64_t count, const BlockStats<T>& stats) {
        for (std::int64_t j = 0; j < size; j += lanes) {
          const std::int64_t width = std::min(lanes, size - j);
          Batch sum = detail::load_run(target + j, width, T(0));
          for (std::int64_t i = 0; i < count; ++i) {
            const std::int64_t offset = (first + i) * size + j;
            const Batch deviation = detail::load_run(x + offset, width, T(0)) - Batch(stats.mean[i]);
            sum += detail::load_run(dy + offset, width, T(0)) * deviation * Batch(stats.rstd[i]);
          }
          detail::store_run(target + j, width, sum);
        }
      });
}

template <class T>
void rms_norm(const T* x, const T* scale, T* out, std::int64_t begin, std::int64_t end, std::int64_t size,
              double epsilon) {
  for_blocks<BlockRrms<T>, T>(
      begin, end,
      [&](std::int64_t first, std::int64_t count, BlockRrms<T>& block) {
        block_rrms(x, first, count, size, epsilon, block);
      },
      [&](std::int64_t first, std::int64_t count, const BlockRrms<T>& block) {
        for (std::int64_t i = 0; i < count; ++i) {
          const T* row = x + (first + i) * size;
          T* target = out + (first + i) * size;
          const T rrms = block.rrms[i];
          for (std::int64_t j = 0; j < size; ++j) target[j] = row[j] * rrms * scale[j];
        }
      });
}

template <class T>
void rms_norm_grad(const T* x, const T* scale, const T* dy, T* dx, std::int64_t begin, std::int64_t end,
                   std::int64_t n, double epsilon) {
  using Batch = xsimd::batch<T>;
  for_blocks<BlockRrms<T>, T>(
      begin, end,
      [&](std::int64_t first, std::int64_t count, BlockRrms<T>& block) {
        block_rrms(x, first, count, n, epsilon, block);
      },
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

template <class T>
void rms_norm_scale_grad(const T* x, const T* dy, T* target, std::int64_t begin, std::int64_t end,
                         std::int64_t size, double epsilon) {
  for_blocks<BlockRrms<T>, T>(
      begin, end,
      [&](std::int64_t first, std::int64_t count, BlockRrms<T>& block) {
        block_rrms(x, first, count, size, epsilon, block);
      },
      [&](std::int64_t first, std::int64_t count, const BlockRrms<T>& block) {
        for (std::int64_t i = 0; i < count; ++i) {
          const std::int64_t offset = (first + i) * size;
          const T rrms = block.rrms[i];
          for (std::int64_t j = 0; j < size; ++j) target[j] += dy[offset + j] * x[offset + j] * rrms;
        }
      });
}

}  // namespace

const NormRows<float> norm_rows_float{layer_norm<float>, layer_norm_grad<float>, layer_norm_gamma_grad<float>,
                                      rms_norm<float>,   rms_norm_grad<float>,   rms_norm_scale_grad<float>};
const NormRows<double> norm_rows_double{layer_norm<double>, layer_norm_grad<double>, layer_norm_gamma_grad<double>,
                                        rms_norm<double>,   rms_norm_grad<double>,   rms_norm_scale_grad<double>};

}  // namespace kiln::detail::KILN_ISA_NAMESPACE
