// The dispatched transposed copy of one build (see transpose_kernels.hpp and isa.hpp), in namespace
// KILN_ISA_NAMESPACE: included by all_kernels.inl, once for each build.
#include <algorithm>
#include <cstdint>

#include <kiln/ops/detail/row_sums.hpp>
#include <kiln/ops/detail/simd.hpp>
#include <kiln/ops/detail/transpose_kernels.hpp>

namespace kiln::detail::KILN_ISA_NAMESPACE {

namespace {

#if XSIMD_WITH_AVX512F
// (g++ 12's (maybe-)uninitialized warnings point into its own AVX-512 headers once their intrinsics are inlined.)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// The 16 × 16 block at `in` (`rows` rows of `columns`, ld apart; the rest read as 0) transposed into `out` (`columns`
// rows of `rows`, out_ld apart): in registers, by the usual network of unpacks and shuffles. Masked loads and stores
// read and write nothing outside the block.
void transpose_block(const float* in, std::int64_t rows, std::int64_t columns, std::int64_t ld, float* out,
                     std::int64_t out_ld) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i)
    r[i] = i < rows ? _mm512_maskz_loadu_ps(first_lanes(columns), in + i * ld) : _mm512_setzero_ps();
  for (int i = 0; i < 8; ++i) {  // pairs of rows interleaved
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  for (int i = 0; i < 4; ++i) {  // quads, within 128-bit lanes
    r[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], _MM_SHUFFLE(3, 2, 3, 2));
    r[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(1, 0, 1, 0));
    r[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int i = 0; i < 4; ++i) {  // then across 128-bit lanes, twice
    t[i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0x88);
    t[4 + i] = _mm512_shuffle_f32x4(r[i], r[4 + i], 0xdd);
    t[8 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0x88);
    t[12 + i] = _mm512_shuffle_f32x4(r[8 + i], r[12 + i], 0xdd);
  }
  for (int i = 0; i < 8; ++i) {
    r[i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0x88);
    r[8 + i] = _mm512_shuffle_f32x4(t[i], t[8 + i], 0xdd);
  }
  for (int i = 0; i < columns && i < 16; ++i) _mm512_mask_storeu_ps(out + i * out_ld, first_lanes(rows), r[i]);
}
#pragma GCC diagnostic pop

// mql5_block's 512 heads of 40 × 16 keys (rows 512 bytes apart) took 31 µs, against 43-66 µs with libxsmm's
// transposition kernels (themselves 2× a tiled loop).
void transpose(const float* b, std::int64_t n, std::int64_t k, std::int64_t ldb, float* out) {
  for (std::int64_t row = 0; row < n; row += 16)
    for (std::int64_t column = 0; column < k; column += 16)
      transpose_block(b + row * ldb + column, std::min<std::int64_t>(16, n - row), std::min<std::int64_t>(16, k - column),
                      ldb, out + column * n + row, n);
}
constexpr auto transpose_kernel = transpose;
#else
constexpr decltype(TransposeKernels::transpose) transpose_kernel = nullptr;
#endif

}  // namespace

const TransposeKernels transpose_table{transpose_kernel};

}  // namespace kiln::detail::KILN_ISA_NAMESPACE
