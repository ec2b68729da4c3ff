// The library's own build of the random kernels, and the choice among the builds.
#define KILN_ISA_NAMESPACE isa_own
#include <kiln/ops/detail/isa/random_kernels.inl>
#undef KILN_ISA_NAMESPACE

#include <kiln/core/error.hpp>

namespace kiln::detail {

#if defined(KILN_ISA_X86_64_V2)
namespace isa_x86_64_v2 {
extern const RandomKernels random_table;
}
#endif
#if defined(KILN_ISA_X86_64_V3)
namespace isa_x86_64_v3 {
extern const RandomKernels random_table;
}
#endif
#if defined(KILN_ISA_X86_64_V4)
namespace isa_x86_64_v4 {
extern const RandomKernels random_table;
}
#endif

const RandomKernels& random_kernels(Isa isa) {
  switch (isa) {
    case Isa::own: return isa_own::random_table;
#if defined(KILN_ISA_X86_64_V2)
    case Isa::x86_64_v2: return isa_x86_64_v2::random_table;
#endif
#if defined(KILN_ISA_X86_64_V3)
    case Isa::x86_64_v3: return isa_x86_64_v3::random_table;
#endif
#if defined(KILN_ISA_X86_64_V4)
    case Isa::x86_64_v4: return isa_x86_64_v4::random_table;
#endif
    default: break;
  }
  throw ValueError(std::string("random kernels: not built for ") + isa_name(isa));
}

}  // namespace kiln::detail
