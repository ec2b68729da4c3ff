// The library's own build of the dispatched elementwise kernels, and the choice among the builds.
#define KILN_ISA_NAMESPACE isa_own
#include <kiln/ops/detail/isa/unary_kernels.inl>
#undef KILN_ISA_NAMESPACE

#include <string>

#include <kiln/core/error.hpp>

namespace kiln::detail {

#define KILN_DECLARE_TABLES(level)                        \
  namespace level {                                       \
  extern const UnaryKernels<float> unary_kernels_float;   \
  extern const UnaryKernels<double> unary_kernels_double; \
  }
#if defined(KILN_ISA_X86_64_V2)
KILN_DECLARE_TABLES(isa_x86_64_v2)
#endif
#if defined(KILN_ISA_X86_64_V3)
KILN_DECLARE_TABLES(isa_x86_64_v3)
#endif
#if defined(KILN_ISA_X86_64_V4)
KILN_DECLARE_TABLES(isa_x86_64_v4)
#endif
#undef KILN_DECLARE_TABLES

namespace {
template <class T>
const UnaryKernels<T>& pick(const UnaryKernels<float>& f, const UnaryKernels<double>& d) {
  if constexpr (std::is_same_v<T, float>)
    return f;
  else
    return d;
}
}  // namespace

template <class T>
const UnaryKernels<T>& unary_kernels(Isa isa) {
  switch (isa) {
    case Isa::own: return pick<T>(isa_own::unary_kernels_float, isa_own::unary_kernels_double);
#if defined(KILN_ISA_X86_64_V2)
    case Isa::x86_64_v2: return pick<T>(isa_x86_64_v2::unary_kernels_float, isa_x86_64_v2::unary_kernels_double);
#endif
#if defined(KILN_ISA_X86_64_V3)
    case Isa::x86_64_v3: return pick<T>(isa_x86_64_v3::unary_kernels_float, isa_x86_64_v3::unary_kernels_double);
#endif
#if defined(KILN_ISA_X86_64_V4)
    case Isa::x86_64_v4: return pick<T>(isa_x86_64_v4::unary_kernels_float, isa_x86_64_v4::unary_kernels_double);
#endif
    default: break;
  }
  throw ValueError(std::string("elementwise kernels: not built for ") + isa_name(isa));
}

template const UnaryKernels<float>& unary_kernels<float>(Isa);
template const UnaryKernels<double>& unary_kernels<double>(Isa);

}  // namespace kiln::detail
