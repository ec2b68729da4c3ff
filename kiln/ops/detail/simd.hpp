#pragma once
// xsimd for ops' kernels (internal to ops/: not installed). Its AVX-512 intrinsics trip g++ 12's
// (maybe-)uninitialized warnings once inlined; they point into the compiler's own headers, so they are silenced
// for this include only.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <xsimd/xsimd.hpp>
#pragma GCC diagnostic pop
