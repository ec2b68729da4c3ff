// Few-row int8 products on AVX512-VNNI, reading B (the int8 weights) as Keras stores them, row-major (k × n), with no
// packing: what a quantized model runs for one sample or one generated token, where oneDNN's dnnl_gemm_s8s8s32 packs
// B on every call (1×768×3072: 126 µs of which the product is a fraction).
//
// vpdpbusd adds, in each 32-bit lane, four products of unsigned bytes by signed bytes. B's four rows p..p+3 are
// interleaved in registers (unpack by bytes, then by words, within each 128-bit lane) into four-byte groups, one
// group per output column, and flipped to unsigned (x ^ 0x80 = x + 128); A's four values q[p..p+3] are broadcast as
// the signed side. Each sum then holds Σ (b + 128)·q = Σ b·q + 128·Σ q, and 128·Σ q (one per row of A) is taken off
// at the end. The unpacking leaves the columns of a 64-column block in the order (lane, group, position): the sums
// are put back in column order when they are stored. Exact: every step is integer.
//
// B stored transposed (n × k, a tied embedding read in reverse) is read a row of B per output column: A's row is the
// flipped, unsigned side this time (a + 128), B's row the signed one, 64 bytes a step, and the same pass sums B's
// row (vpdpbusd with ones) for the correction 128 · Σ b, which differs per column.
#include <kiln/ops/detail/int8_rows.hpp>

#include <kiln/ops/detail/isa.hpp>

#include <algorithm>
#include <cstdint>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define KILN_INT8_ROWS_X86 1
#else
#define KILN_INT8_ROWS_X86 0
#endif

namespace kiln::detail {

#if KILN_INT8_ROWS_X86

namespace {

// The four interleaved vectors of B's rows r0..r3 (64 columns each): vector g holds, in 128-bit lane L, the groups
// of columns 16L + 4g .. 16L + 4g + 3, each group (r0[c], r1[c], r2[c], r3[c]) flipped to unsigned.
__attribute__((target("avx512f,avx512bw"))) inline void interleave(__m512i r0, __m512i r1, __m512i r2, __m512i r3,
                                                                   __m512i out[4]) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  r0 = _mm512_xor_si512(r0, flip);
  r1 = _mm512_xor_si512(r1, flip);
  r2 = _mm512_xor_si512(r2, flip);
  r3 = _mm512_xor_si512(r3, flip);
  const __m512i lo01 = _mm512_unpacklo_epi8(r0, r1), hi01 = _mm512_unpackhi_epi8(r0, r1);
  const __m512i lo23 = _mm512_unpacklo_epi8(r2, r3), hi23 = _mm512_unpackhi_epi8(r2, r3);
  out[0] = _mm512_unpacklo_epi16(lo01, lo23);
  out[1] = _mm512_unpackhi_epi16(lo01, lo23);
  out[2] = _mm512_unpacklo_epi16(hi01, hi23);
  out[3] = _mm512_unpackhi_epi16(hi01, hi23);
}

// Row p of B from column j, the columns under the mask; zeros past k.
__attribute__((target("avx512f,avx512bw"))) inline __m512i load_row(const std::int8_t* b, std::int64_t ldb,
                                                                    std::int64_t j, std::int64_t p, std::int64_t k,
                                                                    __mmask64 columns) {
  return p < k ? _mm512_maskz_loadu_epi8(columns, b + p * ldb + j) : _mm512_setzero_si512();
}

// Rows [0, M) of C, M ≤ 4, for the columns [j, j + width) (width ≤ 64; a shorter last block loads under a mask);
// correction[i]: 128 · Σ q of row i, what the flip to unsigned added to every sum of that row.
template <int M>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void block(std::int64_t width, std::int64_t k,
                                                                   const std::int8_t* a, std::int64_t lda,
                                                                   const std::int8_t* b, std::int64_t ldb,
                                                                   std::int32_t* c, std::int64_t ldc, std::int64_t j,
                                                                   const std::uint32_t* correction) {
  const __mmask64 columns = width >= 64 ? ~__mmask64{0} : ((__mmask64{1} << width) - 1);
  __m512i sums[M][4];
  for (int i = 0; i < M; ++i)
    for (int g = 0; g < 4; ++g) sums[i][g] = _mm512_setzero_si512();
  for (std::int64_t p = 0; p < k; p += 4) {
    __m512i groups[4];
    // (rows past k are zeros, and so are A's values there: they add nothing, flipped or not, as q is 0)
    interleave(load_row(b, ldb, j, p, k, columns), load_row(b, ldb, j, p + 1, k, columns),
               load_row(b, ldb, j, p + 2, k, columns), load_row(b, ldb, j, p + 3, k, columns), groups);
    for (int i = 0; i < M; ++i) {
      const std::int8_t* q = a + i * lda + p;
      std::uint8_t bytes[4] = {0, 0, 0, 0};
      for (int t = 0; t < 4 && p + t < k; ++t) bytes[t] = static_cast<std::uint8_t>(q[t]);
      const auto four = static_cast<std::int32_t>(static_cast<std::uint32_t>(bytes[0]) | (static_cast<std::uint32_t>(bytes[1]) << 8) |
                                       (static_cast<std::uint32_t>(bytes[2]) << 16) |
                                       (static_cast<std::uint32_t>(bytes[3]) << 24));
      const __m512i broadcast = _mm512_set1_epi32(four);
      for (int g = 0; g < 4; ++g) sums[i][g] = _mm512_dpbusd_epi32(sums[i][g], groups[g], broadcast);
    }
  }
  for (int i = 0; i < M; ++i) {
    // The sums of (b + 128)·q can pass int32 (k above 66 000) while the true ones cannot: the difference is taken
    // modulo 2^32, which gives the true sum.
    alignas(64) std::int32_t lanes[4][16];
    for (int g = 0; g < 4; ++g) _mm512_store_si512(lanes[g], sums[i][g]);
    std::int32_t* row = c + i * ldc + j;
    for (std::int64_t column = 0; column < width; ++column) {
      // column = 16 L + 4 g + d sits in vector g at 4 L + d
      const std::int64_t lane = column >> 4, g = (column >> 2) & 3, d = column & 3;
      row[column] = static_cast<std::int32_t>(static_cast<std::uint32_t>(lanes[g][lane * 4 + d]) - correction[i]);
    }
  }
}

// One row of A over whole 64-column blocks, B read row after row (four at a time, each across every block), the
// sums kept in C itself in the interleaved order and put in column order at the end: B streams from memory in
// order, where block<1> reads it 64 bytes at a stride of ldb (generation, whose weights come from memory every
// token, read them at a third of the rate). `columns` is a multiple of 64.
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void streamed_row(std::int64_t columns, std::int64_t k,
                                                                          const std::int8_t* a, const std::int8_t* b,
                                                                          std::int64_t ldb, std::int32_t* c,
                                                                          std::uint32_t correction) {
  const __m512i zero = _mm512_setzero_si512();
  for (std::int64_t x = 0; x < columns; x += 16) _mm512_storeu_si512(c + x, zero);
  const __mmask64 all = ~__mmask64{0};
  for (std::int64_t p = 0; p < k; p += 4) {
    std::uint8_t bytes[4] = {0, 0, 0, 0};
    for (int t = 0; t < 4 && p + t < k; ++t) bytes[t] = static_cast<std::uint8_t>(a[p + t]);
    const auto four = static_cast<std::int32_t>(static_cast<std::uint32_t>(bytes[0]) | (static_cast<std::uint32_t>(bytes[1]) << 8) |
                                                (static_cast<std::uint32_t>(bytes[2]) << 16) |
                                                (static_cast<std::uint32_t>(bytes[3]) << 24));
    const __m512i broadcast = _mm512_set1_epi32(four);
    for (std::int64_t j = 0; j < columns; j += 64) {
      __m512i groups[4];
      interleave(load_row(b, ldb, j, p, k, all), load_row(b, ldb, j, p + 1, k, all), load_row(b, ldb, j, p + 2, k, all),
                 load_row(b, ldb, j, p + 3, k, all), groups);
      std::int32_t* sums = c + j;
      for (int g = 0; g < 4; ++g)
        _mm512_storeu_si512(sums + 16 * g, _mm512_dpbusd_epi32(_mm512_loadu_si512(sums + 16 * g), groups[g], broadcast));
    }
  }
  for (std::int64_t j = 0; j < columns; j += 64) {
    alignas(64) std::int32_t lanes[64];
    for (int g = 0; g < 4; ++g) _mm512_store_si512(lanes + 16 * g, _mm512_loadu_si512(c + j + 16 * g));
    for (std::int64_t column = 0; column < 64; ++column) {
      // column = 16 L + 4 g + d sits in vector g at 4 L + d (as block<> stores them), modulo 2^32 as there
      const std::int64_t lane = column >> 4, g = (column >> 2) & 3, d = column & 3;
      c[j + column] = static_cast<std::int32_t>(static_cast<std::uint32_t>(lanes[g * 16 + lane * 4 + d]) - correction);
    }
  }
}

constexpr std::int64_t streamed_min_columns = 1024;

template <int M>
void rows(std::int64_t n, std::int64_t k, const std::int8_t* a, std::int64_t lda, const std::int8_t* b,
          std::int64_t ldb, std::int32_t* c, std::int64_t ldc) {
  std::uint32_t correction[M];  // once per row, not per block of columns
  for (int i = 0; i < M; ++i) {
    correction[i] = 0;
    for (std::int64_t p = 0; p < k; ++p) correction[i] += static_cast<std::uint32_t>(static_cast<std::int32_t>(a[i * lda + p]));
    correction[i] *= 128u;
  }
  // One row over 1024 columns or more: B streamed in order over the whole 64-column blocks. (1 thread, Zen 4, int8
  // GPT-2 small generating, weights from memory: 1 x 768 x 3072 216 -> 176 us a call; mlp latency, 1 x 1024 x 2048
  // and 1 x 2048 x 2048, 179 -> 109 us; but 768 columns 82 -> 106 us: narrow rows are read well by blocks.)
  std::int64_t j = 0;
  if (M == 1 && n >= streamed_min_columns) {
    j = n / 64 * 64;
    streamed_row(j, k, a, b, ldb, c, correction[0]);
  }
  for (; j < n; j += 64) block<M>(std::min<std::int64_t>(64, n - j), k, a, lda, b, ldb, c, ldc, j, correction);
}

// The sum of a vector's 16 lanes, modulo 2^32. (GCC 12's headers make the 256-bit halves of a 512-bit vector from
// an undefined one, which -Wmaybe-uninitialized reports wherever they are inlined: a false alarm, silenced here.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
__attribute__((target("avx512f"))) inline std::uint32_t lane_sum(__m512i v) {
  const __m256i half = _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
  __m128i quarter = _mm_add_epi32(_mm256_castsi256_si128(half), _mm256_extracti128_si256(half, 1));
  quarter = _mm_add_epi32(quarter, _mm_shuffle_epi32(quarter, 0x4e));
  quarter = _mm_add_epi32(quarter, _mm_shuffle_epi32(quarter, 0xb1));
  return static_cast<std::uint32_t>(_mm_cvtsi128_si32(quarter));
}

// B transposed: rows [0, M) of C for the columns [j_begin, j_end), each column a row of B (k bytes, ldb apart).
template <int M>
__attribute__((target("avx512f,avx512bw,avx512vnni"))) void transposed_rows(std::int64_t n, std::int64_t k,
                                                                             const std::int8_t* a, std::int64_t lda,
                                                                             const std::int8_t* b, std::int64_t ldb,
                                                                             std::int32_t* c, std::int64_t ldc) {
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m512i ones = _mm512_set1_epi8(1);
  for (std::int64_t j = 0; j < n; ++j) {
    const std::int8_t* row = b + j * ldb;
    __m512i sums[M], row_sum = _mm512_setzero_si512();
    for (int i = 0; i < M; ++i) sums[i] = _mm512_setzero_si512();
    for (std::int64_t p = 0; p < k; p += 64) {
      // (past k both sides load zeros; A's flipped zeros are 128, times B's zeros: nothing)
      const __mmask64 valid = k - p >= 64 ? ~__mmask64{0} : ((__mmask64{1} << (k - p)) - 1);
      const __m512i weights = _mm512_maskz_loadu_epi8(valid, row + p);
      row_sum = _mm512_dpbusd_epi32(row_sum, ones, weights);
      for (int i = 0; i < M; ++i) {
        const __m512i values = _mm512_xor_si512(_mm512_maskz_loadu_epi8(valid, a + i * lda + p), flip);
        sums[i] = _mm512_dpbusd_epi32(sums[i], values, weights);
      }
    }
    // Σ (a + 128)·b - 128·Σ b, modulo 2^32 as above
    const std::uint32_t correction = lane_sum(row_sum) * 128u;
    for (int i = 0; i < M; ++i) c[i * ldc + j] = static_cast<std::int32_t>(lane_sum(sums[i]) - correction);
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

}  // namespace

bool int8_rows_available() {
  static const bool cpu = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512vnni");
  // (A test's ScopedIsa below x86-64-v4 stands for a CPU without AVX-512: then the other backends run.)
  const Isa isa = active_isa();
  return cpu && (isa == Isa::own || isa == Isa::x86_64_v4);
}

void int8_rows(std::int64_t m, std::int64_t n, std::int64_t k, const std::int8_t* a, std::int64_t lda,
               const std::int8_t* b, std::int64_t ldb, std::int32_t* c, std::int64_t ldc, bool b_transposed) {
  for (std::int64_t i = 0; i < m; i += 4) {
    const std::int8_t* block_a = a + i * lda;
    std::int32_t* block_c = c + i * ldc;
    if (b_transposed) {
      switch (std::min<std::int64_t>(4, m - i)) {
        case 1: transposed_rows<1>(n, k, block_a, lda, b, ldb, block_c, ldc); break;
        case 2: transposed_rows<2>(n, k, block_a, lda, b, ldb, block_c, ldc); break;
        case 3: transposed_rows<3>(n, k, block_a, lda, b, ldb, block_c, ldc); break;
        default: transposed_rows<4>(n, k, block_a, lda, b, ldb, block_c, ldc); break;
      }
      continue;
    }
    switch (std::min<std::int64_t>(4, m - i)) {
      case 1: rows<1>(n, k, block_a, lda, b, ldb, block_c, ldc); break;
      case 2: rows<2>(n, k, block_a, lda, b, ldb, block_c, ldc); break;
      case 3: rows<3>(n, k, block_a, lda, b, ldb, block_c, ldc); break;
      default: rows<4>(n, k, block_a, lda, b, ldb, block_c, ldc); break;
    }
  }
}

#else

bool int8_rows_available() { return false; }
void int8_rows(std::int64_t, std::int64_t, std::int64_t, const std::int8_t*, std::int64_t, const std::int8_t*,
               std::int64_t, std::int32_t*, std::int64_t, bool) {}

#endif

}  // namespace kiln::detail
