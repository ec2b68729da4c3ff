// The dispatched elementwise kernels of one build (see unary_kernels.hpp and isa.hpp), in namespace
// KILN_ISA_NAMESPACE: included by all_kernels.inl, once for each build.
#include <algorithm>
#include <cstdint>

#include <kiln/ops/detail/simd.hpp>
#include <kiln/ops/detail/unary_kernels.hpp>

namespace kiln::detail::KILN_ISA_NAMESPACE {

namespace {

constexpr double gelu_sqrt_2_over_pi = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double gelu_inv_sqrt_2 = 0.70710678118654752440;
constexpr double gelu_inv_sqrt_2pi = 0.39894228040143267794;  // 1 / sqrt(2 pi)
constexpr double gelu_cubic = 0.044715;

// erf(v), float: Eigen's and TensorFlow's rational approximation (odd degree-13 numerator over even degree-8
// denominator in v, v clamped to [-4, 4], where float's erf is ±1): within 4e-7 of erf everywhere (3 ulp at 1),
// branch-free, twice xsimd::erf's rate. double keeps xsimd::erf (the gradient checks run in double).
inline xsimd::batch<float> erf_of(xsimd::batch<float> v) {
  using Batch = xsimd::batch<float>;
  v = xsimd::max(xsimd::min(v, Batch(4.0f)), Batch(-4.0f));
  const Batch v2 = v * v;
  Batch p = xsimd::fma(v2, Batch(-2.72614225801306e-10f), Batch(2.77068142495902e-08f));
  p = xsimd::fma(v2, p, Batch(-2.10102402082508e-06f));
  p = xsimd::fma(v2, p, Batch(-5.69250639462346e-05f));
  p = xsimd::fma(v2, p, Batch(-7.34990630326855e-04f));
  p = xsimd::fma(v2, p, Batch(-2.95459980854025e-03f));
  p = xsimd::fma(v2, p, Batch(-1.60960333262415e-02f));
  Batch q = xsimd::fma(v2, Batch(-1.45660718464996e-05f), Batch(-2.13374055278905e-04f));
  q = xsimd::fma(v2, q, Batch(-1.68282697438203e-03f));
  q = xsimd::fma(v2, q, Batch(-7.37332916720468e-03f));
  q = xsimd::fma(v2, q, Batch(-1.42647390514189e-02f));
  return v * p / q;
}
inline xsimd::batch<double> erf_of(const xsimd::batch<double>& v) { return xsimd::erf(v); }

// f(batch of x[, batch of dy]) over n elements a vector at a time; the last partial vector padded with zeros, so
// every element is computed as a vector lane whatever the split into chunks.
template <class T, class F>
void each_vector(const T* x, const T* dy, T* out, std::int64_t n, const F& f) {
  using Batch = xsimd::batch<T>;
  constexpr auto lanes = static_cast<std::int64_t>(Batch::size);
  std::int64_t i = 0;
  for (; i + lanes <= n; i += lanes)
    f(Batch::load_unaligned(x + i), dy ? Batch::load_unaligned(dy + i) : Batch(T(0))).store_unaligned(out + i);
  if (i < n) {
    alignas(64) T xs[lanes] = {}, dys[lanes] = {}, results[lanes];
    std::copy(x + i, x + n, xs);
    if (dy) std::copy(dy + i, dy + n, dys);
    f(Batch::load_aligned(xs), Batch::load_aligned(dys)).store_aligned(results);
    std::copy(results, results + (n - i), out + i);
  }
}

template <class T>
void gelu(const T* x, T* y, std::int64_t n, bool approximate) {
  using Batch = xsimd::batch<T>;
  if (approximate) {
    // Keras's 0.5·x·(1 + tanh(u)), u = √(2/π)·(x + 0.044715·x³), as x·sigmoid(2u): (1 + tanh u) / 2 = sigmoid(2u).
    each_vector<T>(x, nullptr, y, n, [](const Batch& v, const Batch&) {
      return v / (Batch(T(1)) + xsimd::exp(Batch(T(-2 * gelu_sqrt_2_over_pi)) * (v + Batch(T(gelu_cubic)) * v * v * v)));
    });
  } else {
    each_vector<T>(x, nullptr, y, n, [](const Batch& v, const Batch&) {
      return Batch(T(0.5)) * v * (Batch(T(1)) + erf_of(v * Batch(T(gelu_inv_sqrt_2))));
    });
  }
}

template <class T>
void gelu_grad(const T* x, const T* dy, T* dx, std::int64_t n, bool approximate) {
  using Batch = xsimd::batch<T>;
  if (approximate) {
    // With p = sigmoid(2u) = (1 + tanh u) / 2: 1 - tanh²u = 4p(1 - p), so d/dx 0.5·x·(1 + tanh u) = p + 2·x·p·(1 - p)·u'.
    each_vector<T>(x, dy, dx, n, [](const Batch& v, const Batch& g) {
      const Batch s = Batch(T(gelu_sqrt_2_over_pi)), one = Batch(T(1));
      const Batch p = one / (one + xsimd::exp(Batch(T(-2)) * s * (v + Batch(T(gelu_cubic)) * v * v * v)));
      return g * (p + Batch(T(2)) * v * p * (one - p) * s * (one + Batch(T(3 * gelu_cubic)) * v * v));
    });
  } else {
    each_vector<T>(x, dy, dx, n, [](const Batch& v, const Batch& g) {
      return g * (Batch(T(0.5)) * (Batch(T(1)) + erf_of(v * Batch(T(gelu_inv_sqrt_2)))) +
                  v * xsimd::exp(Batch(T(-0.5)) * v * v) * Batch(T(gelu_inv_sqrt_2pi)));
    });
  }
}

}  // namespace

const UnaryKernels<float> unary_kernels_float{gelu<float>, gelu_grad<float>};
const UnaryKernels<double> unary_kernels_double{gelu<double>, gelu_grad<double>};

}  // namespace kiln::detail::KILN_ISA_NAMESPACE
