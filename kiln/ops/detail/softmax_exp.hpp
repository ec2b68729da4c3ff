#pragma once
// e^x for a softmax's exps (internal to ops/: not installed).
#include <cstdint>
#include <type_traits>

#include <kiln/ops/detail/simd.hpp>

namespace kiln::detail {

// e^x, as xsimd::exp within about an ulp, for the softmax's exps (x ≤ 0: scores less their max; −∞ gives 0, NaN stays
// NaN). On AVX-512 in float, Cephes's polynomial on x − k·ln 2 and vscalefps for the 2^k: 180 µs for mql5_block's
// forward's 61,440 vectors of scores against xsimd::exp's 247 (its range checks and exponent arithmetic cost the
// rest), a third of the softmax's time. Elsewhere xsimd::exp.
template <class T>
inline xsimd::batch<T> softmax_exp(const xsimd::batch<T>& x) {
#if XSIMD_WITH_AVX512F
  if constexpr (std::is_same_v<T, float> && sizeof(xsimd::batch<T>) == 64) {
    // Below −104, e^x rounds to 0 in float; max(−104, x) is x when x is NaN (the second operand wins).
    const __m512 clamped = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);
    const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(clamped, _mm512_set1_ps(1.44269504088896341f)),
                                          _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), clamped);  // x − k·ln 2, ln 2 in two parts
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_scalef_ps(p, k);
  }
#endif
  return xsimd::exp(x);
}

// out[i] ← softmax_exp(in[i]) for n values, a vector at a time (the last one padded): softmax_exp as the library
// was compiled (its ISA), for tests.
void softmax_exps(const float* in, float* out, std::int64_t n);
void softmax_exps(const double* in, double* out, std::int64_t n);
}  // namespace kiln::detail
