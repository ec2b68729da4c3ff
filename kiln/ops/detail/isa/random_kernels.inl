// The random kernels of one build (see random_kernels.hpp and isa.hpp), in namespace KILN_ISA_NAMESPACE: included
// by all_kernels.inl, once for each build.
#include <algorithm>
#include <array>
#include <cstdint>

#include <kiln/core/rng.hpp>
#include <kiln/ops/detail/random_kernels.hpp>
#include <kiln/ops/detail/simd.hpp>

namespace kiln::detail::KILN_ISA_NAMESPACE {

namespace {

// Draw `index` of a stream: a uniform in [0, 1) with 53 random bits. mix64 adds the golden-ratio increment
// first: this is splitmix64's index-th draw from state `stream`.
inline double uniform_draw(std::uint64_t stream, std::uint64_t index) {
  return static_cast<double>(mix64(stream + index * 0x9e3779b97f4a7c15ULL) >> 11) * 0x1.0p-53;
}

template <class T>
void dropout_fill(const T* x, T* out, std::int64_t begin, std::int64_t end, std::uint64_t stream, std::uint64_t first,
                  double rate, T scale) {
  if (x == nullptr) {
    for (std::int64_t i = begin; i < end; ++i)
      out[i] = uniform_draw(stream, first + static_cast<std::uint64_t>(i)) >= rate ? scale : T(0);
  } else {
    for (std::int64_t i = begin; i < end; ++i)
      out[i] = uniform_draw(stream, first + static_cast<std::uint64_t>(i)) >= rate ? x[i] * scale : T(0);
  }
}

void normal_pairs(std::uint64_t stream, std::uint64_t first_pair, std::int64_t count, double* cosine, double* sine) {
  constexpr double two_pi = 6.283185307179586476925286766559;
  using Batch = xsimd::batch<double>;
  constexpr auto lanes = static_cast<std::int64_t>(Batch::size);
  alignas(64) std::array<double, kNormalBlock + lanes> radius{}, angle{};
  for (std::int64_t j = 0; j < count; ++j) {
    const std::uint64_t pair = first_pair + static_cast<std::uint64_t>(j);
    radius[static_cast<std::size_t>(j)] = 1.0 - uniform_draw(stream, 2 * pair);
    angle[static_cast<std::size_t>(j)] = two_pi * uniform_draw(stream, 2 * pair + 1);
  }
  for (std::int64_t j = count; j % lanes != 0; ++j) {  // the last vector's padding: any finite values
    radius[static_cast<std::size_t>(j)] = 1.0;
    angle[static_cast<std::size_t>(j)] = 0.0;
  }
  for (std::int64_t j = 0; j < count; j += lanes) {
    const Batch r = xsimd::sqrt(Batch(-2.0) * xsimd::log(Batch::load_aligned(radius.data() + j)));
    const Batch a = Batch::load_aligned(angle.data() + j);
    alignas(64) double c[lanes], s[lanes];
    const auto [sin_a, cos_a] = xsimd::sincos(a);  // one range reduction for both
    (r * cos_a).store_aligned(c);
    (r * sin_a).store_aligned(s);
    const std::int64_t kept = std::min(lanes, count - j);
    std::copy(c, c + kept, cosine + j);
    std::copy(s, s + kept, sine + j);
  }
}

}  // namespace

const RandomKernels random_table{{dropout_fill<float>}, {dropout_fill<double>}, normal_pairs};

}  // namespace kiln::detail::KILN_ISA_NAMESPACE
