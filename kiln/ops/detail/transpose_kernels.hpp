#pragma once
// The copy of a transposed B that libxsmm multiplies by (ops/detail/gemm.cpp), dispatched by instruction set
// (internal to ops/: not installed; see isa.hpp): with AVX-512 it is 16 × 16 blocks transposed in registers, twice
// as fast as libxsmm's own transposition, and a portable x86-64-v3 build would otherwise run libxsmm's.
#include <cstdint>

#include <kiln/ops/detail/isa.hpp>

namespace kiln::detail {

struct TransposeKernels {
  // out (k rows of n, row-major) ← the transpose of b (n rows of k, ldb apart). Null in a build without a kernel
  // of its own for it: gemm.cpp then uses libxsmm's.
  void (*transpose)(const float* b, std::int64_t n, std::int64_t k, std::int64_t ldb, float* out);
};

inline const TransposeKernels& transpose_kernels(Isa isa) { return *isa_tables(isa).transpose; }
inline const TransposeKernels& transpose_kernels() { return transpose_kernels(active_isa()); }

}  // namespace kiln::detail
