// int4_rows: a token's products by Keras's int4 kernels (generation, the rows of C at most 4). Keras dequantizes the
// whole kernel to float32 before every product (Dense._int4_call, "storage only"); for a few rows that costs many
// times the product. Here each packed byte is read once, its two values widened, (value - zero) · scale made in
// float32 as Keras's dequantize_with_sz_map makes it, and multiplied into the rows at once: the product reads half
// a byte a weight. B is taken 16 rows at a time across all columns, 64 columns in M × 4 accumulators, the partial
// sums kept between row blocks (as kiln's few-row bfloat16 kernel streams B).
#include <kiln/ops/detail/int4_rows.hpp>

#include <kiln/ops/detail/isa.hpp>

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#include <kiln/ops/detail/lane_masks.hpp>

namespace kiln::detail {
namespace {

// (GCC 12's headers build some 512-bit results from an undefined vector, which -Wmaybe-uninitialized reports
// wherever they are inlined: a false alarm, silenced here, as in int8_rows.cpp.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// 16 int4 values (8 packed bytes; fewer at a row's end, the rest read as zeros) as floats, in column order.
__attribute__((target("avx512f,avx512bw"))) inline __m512 values16(const std::int8_t* bytes, std::int64_t available) {
  __m128i raw;
  if (available >= 8) {
    raw = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes));
  } else {
    alignas(16) std::int8_t copy[16] = {};
    if (available > 0) std::memcpy(copy, bytes, static_cast<std::size_t>(available));
    raw = _mm_load_si128(reinterpret_cast<const __m128i*>(copy));
  }
  const __m128i wide = _mm_cvtepu8_epi16(raw);
  const __m128i low = _mm_and_si128(wide, _mm_set1_epi16(0x0f));
  const __m128i high = _mm_srli_epi16(wide, 4);
  const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi16(low, high)),
                                               _mm_unpackhi_epi16(low, high), 1);
  __m512i v = _mm512_cvtepu16_epi32(both);
  v = _mm512_sub_epi32(v, _mm512_slli_epi32(_mm512_and_si512(v, _mm512_set1_epi32(8)), 1));  // [8, 15] -> [-8, -1]
  return _mm512_cvtepi32_ps(v);
}

template <int M>
__attribute__((target("avx512f,avx512bw"))) void rows(std::int64_t n, std::int64_t k, const float* x,
                                                      const std::int8_t* packed, const float* scale,
                                                      const float* zero, const float* g_idx, float* y, float* partial,
                                                      std::int64_t begin, std::int64_t end) {
  constexpr std::int64_t chunk = 16;
  const std::int64_t bytes = (n + 1) / 2;
  for (std::int64_t p0 = 0; p0 < k; p0 += chunk) {
    const std::int64_t p1 = std::min(k, p0 + chunk);
    for (std::int64_t j0 = begin; j0 < end; j0 += 64) {
      __mmask16 mask[4];
      for (int v = 0; v < 4; ++v) mask[v] = lanes_below(end - j0 - 16 * v);
      __m512 acc[M][4];
      for (int i = 0; i < M; ++i)
        for (int v = 0; v < 4; ++v)
          acc[i][v] = p0 == 0 ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mask[v], partial + i * n + j0 + 16 * v);
      for (std::int64_t p = p0; p < p1; ++p) {
        const std::int64_t g = static_cast<std::int64_t>(g_idx[p]);
        const std::int8_t* row = packed + p * bytes + j0 / 2;
        __m512 w[4];
        for (int v = 0; v < 4; ++v) {
          if (mask[v] == 0) {
            w[v] = _mm512_setzero_ps();
            continue;
          }
          const __m512 value = values16(row + 8 * v, bytes - j0 / 2 - 8 * v);
          const __m512 z = _mm512_maskz_loadu_ps(mask[v], zero + g * n + j0 + 16 * v);
          const __m512 s = _mm512_maskz_loadu_ps(mask[v], scale + g * n + j0 + 16 * v);
          w[v] = _mm512_mul_ps(_mm512_sub_ps(value, z), s);  // Keras: (value - zero) · scale, in float32
        }
        for (int i = 0; i < M; ++i) {
          const __m512 xv = _mm512_set1_ps(x[i * k + p]);
          for (int v = 0; v < 4; ++v) acc[i][v] = _mm512_fmadd_ps(xv, w[v], acc[i][v]);
        }
      }
      float* target = p1 < k ? partial : y;
      for (int i = 0; i < M; ++i)
        for (int v = 0; v < 4; ++v) _mm512_mask_storeu_ps(target + i * n + j0 + 16 * v, mask[v], acc[i][v]);
    }
  }
}

// The transposed form: y[i][r] = Σ_c x[i][c] · W[r][c], W[r][c] = (value[r][c] - zero[r][c / block]) · scale[r][...],
// a tied ReversibleEmbedding's table read in reverse, whose groups run along its columns (block a multiple of 16:
// each 16 columns share one scale and zero point). Rows [begin, end) of W; x rows already as the caller wants them
// multiplied (quantized values as floats, zero past k), y divided by `divisor[i]` (the inputs' scales) if given.
template <int M>
__attribute__((target("avx512f,avx512bw"))) void rows_transposed(std::int64_t k, std::int64_t groups, std::int64_t block,
                                                                 const float* x, const std::int8_t* packed,
                                                                 const float* scale, const float* zero, float* y,
                                                                 std::int64_t ldy, const float* divisor,
                                                                 std::int64_t begin, std::int64_t end) {
  const std::int64_t bytes = (k + 1) / 2;
  for (std::int64_t r = begin; r < end; ++r) {
    const std::int8_t* row = packed + r * bytes;
    __m512 acc[M];
    for (int i = 0; i < M; ++i) acc[i] = _mm512_setzero_ps();
    for (std::int64_t c = 0; c < k; c += 16) {
      const __mmask16 mask = lanes_below(k - c);
      const std::int64_t g = c / block;
      const __m512 w = _mm512_mul_ps(_mm512_sub_ps(values16(row + c / 2, bytes - c / 2), _mm512_set1_ps(zero[r * groups + g])),
                                     _mm512_set1_ps(scale[r * groups + g]));
      for (int i = 0; i < M; ++i) acc[i] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, x + i * k + c), w, acc[i]);
    }
    for (int i = 0; i < M; ++i) {
      const float sum = _mm512_reduce_add_ps(acc[i]);
      y[i * ldy + r] = divisor != nullptr ? sum / divisor[i] : sum;
    }
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace

bool int4_rows_available() {
  static const bool cpu = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  // (A test's ScopedIsa below x86-64-v4 stands for a CPU without AVX-512: then the general path runs.)
  const Isa isa = active_isa();
  return cpu && (isa == Isa::own || isa == Isa::x86_64_v4);
}

void int4_rows(std::int64_t m, std::int64_t n, std::int64_t k, const float* x, const std::int8_t* packed,
               const float* scale, const float* zero, const float* g_idx, float* y, float* partial,
               std::int64_t begin, std::int64_t end) {
  switch (m) {
    case 1: return rows<1>(n, k, x, packed, scale, zero, g_idx, y, partial, begin, end);
    case 2: return rows<2>(n, k, x, packed, scale, zero, g_idx, y, partial, begin, end);
    case 3: return rows<3>(n, k, x, packed, scale, zero, g_idx, y, partial, begin, end);
    default: return rows<4>(n, k, x, packed, scale, zero, g_idx, y, partial, begin, end);
  }
}

void int4_rows_transposed(std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t groups, std::int64_t block,
                          const float* x, const std::int8_t* packed, const float* scale, const float* zero, float* y,
                          const float* divisor, std::int64_t begin, std::int64_t end) {
  switch (m) {
    case 1: return rows_transposed<1>(k, groups, block, x, packed, scale, zero, y, n, divisor, begin, end);
    case 2: return rows_transposed<2>(k, groups, block, x, packed, scale, zero, y, n, divisor, begin, end);
    case 3: return rows_transposed<3>(k, groups, block, x, packed, scale, zero, y, n, divisor, begin, end);
    default: return rows_transposed<4>(k, groups, block, x, packed, scale, zero, y, n, divisor, begin, end);
  }
}

}  // namespace kiln::detail

#else

namespace kiln::detail {
bool int4_rows_available() { return false; }
void int4_rows(std::int64_t, std::int64_t, std::int64_t, const float*, const std::int8_t*, const float*, const float*,
               const float*, float*, float*, std::int64_t, std::int64_t) {}
void int4_rows_transposed(std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, const float*,
                          const std::int8_t*, const float*, const float*, float*, const float*, std::int64_t,
                          std::int64_t) {}
}  // namespace kiln::detail

#endif
