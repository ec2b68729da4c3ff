// The library's own build of the attention row kernels, and the choice among the builds.
#define KILN_ISA_NAMESPACE isa_own
#include <kiln/ops/detail/isa/attention_rows.inl>
#undef KILN_ISA_NAMESPACE

#include <string>

#include <kiln/core/error.hpp>

namespace kiln::detail {

#define KILN_DECLARE_TABLES(level)                        \
  namespace level {                                       \
  extern const AttentionRows<float> attention_rows_float;   \
  extern const AttentionRows<double> attention_rows_double; \
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
const AttentionRows<T>& pick(const AttentionRows<float>& f, const AttentionRows<double>& d) {
  if constexpr (std::is_same_v<T, float>)
    return f;
  else
    return d;
}
}  // namespace

template <class T>
const AttentionRows<T>& attention_rows(Isa isa) {
  switch (isa) {
    case Isa::own: return pick<T>(isa_own::attention_rows_float, isa_own::attention_rows_double);
#if defined(KILN_ISA_X86_64_V2)
    case Isa::x86_64_v2: return pick<T>(isa_x86_64_v2::attention_rows_float, isa_x86_64_v2::attention_rows_double);
#endif
#if defined(KILN_ISA_X86_64_V3)
    case Isa::x86_64_v3: return pick<T>(isa_x86_64_v3::attention_rows_float, isa_x86_64_v3::attention_rows_double);
#endif
#if defined(KILN_ISA_X86_64_V4)
    case Isa::x86_64_v4: return pick<T>(isa_x86_64_v4::attention_rows_float, isa_x86_64_v4::attention_rows_double);
#endif
    default: break;
  }
  throw ValueError(std::string("attention row kernels: not built for ") + isa_name(isa));
}

template const AttentionRows<float>& attention_rows<float>(Isa);
template const AttentionRows<double>& attention_rows<double>(Isa);

}  // namespace kiln::detail
