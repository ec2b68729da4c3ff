#include "ops/detail/gemm.hpp"

#include <cblas.h>

namespace kiln::detail {

namespace {
CBLAS_TRANSPOSE transpose_flag(bool transpose) { return transpose ? CblasTrans : CblasNoTrans; }
int to_int(std::int64_t value) { return static_cast<int>(value); }
}  // namespace

void gemm(const GemmShape& s, const float* a, const float* b, float* c) {
  cblas_sgemm(CblasRowMajor, transpose_flag(s.transpose_a), transpose_flag(s.transpose_b), to_int(s.m), to_int(s.n),
              to_int(s.k), 1.0f, a, to_int(s.lda), b, to_int(s.ldb), 0.0f, c, to_int(s.ldc));
}

void gemm(const GemmShape& s, const double* a, const double* b, double* c) {
  cblas_dgemm(CblasRowMajor, transpose_flag(s.transpose_a), transpose_flag(s.transpose_b), to_int(s.m), to_int(s.n),
              to_int(s.k), 1.0, a, to_int(s.lda), b, to_int(s.ldb), 0.0, c, to_int(s.ldc));
}

}  // namespace kiln::detail
