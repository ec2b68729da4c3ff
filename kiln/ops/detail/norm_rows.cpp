// The library's own build of the norms' row kernels, and the choice among the builds.
#define KILN_ISA_NAMESPACE isa_own
#include <kiln/ops/detail/isa/norm_rows.inl>
#undef KILN_ISA_NAMESPACE

#include <string>

#include <kiln/core/error.hpp>

namespace kiln::detail {

#define KILN_DECLARE_TABLES(level)                        \
  namespace level {                                       \
  extern const NormRows<float> norm_rows_float;   \
  extern const NormRows<double> norm_rows_double; \
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
const NormRows<T>& pick(const NormRows<float>& f, const NormRows<double>& d) {
  if constexpr (std::is_same_v<T, float>)
    return f;
  else
    return d;
}
}  // namespace

template <class T>
const NormRows<T>& norm_rows(Isa isa) {
  switch (isa) {
    case Isa::own: return pick<T>(isa_own::norm_rows_float, isa_own::norm_rows_double);
#if defined(KILN_ISA_X86_64_V2)
    case Isa::x86_64_v2: return pick<T>(isa_x86_64_v2::norm_rows_float, isa_x86_64_v2::norm_rows_double);
#endif
#if defined(KILN_ISA_X86_64_V3)
    case Isa::x86_64_v3: return pick<T>(isa_x86_64_v3::norm_rows_float, isa_x86_64_v3::norm_rows_double);
#endif
#if defined(KILN_ISA_X86_64_V4)
    case Isa::x86_64_v4: return pick<T>(isa_x86_64_v4::norm_rows_float, isa_x86_64_v4::norm_rows_double);
#endif
    default: break;
  }
  throw ValueError(std::string("norm row kernels: not built for ") + isa_name(isa));
}

template const NormRows<float>& norm_rows<float>(Isa);
template const NormRows<double>& norm_rows<double>(Isa);

}  // namespace kiln::detail
