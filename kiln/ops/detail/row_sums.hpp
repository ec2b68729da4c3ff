#pragma once
// Sums along rows with SIMD vectors, and the partial loads and stores of a row's last vector (internal to ops/:
// not installed). A reduction along a short row is a chain of
// dependent adds, and a horizontal sum per row a chain of dependent shuffles; these keep a batch of rows' partial
// sums in vectors and sum their lanes by one transposing reduction, so the rows' chains overlap. A row's sum
// depends only on the row (not on which batch it falls in), so results do not change with the thread count.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <kiln/ops/detail/simd.hpp>

namespace kiln::detail {

// out[i] ← the sum of sums[i]'s lanes, for one batch of rows' partial sums (as many as a vector has lanes): on
// AVX-512 and AVX a transposing tree of shuffles and adds, a few instructions a row, where a horizontal sum per
// row is a chain of dependent shuffles. (xsimd 8.1's haddp would do this, but its AVX-512 float version returns
// the sums in a permuted order.)
template <class T>
void lane_sums(const std::array<xsimd::batch<T>, xsimd::batch<T>::size>& sums, T* out) {
  constexpr std::size_t bytes = sizeof(xsimd::batch<T>);
#if XSIMD_WITH_AVX512F
  if constexpr (bytes == 64 && std::is_same_v<T, float>) {
    // Within 128-bit lanes: pairs of rows, then quads; each 128-bit lane holds 4 rows' sums over its 4 columns.
    __m512 pairs[8];
    for (std::size_t i = 0; i < 8; ++i) {
      const __m512 a = sums[2 * i], b = sums[2 * i + 1];
      pairs[i] = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
    }
    __m512 quads[4];
    for (std::size_t i = 0; i < 4; ++i)
      quads[i] = _mm512_add_ps(_mm512_shuffle_ps(pairs[2 * i], pairs[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                               _mm512_shuffle_ps(pairs[2 * i], pairs[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    // Across 128-bit lanes: quad g's four partial sums into 128-bit lane g.
    const __m512 x01 = _mm512_add_ps(_mm512_shuffle_f32x4(quads[0], quads[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                     _mm512_shuffle_f32x4(quads[0], quads[1], _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512 x23 = _mm512_add_ps(_mm512_shuffle_f32x4(quads[2], quads[3], _MM_SHUFFLE(2, 0, 2, 0)),
                                     _mm512_shuffle_f32x4(quads[2], quads[3], _MM_SHUFFLE(3, 1, 3, 1)));
    _mm512_storeu_ps(out, _mm512_add_ps(_mm512_shuffle_f32x4(x01, x23, _MM_SHUFFLE(2, 0, 2, 0)),
                                        _mm512_shuffle_f32x4(x01, x23, _MM_SHUFFLE(3, 1, 3, 1))));
    return;
  }
#endif
#if XSIMD_WITH_AVX
  if constexpr (bytes == 32 && std::is_same_v<T, float>) {
    __m256 pairs[4];
    for (std::size_t i = 0; i < 4; ++i) {
      const __m256 a = sums[2 * i], b = sums[2 * i + 1];
      pairs[i] = _mm256_add_ps(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b));
    }
    __m256 quads[2];
    for (std::size_t i = 0; i < 2; ++i)
      quads[i] = _mm256_add_ps(_mm256_shuffle_ps(pairs[2 * i], pairs[2 * i + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                               _mm256_shuffle_ps(pairs[2 * i], pairs[2 * i + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    _mm256_storeu_ps(out, _mm256_add_ps(_mm256_permute2f128_ps(quads[0], quads[1], 0x20),
                                        _mm256_permute2f128_ps(quads[0], quads[1], 0x31)));
    return;
  }
#endif
  (void)bytes;
  for (std::size_t i = 0; i < sums.size(); ++i) out[i] = xsimd::hadd(sums[i]);
}

// Masks of a vector's first `count` lanes (0 < count ≤ the vector's lanes), for masked loads and stores.
#if XSIMD_WITH_AVX512F
inline __mmask16 first_lanes(std::int64_t count) { return static_cast<__mmask16>((1u << count) - 1); }
#endif
#if XSIMD_WITH_AVX2
template <class T>
__m256i first_lanes_avx2(std::int64_t count) {
  if constexpr (sizeof(T) == 4)
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(count)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  else
    return _mm256_cmpgt_epi64(_mm256_set1_epi64x(count), _mm256_setr_epi64x(0, 1, 2, 3));
}
#endif

// The `count` elements at p (0 < count ≤ the vector's lanes) in a vector's first lanes, `fill` in the others. A
// partial vector is a masked load on AVX-512 and AVX2, which reads nothing past p + count: a row's last partial
// vector needs no scalar loop, and a row shorter than a vector (LayerNorm over 12 features) is one load.
template <class T>
xsimd::batch<T> load_run(const T* p, std::int64_t count, T fill) {
  using Batch = xsimd::batch<T>;
  constexpr auto lanes = static_cast<std::int64_t>(Batch::size);
  if (count == lanes) return Batch::load_unaligned(p);
#if XSIMD_WITH_AVX512F
  if constexpr (sizeof(Batch) == 64 && std::is_same_v<T, float>)
    return _mm512_mask_loadu_ps(_mm512_set1_ps(fill), first_lanes(count), p);
  if constexpr (sizeof(Batch) == 64 && std::is_same_v<T, double>)
    return _mm512_mask_loadu_pd(_mm512_set1_pd(fill), static_cast<__mmask8>(first_lanes(count)), p);
#endif
#if XSIMD_WITH_AVX2
  if constexpr (sizeof(Batch) == 32 && std::is_same_v<T, float>) {
    const __m256i mask = first_lanes_avx2<T>(count);
    return _mm256_blendv_ps(_mm256_set1_ps(fill), _mm256_maskload_ps(p, mask), _mm256_castsi256_ps(mask));
  }
  if constexpr (sizeof(Batch) == 32 && std::is_same_v<T, double>) {
    const __m256i mask = first_lanes_avx2<T>(count);
    return _mm256_blendv_pd(_mm256_set1_pd(fill), _mm256_maskload_pd(p, mask), _mm256_castsi256_pd(mask));
  }
#endif
  alignas(64) T values[lanes];
  for (std::int64_t i = 0; i < lanes; ++i) values[i] = i < count ? p[i] : fill;
  return Batch::load_aligned(values);
}

// p[0, count) ← value's first `count` lanes (0 < count ≤ the vector's lanes); a masked store on AVX-512 and AVX2.
template <class T>
void store_run(T* p, std::int64_t count, const xsimd::batch<T>& value) {
  using Batch = xsimd::batch<T>;
  constexpr auto lanes = static_cast<std::int64_t>(Batch::size);
  if (count == lanes) return value.store_unaligned(p);
#if XSIMD_WITH_AVX512F
  if constexpr (sizeof(Batch) == 64 && std::is_same_v<T, float>)
    return _mm512_mask_storeu_ps(p, first_lanes(count), value);
  if constexpr (sizeof(Batch) == 64 && std::is_same_v<T, double>)
    return _mm512_mask_storeu_pd(p, static_cast<__mmask8>(first_lanes(count)), value);
#endif
#if XSIMD_WITH_AVX2
  if constexpr (sizeof(Batch) == 32 && std::is_same_v<T, float>)
    return _mm256_maskstore_ps(p, first_lanes_avx2<T>(count), value);
  if constexpr (sizeof(Batch) == 32 && std::is_same_v<T, double>)
    return _mm256_maskstore_pd(p, first_lanes_avx2<T>(count), value);
#endif
  alignas(64) T values[lanes];
  value.store_aligned(values);
  std::copy(values, values + count, p);
}

// values[i] ← 1/sqrt(values[i]/divisor + ε) for a whole vector of values, computed in double and rounded once to T (a
// normalization's 1/σ for a block of rows): vectors of square roots and divisions rather than one chain per row.
template <class T>
void reciprocal_roots(T* values, double divisor, double epsilon) {
  using Wide = xsimd::batch<double>;
  constexpr std::size_t count = xsimd::batch<T>::size, wide = Wide::size;
  alignas(64) double staged[count];
  for (std::size_t i = 0; i < count; ++i) staged[i] = static_cast<double>(values[i]) / divisor;
  for (std::size_t i = 0; i < count; i += wide)
    (Wide(1.0) / xsimd::sqrt(Wide::load_aligned(staged + i) + Wide(epsilon))).store_aligned(staged + i);
  for (std::size_t i = 0; i < count; ++i) values[i] = static_cast<T>(staged[i]);
}

// out[i] ← the sum over a row of n of row first + i's terms, for rows [first, first + count), count ≤ the vector's
// lanes; out has room for a whole vector (its lanes past count get 0). accumulate(row, column, width, sum) returns
// sum plus the terms of columns [column, column + width), width ≤ lanes (less only for a row's last vector: read it
// with load_run, with a fill whose terms are 0).
template <class T, class Accumulate>
void row_sums(std::int64_t first, std::int64_t count, std::int64_t n, T* out, const Accumulate& accumulate) {
  using Batch = xsimd::batch<T>;
  constexpr auto lanes = static_cast<std::int64_t>(Batch::size);
  std::array<Batch, lanes> sums;
  for (std::int64_t i = 0; i < lanes; ++i) {
    sums[i] = Batch(T(0));
    if (i >= count) continue;
    for (std::int64_t c = 0; c < n; c += lanes) sums[i] = accumulate(first + i, c, std::min(lanes, n - c), sums[i]);
  }
  lane_sums(sums, out);
}

// out[r] ← a_r · b_r for `rows` rows of n, ld apart. out is padded to whole vectors (its lanes past `rows` get 0).
template <class T>
void row_dots(const T* a, const T* b, std::int64_t ld, std::int64_t rows, std::int64_t n, T* out) {
  using Batch = xsimd::batch<T>;
  constexpr auto lanes = static_cast<std::int64_t>(Batch::size);
  for (std::int64_t first = 0; first < rows; first += lanes)
    row_sums<T>(first, std::min(lanes, rows - first), n, out + first,
                [&](std::int64_t r, std::int64_t c, std::int64_t width, const Batch& sum) {
                  return xsimd::fma(load_run(a + r * ld + c, width, T(0)), load_run(b + r * ld + c, width, T(0)), sum);
                });
}

}  // namespace kiln::detail
