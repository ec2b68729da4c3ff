// The dispatched kernels built for one x86-64 level: CMake compiles this file once per level, with
// -march=x86-64-vN and KILN_ISA_NAMESPACE=isa_x86_64_vN (see kiln/ops/detail/isa.hpp).
#ifndef KILN_ISA_NAMESPACE
#error "level_kernels.cpp is compiled by CMake once per x86-64 level, with KILN_ISA_NAMESPACE defined"
#endif
#include <kiln/ops/detail/isa/all_kernels.inl>
