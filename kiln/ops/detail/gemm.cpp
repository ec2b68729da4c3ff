#include <kiln/ops/detail/gemm.hpp>

#include <algorithm>

#include <cblas.h>

#include <kiln/core/parallel.hpp>

namespace kiln::detail {

namespace {
CBLAS_TRANSPOSE transpose_flag(bool transpose) { return transpose ? CblasTrans : CblasNoTrans; }
int to_int(std::int64_t value) { return static_cast<int>(value); }

// C = A·B runs as C = 0; C += A·B. OpenBLAS 0.3.21 zeroes C for beta = 0 with a scalar loop
// (sgemm_beta_ZEN), which took 12 % of a train step of small attention heads; a memset is several times
// faster, and beta = 1 skips that loop.
template <class T>
void zero_output(const GemmShape& s, T* c) {
  if (s.accumulate) return;
  if (s.ldc == s.n)
    std::fill(c, c + s.m * s.n, T(0));
  else
    for (std::int64_t row = 0; row < s.m; ++row) std::fill(c + row * s.ldc, c + row * s.ldc + s.n, T(0));
}

// Empty operands: BLAS rejects leading dimensions of 0, and C = A·B with an inner size of 0 is zeros.
template <class T>
bool degenerate(const GemmShape& s, T* c) {
  if (s.m > 0 && s.n > 0 && s.k > 0) return false;
  zero_output(s, c);
  return true;
}

void call_blas(const GemmShape& s, const float* a, const float* b, float* c) {
  cblas_sgemm(CblasRowMajor, transpose_flag(s.transpose_a), transpose_flag(s.transpose_b), to_int(s.m), to_int(s.n),
              to_int(s.k), 1.0f, a, to_int(s.lda), b, to_int(s.ldb), 1.0f, c, to_int(s.ldc));
}

void call_blas(const GemmShape& s, const double* a, const double* b, double* c) {
  cblas_dgemm(CblasRowMajor, transpose_flag(s.transpose_a), transpose_flag(s.transpose_b), to_int(s.m), to_int(s.n),
              to_int(s.k), 1.0, a, to_int(s.lda), b, to_int(s.ldb), 1.0, c, to_int(s.ldc));
}

// kiln's pool runs the threads, and OpenBLAS one thread in each (see core/threads.cpp): a product worth
// splitting is cut into row ranges of C (or column ranges when C is wide and short), one per worker.
// Each worker gets at least gemm_split_work multiply-adds (about 10 µs), and 8 rows or columns.
constexpr std::int64_t min_slice = 8;

template <class T>
void split_gemm(const GemmShape& s, const T* a, const T* b, T* c) {
  const std::int64_t work = s.m * s.n * s.k;
  const bool by_rows = s.m >= s.n;
  const std::int64_t extent = by_rows ? s.m : s.n;
  const auto max_workers =
      static_cast<int>(std::min<std::int64_t>({work / gemm_split_work, extent / min_slice, 1 << 16}));
  parallel_for(extent, std::max(1, max_workers), [&](std::int64_t begin, std::int64_t end, int) {
    GemmShape slice = s;
    const T* slice_a = a;
    const T* slice_b = b;
    T* slice_c = c;
    if (by_rows) {
      slice.m = end - begin;
      slice_a += s.transpose_a ? begin : begin * s.lda;
      slice_c += begin * s.ldc;
    } else {
      slice.n = end - begin;
      slice_b += s.transpose_b ? begin * s.ldb : begin;
      slice_c += begin;
    }
    zero_output(slice, slice_c);
    call_blas(slice, slice_a, slice_b, slice_c);
  });
}
}  // namespace

void gemm(const GemmShape& s, const float* a, const float* b, float* c) {
  if (!degenerate(s, c)) split_gemm(s, a, b, c);
}

void gemm(const GemmShape& s, const double* a, const double* b, double* c) {
  if (!degenerate(s, c)) split_gemm(s, a, b, c);
}

}  // namespace kiln::detail
