// The library's own build of GroupNorm's block kernels, and the choice among the builds.
#define KILN_ISA_NAMESPACE isa_own
#include <kiln/ops/detail/isa/group_norm_blocks.inl>
#undef KILN_ISA_NAMESPACE

#include <string>

#include <kiln/core/error.hpp>

namespace kiln::detail {

#define KILN_DECLARE_TABLES(level)                        \
  namespace level {                                       \
  extern const GroupNormBlocks<float> group_norm_blocks_float;   \
  extern const GroupNormBlocks<double> group_norm_blocks_double; \
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
const GroupNormBlocks<T>& pick(const GroupNormBlocks<float>& f, const GroupNormBlocks<double>& d) {
  if constexpr (std::is_same_v<T, float>)
    return f;
  else
    return d;
}
}  // namespace

template <class T>
const GroupNormBlocks<T>& group_norm_blocks(Isa isa) {
  switch (isa) {
    case Isa::own: return pick<T>(isa_own::group_norm_blocks_float, isa_own::group_norm_blocks_double);
#if defined(KILN_ISA_X86_64_V2)
    case Isa::x86_64_v2: return pick<T>(isa_x86_64_v2::group_norm_blocks_float, isa_x86_64_v2::group_norm_blocks_double);
#endif
#if defined(KILN_ISA_X86_64_V3)
    case Isa::x86_64_v3: return pick<T>(isa_x86_64_v3::group_norm_blocks_float, isa_x86_64_v3::group_norm_blocks_double);
#endif
#if defined(KILN_ISA_X86_64_V4)
    case Isa::x86_64_v4: return pick<T>(isa_x86_64_v4::group_norm_blocks_float, isa_x86_64_v4::group_norm_blocks_double);
#endif
    default: break;
  }
  throw ValueError(std::string("GroupNorm block kernels: not built for ") + isa_name(isa));
}

template const GroupNormBlocks<float>& group_norm_blocks<float>(Isa);
template const GroupNormBlocks<double>& group_norm_blocks<double>(Isa);

}  // namespace kiln::detail
