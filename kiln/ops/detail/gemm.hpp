#pragma once
// Row-major GEMM, the one place kiln's ops multiply matrices: C = op(A)·op(B), or C += op(A)·op(B), with no
// copies. Which library runs a product is a pure function of its shape and dtype (gemm_backend), so a plan's
// shapes fix it and a run is deterministic for a given thread count:
// - float32 on libxsmm's JIT kernels when C is at most 128 columns wide (made once per shape and kept for the
//   process; prepare_gemm makes them at planning, else a product makes its kernel in its first run). libxsmm has
//   no kernel for a transposed B in kiln's row-major terms: B is first copied, transposed, into a per-thread
//   buffer, a slice of C's columns at a time when it does not fit (xsmm_transposed_b).
// - The wider float32 products on oneDNN's dnnl_sgemm, which packs its operands (when kiln has it: gemm_has_dnnl),
//   else on OpenBLAS, or libxsmm for the smaller ones; C narrower than libxsmm's vectors on OpenBLAS.
// - float64 on OpenBLAS, whose sums the float64 gradient checks and the PyTorch comparisons were made with.
// The limits, and the measurements behind them, are in gemm.cpp. A large product is split over kiln's threads
// (each library runs one thread in each); inside a parallel_for it runs on the calling thread.
// In its own file because OpenBLAS's <cblas.h> clashes with xtensor-blas's declarations.
#include <cstdint>

#include <kiln/core/dtype.hpp>

namespace kiln::detail {

struct GemmShape {
  std::int64_t m, n, k;
  bool transpose_a, transpose_b;
  std::int64_t lda, ldb, ldc;
  bool accumulate = false;  // C += op(A)·op(B) (BLAS's beta = 1) instead of C = op(A)·op(B)
};

// Multiply-adds per thread below which gemm runs a product on one thread.
constexpr std::int64_t gemm_split_work = std::int64_t{1} << 19;

enum class GemmBackend {
  none,               // an empty product: C is zeroed (or left, when accumulating)
  openblas,           // cblas_sgemm / cblas_dgemm
  xsmm,               // a libxsmm kernel on the operands as they are
  xsmm_transposed_b,  // a libxsmm kernel after copying op(B) into a per-thread buffer
  onednn,             // oneDNN's dnnl_sgemm, on the calling thread
};

// The library that runs products of this shape and dtype. A product split over threads is cut into slices
// first, and each slice's shape decides for it.
GemmBackend gemm_backend(const GemmShape& shape, DType dtype);
// Whether the OpenBLAS kiln runs on chose kernels narrower than the CPU's vectors: an AVX-512 CPU newer than that
// OpenBLAS knows (Debian 12's runs its AVX2 kernels on a Zen 5, at half libxsmm's rate). Then large float32
// products run on libxsmm as well (a B of at most 4 MB; a transposed B copied a slice of columns at a time).
bool openblas_below_cpu();
// Whether kiln was built with libxsmm (Debian ships it for amd64 only): without it every product runs on
// OpenBLAS.
bool gemm_has_xsmm();
// Whether kiln was built with oneDNN (Debian's libdnnl-dev, amd64): without it, the products it would run go to
// libxsmm or OpenBLAS by the rules below it in gemm_backend.
bool gemm_has_dnnl();
// Makes the kernels gemm will run for this shape and dtype, so the first run does not: ops call it from their
// plan-time hook (OpDef::prepare). Cheap when they exist already.
void prepare_gemm(const GemmShape& shape, DType dtype);

void gemm(const GemmShape& shape, const float* a, const float* b, float* c);
void gemm(const GemmShape& shape, const double* a, const double* b, double* c);
// One float32 product on the calling thread on the given backend, whatever gemm_backend would choose (for the
// tests and bench/gemm_bench, which compare the backends): a backend this build lacks, or one that cannot run the
// shape (libxsmm with B transposed, or B's copy with too long a row), runs it on OpenBLAS.
void gemm_with(GemmBackend backend, const GemmShape& shape, const float* a, const float* b, float* c);

// C = Σ_{i < count} A_i·B_i (+ C when accumulating): a batch-reduce product (oneDNN's and libxsmm's brgemm), every
// pair of the one shape `shape` (no transposes), on the calling thread: a convolution's taps read in place. On libxsmm's
// batch-reduce kernel where the shape runs on libxsmm (gemm_batch_reduce_fused), which keeps C's block in registers
// across the batch; else one product after another. No pairs: C is zeroed (or left, when accumulating).
void gemm_batch_reduce(const GemmShape& shape, const float* const* a, const float* const* b, std::int64_t count,
                       float* c);
void gemm_batch_reduce(const GemmShape& shape, const double* const* a, const double* const* b, std::int64_t count,
                       double* c);
bool gemm_batch_reduce_fused(const GemmShape& shape, DType dtype);

// ---- int8 products (Keras's int8 quantization) -----------------------------------------------------------------
// C (m × n, int32) = A (m × k, int8) · B (k × n, int8), row-major with no transposes, rows lda / ldb / ldc apart, on
// the calling thread. Exact: the sums are int32 (k up to 2³¹ / 128² = 131 072 cannot overflow; longer rows are
// refused by the callers' shape rules). On oneDNN's dnnl_gemm_s8s8s32 where kiln has it and the CPU has
// AVX512-VNNI (vpdpbusd; A shifted to unsigned with a column-sum correction): its kernels for older instruction sets
// saturate int16 pairs of products and are not exact on Keras's full int8 range. Elsewhere, for products too small
// to pay for oneDNN's per-call work, or should oneDNN refuse, a plain loop of int32 multiply-adds.
// b_transposed: B is stored transposed, n × k (a tied embedding's table read in reverse), rows ldb apart.
enum class Int8GemmBackend {
  onednn,     // dnnl_gemm_s8s8s32
  plain,      // kiln's loop
  vnni_rows,  // kiln's few-row AVX512-VNNI kernel, B as stored (ops/detail/int8_rows)
};
constexpr std::int64_t int8_gemm_max_k = std::int64_t{1} << 17;
Int8GemmBackend int8_gemm_backend();
void gemm_s8s8s32(std::int64_t m, std::int64_t n, std::int64_t k, const std::int8_t* a, std::int64_t lda,
                  const std::int8_t* b, std::int64_t ldb, std::int32_t* c, std::int64_t ldc, bool b_transposed = false);
// The same on the given backend (tests and bench compare them); onednn without oneDNN, or without VNNI, runs the
// loop.
void gemm_s8s8s32_with(Int8GemmBackend backend, std::int64_t m, std::int64_t n, std::int64_t k, const std::int8_t* a,
                       std::int64_t lda, const std::int8_t* b, std::int64_t ldb, std::int32_t* c, std::int64_t ldc,
                       bool b_transposed = false);

// ---- bfloat16 products (Keras's bfloat16 and mixed_bfloat16 dtype policies) ----------------------------------------
// C = op(A)·op(B) (+ C when accumulating) with A's and B's float32 values rounded to bfloat16 (to nearest, ties to
// even) and the products summed in float32, as a CPU's bfloat16 dot products (vdpbf16ps) and Keras's mixed policy
// compute. On oneDNN's matmul primitive where the CPU has AVX512_BF16 (or AMX): each worker packs its slice of
// the operands into per-thread bfloat16 buffers (grown to the largest product it has run, then kept) and runs a
// primitive made at its first product of that shape. Elsewhere (no oneDNN, no AVX512_BF16: oneDNN would emulate),
// the float32 product of the rounded operands, which differs only in the order of the float32 sums. Split over
// kiln's threads as gemm splits float32 products.
// A product of up to 4 rows of C (a token's, in generation) runs kiln's few-row AVX-512 kernel instead, which
// rounds each B value as it reads it (B read once, as the float32 product reads it).
enum class Bf16GemmBackend {
  onednn,    // oneDNN's matmul primitive on bfloat16 operands
  rounded,   // the operands rounded to bfloat16 in float32, then gemm
  few_rows,  // kiln's few-row kernel (up to 4 rows, A not transposed, AVX-512F; else rounded)
};
Bf16GemmBackend bf16_gemm_backend();
// Runs `slice` on each worker's part of a float32 product split over kiln's threads exactly as gemm splits it (rows
// of C, or columns when C is wide and short), with that part's shape and operands.
using GemmSlice = void (*)(const GemmShape& slice, const float* a, const float* b, float* c, const void* context);
void split_product(const GemmShape& shape, const float* a, const float* b, float* c, GemmSlice slice,
                   const void* context);
void gemm_bf16(const GemmShape& shape, const float* a, const float* b, float* c);
// One product on the calling thread on the given backend (tests compare them); onednn where it cannot run: rounded.
void gemm_bf16_with(Bf16GemmBackend backend, const GemmShape& shape, const float* a, const float* b, float* c);
// bfloat16 as its 16 bits: round to nearest even (a NaN stays NaN), and back (exact).
std::uint16_t to_bfloat16(float value);
float from_bfloat16(std::uint16_t value);
void to_bfloat16(const float* from, std::uint16_t* to, std::int64_t count);
float round_to_bfloat16(float value);

}  // namespace kiln::detail
