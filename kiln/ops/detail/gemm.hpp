#pragma once
// Row-major GEMM straight to OpenBLAS: C = op(A)·op(B), or C += op(A)·op(B), with no copies. A large
// product is split over kiln's threads (OpenBLAS runs one thread in each); inside a parallel_for it runs
// on the calling thread.
// In its own file because OpenBLAS's <cblas.h> clashes with xtensor-blas's declarations.
#include <cstdint>

namespace kiln::detail {

struct GemmShape {
  std::int64_t m, n, k;
  bool transpose_a, transpose_b;
  std::int64_t lda, ldb, ldc;
  bool accumulate = false;  // C += op(A)·op(B) (BLAS's beta = 1) instead of C = op(A)·op(B)
};

// Multiply-adds per thread below which gemm runs a product on one thread.
constexpr std::int64_t gemm_split_work = std::int64_t{1} << 19;

void gemm(const GemmShape& shape, const float* a, const float* b, float* c);
void gemm(const GemmShape& shape, const double* a, const double* b, double* c);

}  // namespace kiln::detail
