// The dispatched kernels of the library's own build (its KILN_ARCH): see isa.hpp.
#define KILN_ISA_NAMESPACE isa_own
#include <kiln/ops/detail/isa/all_kernels.inl>
