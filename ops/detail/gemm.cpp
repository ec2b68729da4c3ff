#include "ops/detail/gemm.hpp"

#include <cblas.h>

namespace kiln::detail {

namespace {
CBLAS_TRANSPOSE transpose_flag(bool transpose) { return transpose ? CblasTrans : CblasNoTrans; }
int to_int(std::int64_t value) { return static_cast<int>(value); }

// Empty operands: BLAS rejects leading dimensions of 0, and C = A·B with an inner size of 0 is zeros.
template <class T>
bool degenerate(const GemmShape& s, T* c) {
  if (s.m > 0 && s.n > 0 && s.k > 0) return false;
  for (std::int64_t row = 0; row < s.m; ++row)
    for (std::int64_t col = 0; col < s.n; ++col) c[row * s.ldc + col] = T(0);
  return true;
}
}  // namespace

void gemm(const GemmShape& s, const float* a, const float* b, float* c) {
  if (degenerate(s, c)) return;
  cblas_sgemm(CblasRowMajor, transpose_flag(s.transpose_a), transpose_flag(s.transpose_b), to_int(s.m), to_int(s.n),
              to_int(s.k), 1.0f, a, to_int(s.lda), b, to_int(s.ldb), 0.0f, c, to_int(s.ldc));
}

void gemm(const GemmShape& s, const double* a, const double* b, double* c) {
  if (degenerate(s, c)) return;
  cblas_dgemm(CblasRowMajor, transpose_flag(s.transpose_a), transpose_flag(s.transpose_b), to_int(s.m), to_int(s.n),
              to_int(s.k), 1.0, a, to_int(s.lda), b, to_int(s.ldb), 0.0, c, to_int(s.ldc));
}

}  // namespace kiln::detail
