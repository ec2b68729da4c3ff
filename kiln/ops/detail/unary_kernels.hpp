#pragma once
// Elementwise kernels whose transcendentals are most of their time, dispatched by instruction set (internal to
// ops/: not installed; see isa.hpp): GELU and its gradient (char_gpt's feed-forward: a portable x86-64-v3 build ran
// them at 0.6× native speed on 8-lane vectors).
#include <cstdint>

#include <kiln/ops/detail/isa.hpp>

namespace kiln::detail {

template <class T>
struct UnaryKernels {
  // y = GELU(x) for n elements: Keras's tanh approximation (as x·sigmoid(2u)) or the exact erf form.
  void (*gelu)(const T* x, T* y, std::int64_t n, bool approximate);
  // dx = dy·GELU'(x).
  void (*gelu_grad)(const T* x, const T* dy, T* dx, std::int64_t n, bool approximate);
};

template <class T>
const UnaryKernels<T>& unary_kernels(Isa isa) {
  const IsaTables& tables = isa_tables(isa);
  return by_dtype<T>(tables.unary_float, tables.unary_double);
}
template <class T>
const UnaryKernels<T>& unary_kernels() {
  return unary_kernels<T>(active_isa());
}

}  // namespace kiln::detail
