// The fused attention's row kernels of one build (see attention_rows.hpp and isa.hpp), in namespace
// KILN_ISA_NAMESPACE: included by all_kernels.inl, once for each build.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include <kiln/ops/detail/attention_rows.hpp>
#include <kiln/ops/detail/row_sums.hpp>
#include <kiln/ops/detail/simd.hpp>
#include <kiln/ops/detail/softmax_exp.hpp>

namespace kiln::detail::KILN_ISA_NAMESPACE {

namespace {

template <class T>
constexpr T minus_infinity = -std::numeric_limits<T>::infinity();

// The largest lane: a shuffle tree on AVX-512 and AVX (the score rows' max runs once per row, and a store
// and scalar scan of the lanes took an eighth of a 40-key row's softmax).
template <class T>
T horizontal_max(const xsimd::batch<T>& values) {
  constexpr std::size_t bytes = sizeof(xsimd::batch<T>);
#if XSIMD_WITH_AVX512F
  if constexpr (bytes == 64) {
    if constexpr (std::is_same_v<T, float>) return _mm512_reduce_max_ps(values);
    if constexpr (std::is_same_v<T, double>) return _mm512_reduce_max_pd(values);
  }
#endif
#if XSIMD_WITH_AVX
  if constexpr (bytes == 32 && std::is_same_v<T, float>) {
    const __m256 v = values;
    __m256 m = _mm256_max_ps(v, _mm256_permute2f128_ps(v, v, 1));
    m = _mm256_max_ps(m, _mm256_permute_ps(m, 0x4E));
    return _mm256_cvtss_f32(_mm256_max_ps(m, _mm256_permute_ps(m, 0xB1)));
  }
  if constexpr (bytes == 32 && std::is_same_v<T, double>) {
    const __m256d v = values;
    const __m256d m = _mm256_max_pd(v, _mm256_permute2f128_pd(v, v, 1));
    return _mm256_cvtsd_f64(_mm256_max_pd(m, _mm256_permute_pd(m, 5)));
  }
#endif
  (void)bytes;  // (without AVX)
  alignas(64) T lanes[xsimd::batch<T>::size];
  values.store_aligned(lanes);
  return *std::max_element(lanes, lanes + xsimd::batch<T>::size);
}

// 0, 1, 2, ... in the lanes.
template <class T>
xsimd::batch<T> lane_indices() {
  alignas(64) T lanes[xsimd::batch<T>::size];
  for (std::size_t i = 0; i < xsimd::batch<T>::size; ++i) lanes[i] = static_cast<T>(i);
  return xsimd::batch<T>::load_aligned(lanes);
}

// x ← scale·x where the key may be attended (the first `allowed` columns, and a nonzero mask), −∞
// elsewhere. Returns the row's max (−∞ when nothing may be attended). n is the padded row (score_width):
// without a mask the partial vector at `allowed` is one vector with its lanes past `allowed` excluded, so a
// 40-key row is three vector steps and no scalar ones.
template <class T>
T scale_mask_max(T* x, const T* mask, std::int64_t allowed, std::int64_t n, T scale) {
  using Batch = xsimd::batch<T>;
  constexpr auto width = static_cast<std::int64_t>(Batch::size);
  const Batch factor(scale), excluded(minus_infinity<T>), zero(T(0));
  Batch running(minus_infinity<T>);
  std::int64_t c = 0;
  for (; c + width <= allowed; c += width) {
    Batch value = Batch::load_unaligned(x + c) * factor;
    if (mask != nullptr) value = xsimd::select(Batch::load_unaligned(mask + c) != zero, value, excluded);
    value.store_unaligned(x + c);
    running = xsimd::max(running, value);
  }
  if (mask == nullptr && c < allowed && c + width <= n) {
    const auto kept = lane_indices<T>() < Batch(static_cast<T>(allowed - c));
    const Batch value = xsimd::select(kept, Batch::load_unaligned(x + c) * factor, excluded);
    value.store_unaligned(x + c);
    running = xsimd::max(running, value);
    c += width;
  }
  T max = horizontal_max(running);
  for (; c < allowed; ++c) {
    x[c] = (mask != nullptr && mask[c] == T(0)) ? minus_infinity<T> : x[c] * scale;
    max = std::max(max, x[c]);
  }
  if (c < n) std::fill(x + c, x + n, minus_infinity<T>);
  return max;
}

// x ← exp(x − shift); returns the sum. Entries at −∞ (excluded keys) become exactly 0.
template <class T>
T exp_and_sum(T* x, std::int64_t n, T shift) {
  using Batch = xsimd::batch<T>;
  constexpr auto width = static_cast<std::int64_t>(Batch::size);
  const Batch offset(shift);
  Batch sums(T(0));
  std::int64_t c = 0;
  for (; c + width <= n; c += width) {
    const Batch value = detail::softmax_exp(Batch::load_unaligned(x + c) - offset);
    value.store_unaligned(x + c);
    sums += value;
  }
  if (c < n) {  // the last, partial vector, padded with −∞ (whose exp is 0): scalar exps cost 5-10× more
    alignas(64) T lanes[width];
    std::fill(std::copy(x + c, x + n, lanes), lanes + width, minus_infinity<T>);
    const Batch value = detail::softmax_exp(Batch::load_aligned(lanes) - offset);
    value.store_aligned(lanes);
    sums += value;
    std::copy(lanes, lanes + (n - c), x + c);
  }
  return xsimd::hadd(sums);
}

// One score row of a key block into probabilities relative to the running max, updating the running
// max and sum. Returns the factor that rescales what the row accumulated from earlier blocks.
template <class T>
T online_softmax_row(T* x, const T* mask, std::int64_t allowed, std::int64_t n, T scale, T& max, T& sum) {
  const T new_max = std::max(max, scale_mask_max(x, mask, allowed, n, scale));
  if (new_max == minus_infinity<T>) {  // nothing attended yet: exp(−∞ − (−∞)) would be NaN
    std::fill(x, x + n, T(0));
    return T(1);
  }
  const T rescale = max == minus_infinity<T> ? T(0) : std::exp(max - new_max);  // (the first block: nothing to rescale)
  sum = sum * rescale + exp_and_sum(x, n, new_max);
  max = new_max;
  return rescale;
}

// The forward's probabilities, recomputed in one pass from the saved log-sum-exp: exp(scale·s − lse), 0
// where excluded. A row that attends nothing has lse = +∞ and comes out all 0.
template <class T>
void probabilities_row(T* x, const T* mask, std::int64_t allowed, std::int64_t n, T scale, T lse) {
  scale_mask_max(x, mask, allowed, n, scale);
  exp_and_sum(x, n, lse);
}

// One score row of a sequence that is one key block (the kept-probabilities path) into its probabilities:
// softmax(scale·x) over the keys it may attend, 0 elsewhere. Also its max and its sum relative to that max, for
// its log-sum-exp. A row that may attend nothing is all 0 (sum 0, max −∞), as unfused.
template <class T>
void softmax_row(T* x, const T* mask, std::int64_t allowed, std::int64_t n, T scale, T& max, T& sum) {
  using Batch = xsimd::batch<T>;
  constexpr auto width = static_cast<std::int64_t>(Batch::size);
  max = scale_mask_max(x, mask, allowed, n, scale);
  if (max == minus_infinity<T>) {
    std::fill(x, x + n, T(0));
    sum = T(0);
    return;
  }
  sum = exp_and_sum(x, n, max);
  const T inverse = T(1) / sum;
  std::int64_t c = 0;
  for (; c + width <= n; c += width) (Batch::load_unaligned(x + c) * Batch(inverse)).store_unaligned(x + c);
  for (; c < n; ++c) x[c] *= inverse;
}

// lse ← max + log(sum) for `rows` rows, +∞ for a row that attends nothing (max −∞). max and sum are padded
// to whole vectors (scratch rows), lse is not. A vector of logs at a time: a scalar log per row took 3-4 % of
// a 40-query head's forward.
template <class T>
void log_sum_exps(const T* max, const T* sum, std::int64_t rows, T* lse) {
  using Batch = xsimd::batch<T>;
  constexpr auto width = static_cast<std::int64_t>(Batch::size);
  const Batch excluded(minus_infinity<T>), nothing(std::numeric_limits<T>::infinity());
  for (std::int64_t r = 0; r < rows; r += width) {
    const Batch row_max = Batch::load_unaligned(max + r);
    const Batch value =
        xsimd::select(row_max == excluded, nothing, row_max + xsimd::log(Batch::load_unaligned(sum + r)));
    if (r + width <= rows) {
      value.store_unaligned(lse + r);
    } else {
      alignas(64) T lanes[width];
      value.store_aligned(lanes);
      std::copy(lanes, lanes + (rows - r), lse + r);
    }
  }
}

// One row of the scores' gradient: grad ← scale·p ∘ (grad − dot), over the padded row (n, whole vectors; the
// padding's values are never read).
template <class T>
void scores_grad_row(T* grad, const T* p, std::int64_t n, T dot, T scale) {
  using Batch = xsimd::batch<T>;
  constexpr auto width = static_cast<std::int64_t>(Batch::size);
  const Batch shift(dot), factor(scale);
  std::int64_t c = 0;
  for (; c + width <= n; c += width)
    (factor * Batch::load_unaligned(p + c) * (Batch::load_unaligned(grad + c) - shift)).store_unaligned(grad + c);
  for (; c < n; ++c) grad[c] = scale * p[c] * (grad[c] - dot);
}

// softmax_row for every row of a kept head without a mask, when a row is at most eight vectors (score widths up
// to 64 floats on AVX-512, to 32 doubles; with AVX2's vectors up to 64 floats too), in three passes over the head's rows: scale and max, exp and sum, normalize. Row by
// row, each row was one chain of dependent steps (max, exps, sum, division) as long as its work, and 40-key
// rows spent as long on calls, constants and reductions as on the exps; in passes the rows of a pass are
// independent and the core overlaps them. The same operations per element as softmax_row, so the same
// results; also writes the log-sum-exps (lse), and leaves 1/sum (0 for a row that attends nothing) in row_sum.
template <class T, int Vectors>
void softmax_rows_in_passes(T* p, std::int64_t rows, std::int64_t width, const RowsHead<T>& h, std::int64_t keys,
                            T* row_max, T* row_sum, T* lse) {
  using Batch = xsimd::batch<T>;
  constexpr auto lanes = static_cast<std::int64_t>(Batch::size);
  const Batch factor(h.scale), excluded(minus_infinity<T>), zero(T(0)), indices = lane_indices<T>();
  for (std::int64_t r = 0; r < rows; ++r) {  // x ← scale·x where attended, −∞ elsewhere; the row's max
    T* x = p + r * width;
    const Batch allowed(static_cast<T>(h.allowed(r, 0, keys)));
    Batch running = excluded;
    for (int c = 0; c < Vectors; ++c) {  // (columns past `allowed` hold whatever the product left: not read)
      const Batch value = xsimd::select(indices + Batch(static_cast<T>(c * lanes)) < allowed,
                                        Batch::load_unaligned(x + c * lanes) * factor, excluded);
      value.store_unaligned(x + c * lanes);
      running = xsimd::max(running, value);
    }
    row_max[r] = horizontal_max(running);
  }
  // x ← exp(x − max), a row that attends nothing all 0; the sums of a batch of rows by one parallel reduction
  for (std::int64_t first = 0; first < rows; first += lanes) {
    std::array<Batch, lanes> sums;
    for (std::int64_t i = 0; i < lanes; ++i) {
      const std::int64_t r = first + i;
      sums[i] = zero;
      if (r >= rows) continue;
      T* x = p + r * width;
      const Batch shift(row_max[r] == minus_infinity<T> ? T(0) : row_max[r]);
      for (int c = 0; c < Vectors; ++c) {
        const Batch value = detail::softmax_exp(Batch::load_unaligned(x + c * lanes) - shift);
        value.store_unaligned(x + c * lanes);
        sums[i] += value;
      }
    }
    lane_sums(sums, row_sum + first);  // (scratch rows are padded to whole vectors)
  }
  log_sum_exps(row_max, row_sum, rows, lse);
  for (std::int64_t r = 0; r < rows; r += lanes) {  // row_sum ← 1/sum (scratch rows are padded to whole vectors)
    const Batch sum = Batch::load_unaligned(row_sum + r);
    xsimd::select(sum == zero, zero, Batch(T(1)) / sum).store_unaligned(row_sum + r);
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    T* x = p + r * width;
    const Batch inverse(row_sum[r]);
    for (int c = 0; c < Vectors; ++c) (Batch::load_unaligned(x + c * lanes) * inverse).store_unaligned(x + c * lanes);
  }
}

// A kept head's rows into probabilities (softmax_row) and their log-sum-exps, in passes where the rows allow it.
template <class T>
void softmax_rows(T* p, std::int64_t rows, std::int64_t width, const RowsHead<T>& h, std::int64_t keys, T* row_max,
                  T* row_sum, T* lse) {
  constexpr auto lanes = static_cast<std::int64_t>(xsimd::batch<T>::size);
  if (h.mask == nullptr && width % lanes == 0) {
    switch (width / lanes) {
      case 1:
        return softmax_rows_in_passes<T, 1>(p, rows, width, h, keys, row_max, row_sum, lse);
      case 2:
        return softmax_rows_in_passes<T, 2>(p, rows, width, h, keys, row_max, row_sum, lse);
      case 3:
        return softmax_rows_in_passes<T, 3>(p, rows, width, h, keys, row_max, row_sum, lse);
      case 4:
        return softmax_rows_in_passes<T, 4>(p, rows, width, h, keys, row_max, row_sum, lse);
      // Up to 64 floats with narrower vectors too (AVX2's 8 lanes, or doubles): as many rows take the passes.
      case 5:
        return softmax_rows_in_passes<T, 5>(p, rows, width, h, keys, row_max, row_sum, lse);
      case 6:
        return softmax_rows_in_passes<T, 6>(p, rows, width, h, keys, row_max, row_sum, lse);
      case 7:
        return softmax_rows_in_passes<T, 7>(p, rows, width, h, keys, row_max, row_sum, lse);
      case 8:
        return softmax_rows_in_passes<T, 8>(p, rows, width, h, keys, row_max, row_sum, lse);
      default:
        break;
    }
  }
  for (std::int64_t r = 0; r < rows; ++r)
    softmax_row(p + r * width, h.mask_row(r, 0), h.allowed(r, 0, keys), width, h.scale, row_max[r], row_sum[r]);
  log_sum_exps(row_max, row_sum, rows, lse);
}

}  // namespace

const AttentionRows<float> attention_rows_float{online_softmax_row<float>, probabilities_row<float>,
                                                log_sum_exps<float>, scores_grad_row<float>, softmax_rows<float>};
const AttentionRows<double> attention_rows_double{online_softmax_row<double>, probabilities_row<double>,
                                                  log_sum_exps<double>, scores_grad_row<double>, softmax_rows<double>};

}  // namespace kiln::detail::KILN_ISA_NAMESPACE
