#include <kiln/ops/detail/softmax_exp.hpp>

#include <algorithm>

namespace kiln::detail {
namespace {
template <class T>
void exps(const T* in, T* out, std::int64_t n) {
  using Batch = xsimd::batch<T>;
  constexpr auto lanes = static_cast<std::int64_t>(Batch::size);
  for (std::int64_t i = 0; i < n; i += lanes) {
    alignas(64) T values[lanes] = {};
    std::copy(in + i, in + std::min(n, i + lanes), values);
    softmax_exp(Batch::load_aligned(values)).store_aligned(values);
    std::copy(values, values + std::min(lanes, n - i), out + i);
  }
}
}  // namespace

void softmax_exps(const float* in, float* out, std::int64_t n) { exps(in, out, n); }
void softmax_exps(const double* in, double* out, std::int64_t n) { exps(in, out, n); }
}  // namespace kiln::detail
