#include <kiln/ops/detail/gemm.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <cstddef>
#include <string>

#include <cblas.h>
#if KILN_HAS_XSMM
#include <libxsmm.h>
#endif
#if KILN_HAS_DNNL
#include <omp.h>

#include <oneapi/dnnl/dnnl.h>
#endif

#include <kiln/core/parallel.hpp>
#include <kiln/ops/detail/int8_rows.hpp>
#include <kiln/ops/detail/transpose_kernels.hpp>

namespace kiln::detail {

namespace {
CBLAS_TRANSPOSE transpose_flag(bool transpose) { return transpose ? CblasTrans : CblasNoTrans; }
int to_int(std::int64_t value) { return static_cast<int>(value); }

// C = A·B runs as C = 0; C += A·B on OpenBLAS. OpenBLAS 0.3.21 zeroes C for beta = 0 with a scalar loop
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

void call_blas(const GemmShape& s, const float* a, const float* b, float* c) {
  zero_output(s, c);
  cblas_sgemm(CblasRowMajor, transpose_flag(s.transpose_a), transpose_flag(s.transpose_b), to_int(s.m), to_int(s.n),
              to_int(s.k), 1.0f, a, to_int(s.lda), b, to_int(s.ldb), 1.0f, c, to_int(s.ldc));
}

void call_blas(const GemmShape& s, const double* a, const double* b, double* c) {
  zero_output(s, c);
  cblas_dgemm(CblasRowMajor, transpose_flag(s.transpose_a), transpose_flag(s.transpose_b), to_int(s.m), to_int(s.n),
              to_int(s.k), 1.0, a, to_int(s.lda), b, to_int(s.ldb), 1.0, c, to_int(s.ldc));
}

// ---- oneDNN ------------------------------------------------------------------------------------------------
#if KILN_HAS_DNNL
// dnnl_sgemm, row-major like kiln. Debian's oneDNN runs on OpenMP and would start a team of
// omp_get_max_threads() threads for the product from whichever thread calls it; kiln runs it on the calling
// thread (its own threads split the product), so that thread's OpenMP thread count is 1 for the call, and given
// back after. Should oneDNN refuse (no memory for its packing buffer), the product runs on OpenBLAS.
void call_dnnl(const GemmShape& s, const float* a, const float* b, float* c) {
  const int threads = omp_get_max_threads();
  if (threads != 1) omp_set_num_threads(1);
  const dnnl_status_t status = dnnl_sgemm(s.transpose_a ? 'T' : 'N', s.transpose_b ? 'T' : 'N', s.m, s.n, s.k, 1.0f, a,
                                          s.lda, b, s.ldb, s.accumulate ? 1.0f : 0.0f, c, s.ldc);
  if (threads != 1) omp_set_num_threads(threads);
  if (status != dnnl_success) call_blas(s, a, b, c);
}
#endif

// ---- libxsmm ------------------------------------------------------------------------------------------
// libxsmm's kernels are column-major. Row-major C = op(A)·op(B) is column-major Cᵀ = op(B)ᵀ·op(A)ᵀ: B is
// libxsmm's first operand, A its second, and m and n swap. So kiln's transposed A is libxsmm's TRANS_B, which
// 1.17 has kernels for; kiln's transposed B would be TRANS_A, which it has none for (dispatch returns null).
//
// The limits below come from bench/RESULTS.md (the GEMM-library table, and the sizes around them), on two
// machines: an AVX2 EPYC, where libxsmm ran kiln's small products at 2.3-2.9× OpenBLAS's rate, and an AVX-512
// one, where OpenBLAS's own small-matrix kernels are faster and libxsmm's lead is 1.05-1.8×.

// Products (each thread's slice of one) of more multiply-adds than this stay on OpenBLAS: on the AVX-512
// machine libxsmm's lead fell from 1.15× at 256³ to 1.07× at 512³ and below 1 at 1024³ and 750×512×512.
constexpr std::int64_t xsmm_max_work = std::int64_t{1} << 24;
// libxsmm's kernels run along C's rows (its columns, column-major) in whole vectors: a C narrower than this
// wastes most of each. On the AVX-512 machine a 64×2 product with k = 480 ran at a fifth of OpenBLAS's rate,
// 64×8 at 0.6 of it; 12 columns (mql5_block's model width) at 1.6× it.
constexpr std::int64_t xsmm_min_columns = 12;
// op(B) is copied, transposed, into a per-thread buffer of this many floats when it fits; larger transposed Bs
// stay on OpenBLAS. So do products of fewer rows than transposed_b_min_rows, whose copy would cost about as
// much as the product (1×12×128 ran at a tenth of OpenBLAS's rate).
constexpr std::int64_t transposed_b_capacity = std::int64_t{1} << 15;
constexpr std::int64_t transposed_b_min_rows = 16;
// Where OpenBLAS runs kernels narrower than the CPU's (openblas_below_cpu), larger products go to libxsmm too,
// up to a B of this many floats: libxsmm's kernels do not pack B, and on the Zen 5 below a 64×4096×4096 product
// (a 64 MB B) ran at 60 GFLOP/s on libxsmm against 92 on OpenBLAS's AVX2 kernels, where a 4 MB B
// (1500×512×2048) still ran at 145 against 106.
constexpr std::int64_t xsmm_large_b_max = std::int64_t{1} << 20;
// There a transposed B too large for the copy is copied and multiplied a slice of C's columns at a time, as many
// as fit the copy, up to 64: 1500×512×512 ran at 204 GFLOP/s in slices of 64 columns and 192 in slices of 32,
// against 106 on OpenBLAS, but at 122 in slices of 16 and at 44 with k = 2048 (16 columns fit), so slices
// narrower than 32 stay on OpenBLAS.
constexpr std::int64_t transposed_b_max_slice = 64;
constexpr std::int64_t transposed_b_min_slice = 32;
// libxsmm keeps a block of C's rows in registers and streams A past it: with C at most this wide it ran kiln's
// products at or above every other library's rate whatever their size (bench/RESULTS.md: cnn_small's convolution
// 1815×64×288 at 95 GFLOP/s against OpenBLAS's 62, ResNet-50's 784×128×1152 at 101 against 71); wider, it reads
// A again for every block of columns, and oneDNN's packed kernels overtake it (196×256×2304: 81 against 100).
constexpr std::int64_t xsmm_narrow_columns = 128;
// Products of fewer multiply-adds stay off oneDNN, whose per-call work (checks, a packing buffer from malloc)
// would weigh on them.
constexpr std::int64_t dnnl_min_work = std::int64_t{1} << 16;

// The columns of C each copy of a transposed B serves: all of them when op(B) fits the copy, else a multiple
// of 16 (whole vectors of C's rows) as above.
std::int64_t transposed_b_slice(const GemmShape& s) {
  if (s.n <= xsmm_narrow_columns && s.n * s.k <= transposed_b_capacity) return s.n;
  return std::min(transposed_b_max_slice, transposed_b_capacity / s.k / 16 * 16);
}

#if KILN_HAS_XSMM

struct XsmmProduct {
  libxsmm_blasint m, n, k, lda, ldb, ldc;
  int flags;
  bool accumulate;

  explicit XsmmProduct(const GemmShape& s)
      : m(s.n),
        n(s.m),
        k(s.k),
        lda(s.ldb),
        ldb(s.lda),
        ldc(s.ldc),
        flags(s.transpose_a ? LIBXSMM_GEMM_FLAG_TRANS_B : 0),
        accumulate(s.accumulate) {
    if (s.transpose_b) lda = s.n;  // B's transposed copy: k rows of n
  }
  bool operator==(const XsmmProduct& other) const {
    return m == other.m && n == other.n && k == other.k && lda == other.lda && ldb == other.ldb && ldc == other.ldc &&
           flags == other.flags && accumulate == other.accumulate;
  }
  std::size_t hash() const {
    std::size_t h = 0;
    for (const libxsmm_blasint value : {m, n, k, lda, ldb, ldc})
      h = (h ^ static_cast<std::size_t>(value)) * 0x100000001b3ull;
    return h ^ static_cast<std::size_t>(flags * 2 + (accumulate ? 1 : 0));
  }
  // libxsmm's registry keeps every kernel it makes; dispatching one made before is a lookup there. No prefetch:
  // kernels that prefetch take three more arguments, and nullptr would let LIBXSMM_GEMM_PREFETCH decide.
  libxsmm_smmfunction dispatch() const {
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    const int prefetch = LIBXSMM_GEMM_PREFETCH_NONE;
    return libxsmm_smmdispatch(m, n, k, &lda, &ldb, &ldc, &alpha, &beta, &flags, &prefetch);
  }
};

// The kernels this thread ran last, by shape: a step's few dozen shapes find theirs here in a few
// nanoseconds, where libxsmm's own lookup (a descriptor, a hash and a compare) took 5-10 % of a small product.
// Kernel is the kernel's type, Dispatch how libxsmm makes one.
template <class Kernel, Kernel (*Dispatch)(const XsmmProduct&), std::size_t Size>
class KernelCache {
 public:
  Kernel find(const XsmmProduct& product) {
    Entry& entry = entries_[product.hash() % entries_.size()];
    if (!entry.filled || !(entry.product == product)) entry = {product, Dispatch(product), true};
    return entry.kernel;
  }

 private:
  struct Entry {
    XsmmProduct product{GemmShape{}};
    Kernel kernel = nullptr;
    bool filled = false;
  };
  std::array<Entry, Size> entries_{};
};

libxsmm_smmfunction dispatch_product(const XsmmProduct& product) { return product.dispatch(); }

libxsmm_smmfunction kernel_for(const GemmShape& s) {
  thread_local KernelCache<libxsmm_smmfunction, dispatch_product, 64> cache;
  return cache.find(XsmmProduct(s));
}

// Batch-reduce kernels (C = Σ A_i·B_i in one pass, the sum kept in registers across the batch), by shape, as above.
libxsmm_smmfunction_reducebatch_addr dispatch_batch_product(const XsmmProduct& product) {
  const float alpha = 1.0f, beta = product.accumulate ? 1.0f : 0.0f;
  const int prefetch = LIBXSMM_GEMM_PREFETCH_NONE;
  return libxsmm_smmdispatch_reducebatch_addr(product.m, product.n, product.k, &product.lda, &product.ldb, &product.ldc,
                                              &alpha, &beta, &product.flags, &prefetch);
}
libxsmm_smmfunction_reducebatch_addr batch_kernel_for(const GemmShape& s) {
  thread_local KernelCache<libxsmm_smmfunction_reducebatch_addr, dispatch_batch_product, 16> cache;
  return cache.find(XsmmProduct(s));
}

// The copy of a transposed B: in thread-local storage (128 KB a thread, made with the thread), so no product
// ever allocates, on any thread.
float* transposed_b_buffer() {
  alignas(64) thread_local float buffer[transposed_b_capacity];
  return buffer;
}

// op(B) (k × n) into `out`, row-major with n columns, from B stored transposed (n rows of k, ldb apart): in
// libxsmm's column-major terms, the transpose of a k × n matrix. The dispatched kernel where this CPU's build has
// one (16 × 16 blocks in registers with AVX-512: kiln/ops/detail/isa/transpose_kernels.inl), else libxsmm's.
void transpose_b(const GemmShape& s, const float* b, float* out) {
  if (const auto kernel = transpose_kernels().transpose)
    kernel(b, s.n, s.k, s.ldb, out);
  else
    libxsmm_otrans(out, b, sizeof(float), s.k, s.n, s.ldb, s.n);
}

#endif  // KILN_HAS_XSMM

// Runs a float32 product on the backend gemm_backend chose. Should libxsmm make no kernel for a shape (it has
// limits of its own on sizes and leading dimensions), that shape runs on OpenBLAS, every time.
void run_product(const GemmShape& s, const float* a, const float* b, float* c, GemmBackend backend) {
  switch (backend) {
    case GemmBackend::none:
      zero_output(s, c);
      return;
    case GemmBackend::openblas:
      break;
    case GemmBackend::onednn:
#if KILN_HAS_DNNL
      call_dnnl(s, a, b, c);
      return;
#else
      break;
#endif
#if KILN_HAS_XSMM
    case GemmBackend::xsmm:
      if (const libxsmm_smmfunction kernel = kernel_for(s)) {
        kernel(b, a, c);  // (libxsmm's first operand is kiln's B)
        return;
      }
      break;
    case GemmBackend::xsmm_transposed_b: {
      // C's columns [first, first + slice) from rows [first, first + slice) of the stored B, copied transposed.
      const std::int64_t slice = transposed_b_slice(s);
      for (std::int64_t first = 0; first < s.n; first += slice) {
        GemmShape part = s;
        part.n = std::min(slice, s.n - first);
        const float* part_b = b + first * s.ldb;
        if (const libxsmm_smmfunction kernel = kernel_for(part)) {
          float* copy = transposed_b_buffer();
          transpose_b(part, part_b, copy);
          kernel(copy, a, c + first);
        } else {
          call_blas(part, a, part_b, c + first);
        }
      }
      return;
    }
#else
    case GemmBackend::xsmm:
    case GemmBackend::xsmm_transposed_b:
      break;
#endif
  }
  call_blas(s, a, b, c);
}

void run_product(const GemmShape& s, const double* a, const double* b, double* c, GemmBackend backend) {
  if (backend == GemmBackend::none)
    zero_output(s, c);
  else
    call_blas(s, a, b, c);
}

// ---- splitting over threads -------------------------------------------------------------------------------
// kiln's pool runs the threads, and each library one thread in each (see core/threads.cpp): a product worth
// splitting is cut into row ranges of C (or column ranges when C is wide and short), one per worker.
// Each worker gets at least gemm_split_work multiply-adds (about 10 µs), and 16 rows or columns: a narrower slice
// falls below libxsmm's columns (xsmm_min_columns) or, with a transposed B, its rows (transposed_b_min_rows) and
// runs on OpenBLAS, whose packing costs more than the slice's product. Cut into 16 slices of 8 columns, char_gpt's
// 65×128 (k 768) weight gradient cost 256 µs of CPU against 69 µs whole; in 8 slices of 16, 70 µs.
constexpr std::int64_t min_slice = 16;
// Column slices start at multiples of 16 columns (a 64-byte vector of floats): libxsmm runs a slice whose width is
// not a multiple of its vectors at half the rate (12×128 by k 2560, transposed A: 16 columns 6.9 µs, 18 columns
// 14.2). Rows need no such care (a 768-row product in slices of 16, 18 or 19 rows costs the same).
constexpr std::int64_t column_unit = 16;

struct Split {
  bool by_rows;
  std::int64_t extent;  // rows or columns of C
  std::int64_t unit;    // a slice's rows or columns are a multiple of this, but the last slice's
  std::int64_t units;   // what parallel_for splits: ceil(extent / unit)
  int max_workers;
};

Split split_of(const GemmShape& s) {
  const std::int64_t work = s.m * s.n * s.k;
  Split split;
  split.by_rows = s.m >= s.n;
  split.extent = split.by_rows ? s.m : s.n;
  split.unit = split.by_rows ? 1 : column_unit;
  split.units = (split.extent + split.unit - 1) / split.unit;
  split.max_workers = std::max(
      1, static_cast<int>(std::min<std::int64_t>({work / gemm_split_work, split.extent / min_slice, 1 << 16})));
  return split;
}

// The rows or columns of C a slice of units [begin, end) covers.
struct SliceSpan {
  std::int64_t begin, end;
};
SliceSpan span_of(const Split& split, std::int64_t begin, std::int64_t end) {
  return {begin * split.unit, std::min(end * split.unit, split.extent)};
}

GemmShape slice_shape(const GemmShape& s, const Split& split, const SliceSpan& span) {
  GemmShape slice = s;
  (split.by_rows ? slice.m : slice.n) = span.end - span.begin;
  return slice;
}

// The slice of units [begin, end): its shape, and where its operands and output start.
template <class T>
GemmShape slice_of(const GemmShape& s, const Split& split, std::int64_t begin, std::int64_t end, const T*& a,
                   const T*& b, T*& c) {
  const SliceSpan span = span_of(split, begin, end);
  if (split.by_rows) {
    a += s.transpose_a ? span.begin : span.begin * s.lda;
    c += span.begin * s.ldc;
  } else {
    b += s.transpose_b ? span.begin * s.ldb : span.begin;
    c += span.begin;
  }
  return slice_shape(s, split, span);
}

// Runs f(slice, a, b, c) on each worker's part of a product split over kiln's threads.
template <class T, class F>
void for_each_slice(const GemmShape& s, const T* a, const T* b, T* c, const F& f) {
  const Split split = split_of(s);
  parallel_for(split.units, split.max_workers, [&](std::int64_t begin, std::int64_t end, int) {
    const T* slice_a = a;
    const T* slice_b = b;
    T* slice_c = c;
    const GemmShape slice = slice_of(s, split, begin, end, slice_a, slice_b, slice_c);
    f(slice, slice_a, slice_b, slice_c);
  });
}

template <class T>
void split_gemm(const GemmShape& s, const T* a, const T* b, T* c) {
  for_each_slice(s, a, b, c, [](const GemmShape& slice, const T* pa, const T* pb, T* pc) {
    run_product(slice, pa, pb, pc, gemm_backend(slice, dtype_of<T>::value));
  });
}

void prepare_product(const GemmShape& s) {
#if KILN_HAS_XSMM
  const GemmBackend backend = gemm_backend(s, DType::float32);
  if (backend == GemmBackend::xsmm) XsmmProduct(s).dispatch();
  if (backend == GemmBackend::xsmm_transposed_b) {  // the slices' kernels: a whole slice and the last one
    const std::int64_t slice = transposed_b_slice(s);
    for (const std::int64_t columns : {slice, s.n % slice}) {
      GemmShape part = s;
      part.n = columns;
      if (columns > 0) XsmmProduct(part).dispatch();
    }
  }
#else
  (void)s;
#endif
}
}  // namespace

bool gemm_has_xsmm() { return KILN_HAS_XSMM != 0; }

bool gemm_has_dnnl() { return KILN_HAS_DNNL != 0; }

// OpenBLAS 0.3.21 (Debian 12's) chooses its kernels by CPU model, and on an x86 model newer than it knows it falls
// back by features no further than AVX2: on an AMD EPYC Zen 5 (family 0x1a, with AVX-512) it runs its Haswell
// kernels, at 93-108 GFLOP/s on one core for products from 150×150×512 to 1024³, where libxsmm's JIT kernels
// (made for the features the CPU reports) ran at 145-227 and OpenBLAS's own AVX-512 ones (forced with
// OPENBLAS_CORETYPE=SkylakeX) at 170-210. Its AVX-512 kernel sets are SkylakeX, Cooperlake and SapphireRapids.
bool openblas_below_cpu() {
  static const bool below = [] {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (!__builtin_cpu_supports("avx512f")) return false;
    std::string core = openblas_get_corename();
    std::transform(core.begin(), core.end(), core.begin(), [](unsigned char c) { return std::tolower(c); });
    return core != "skylakex" && core != "cooperlake" && core != "sapphirerapids";
#else
    return false;
#endif
  }();
  return below;
}

GemmBackend gemm_backend(const GemmShape& s, DType dtype) {
  if (s.m <= 0 || s.n <= 0 || s.k <= 0) return GemmBackend::none;
  if (dtype == DType::float64 || s.n < xsmm_min_columns) return GemmBackend::openblas;
  const bool xsmm = gemm_has_xsmm();
  const std::int64_t work = s.m * s.n * s.k;
  if (xsmm && !s.transpose_b && s.n <= xsmm_narrow_columns && s.k * s.n <= xsmm_large_b_max) return GemmBackend::xsmm;
  if (xsmm && s.transpose_b && s.m >= transposed_b_min_rows) {
    const std::int64_t slice = transposed_b_slice(s);
    if (slice == s.n || slice >= (openblas_below_cpu() ? transposed_b_min_slice : transposed_b_max_slice))
      return GemmBackend::xsmm_transposed_b;
  }
  if (gemm_has_dnnl() && work >= dnnl_min_work) return GemmBackend::onednn;
  if (!xsmm || s.transpose_b) return GemmBackend::openblas;
  if (work > xsmm_max_work && !(openblas_below_cpu() && s.k * s.n <= xsmm_large_b_max)) return GemmBackend::openblas;
  return GemmBackend::xsmm;
}

void prepare_gemm(const GemmShape& s, DType dtype) {
  if (dtype != DType::float32 || gemm_backend(s, dtype) == GemmBackend::none) return;
  // The whole product (as it runs inside another kernel's parallel_for) and each slice split_gemm would cut
  // at today's thread count: the ranges [units·w/W, units·(w+1)/W) parallel_for gives its W workers.
  prepare_product(s);
  const Split split = split_of(s);
  const auto workers = static_cast<std::int64_t>(parallel_workers(split.units, split.max_workers));
  if (workers <= 1) return;
  for (std::int64_t w = 0; w < workers; ++w)
    prepare_product(slice_shape(s, split, span_of(split, split.units * w / workers, split.units * (w + 1) / workers)));
}

void gemm(const GemmShape& s, const float* a, const float* b, float* c) { split_gemm(s, a, b, c); }

void split_product(const GemmShape& s, const float* a, const float* b, float* c, GemmSlice slice,
                   const void* context) {
  for_each_slice(s, a, b, c, [&](const GemmShape& part, const float* pa, const float* pb, float* pc) {
    slice(part, pa, pb, pc, context);
  });
}

void gemm_with(GemmBackend backend, const GemmShape& s, const float* a, const float* b, float* c) {
  if (gemm_backend(s, DType::float32) == GemmBackend::none) backend = GemmBackend::none;
  // Each backend's own limits: libxsmm takes no transposed B as it is, the copy needs B transposed and 16 of its
  // rows at a time.
  if (backend == GemmBackend::xsmm && s.transpose_b) backend = GemmBackend::openblas;
  if (backend == GemmBackend::xsmm_transposed_b && (!s.transpose_b || transposed_b_slice(s) < 16))
    backend = GemmBackend::openblas;
  run_product(s, a, b, c, backend);
}

void gemm(const GemmShape& s, const double* a, const double* b, double* c) { split_gemm(s, a, b, c); }

bool gemm_batch_reduce_fused(const GemmShape& s, DType dtype) {
  return dtype == DType::float32 && !s.transpose_a && !s.transpose_b &&
         gemm_backend(s, dtype) == GemmBackend::xsmm;
}

namespace {
// The batch one product at a time, each adding to C (the first assigning it unless accumulating).
template <class T>
void batch_in_turn(const GemmShape& s, const T* const* a, const T* const* b, std::int64_t count, T* c) {
  if (count == 0) {
    if (!s.accumulate) zero_output(s, c);
    return;
  }
  for (std::int64_t i = 0; i < count; ++i) {
    GemmShape one = s;
    one.accumulate = s.accumulate || i > 0;
    run_product(one, a[i], b[i], c, gemm_backend(one, dtype_of<T>::value));
  }
}
}  // namespace

void gemm_batch_reduce(const GemmShape& s, const float* const* a, const float* const* b, std::int64_t count, float* c) {
#if KILN_HAS_XSMM
  if (count > 0 && gemm_batch_reduce_fused(s, DType::float32)) {
    // libxsmm 1.17's kernels move the addresses in the arrays they are given as they go: they get copies, 64 at a
    // time (the later groups adding to C, with a kernel of their own).
    constexpr std::int64_t group = 64;
    GemmShape adding = s;
    adding.accumulate = true;
    const auto first_kernel = batch_kernel_for(s);
    const auto later_kernel = count > group ? batch_kernel_for(adding) : first_kernel;
    if (first_kernel != nullptr && later_kernel != nullptr) {
      const float* left[group];
      const float* right[group];
      for (std::int64_t first = 0; first < count; first += group) {
        const std::int64_t size = std::min(group, count - first);
        for (std::int64_t i = 0; i < size; ++i) {
          left[i] = b[first + i];  // (libxsmm's first operand is kiln's B)
          right[i] = a[first + i];
        }
        const auto n = static_cast<unsigned long long>(size);
        (first == 0 ? first_kernel : later_kernel)(left, right, c, &n);
      }
      return;
    }
  }
#endif
  batch_in_turn(s, a, b, count, c);
}

void gemm_batch_reduce(const GemmShape& s, const double* const* a, const double* const* b, std::int64_t count,
                       double* c) {
  batch_in_turn(s, a, b, count, c);
}

// ---- int8 ----------------------------------------------------------------------------------------------------

namespace {
void plain_s8s8s32(std::int64_t m, std::int64_t n, std::int64_t k, const std::int8_t* a, std::int64_t lda,
                   const std::int8_t* b, std::int64_t ldb, std::int32_t* c, std::int64_t ldc, bool b_transposed) {
  if (b_transposed) {  // each sum a row of A by a row of B
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        std::int32_t sum = 0;
        for (std::int64_t p = 0; p < k; ++p)
          sum += static_cast<std::int32_t>(a[i * lda + p]) * static_cast<std::int32_t>(b[j * ldb + p]);
        c[i * ldc + j] = sum;
      }
    return;
  }
  for (std::int64_t i = 0; i < m; ++i) {
    std::int32_t* row = c + i * ldc;
    std::fill(row, row + n, 0);
    for (std::int64_t p = 0; p < k; ++p) {
      const std::int32_t left = a[i * lda + p];
      const std::int8_t* right = b + p * ldb;
      for (std::int64_t j = 0; j < n; ++j) row[j] += left * static_cast<std::int32_t>(right[j]);
    }
  }
}
}  // namespace

// Below this many multiply-adds oneDNN's per-call work (its checks, and packing B) costs more than the loop: on the
// Zen 4 build machine 1×160×40 took 1.54 µs on dnnl_gemm_s8s8s32 against 1.08 in the loop, 1×40×40 0.72 against
// 0.30, where 1×768×768 took 20 against 29 and 64×160×40 4.0 against 72.
constexpr std::int64_t int8_dnnl_min_work = std::int64_t{1} << 15;

// oneDNN 2.6's dnnl_gemm_s8s8s32 is exact only on its VNNI kernels (vpdpbusd sums four products into int32). Below
// AVX512-VNNI it multiplies with vpmaddubsw, whose pairs of products saturate at int16: with Keras's full int8
// range on both sides (A is shifted to [1, 255]) the sums came out wrong on its AVX-512, AVX2 and SSE4.1 kernels
// (found by running tests/ops/quantize_test.cpp under DNNL_MAX_CPU_ISA). Those CPUs run kiln's loop.
bool dnnl_int8_exact() {
#if KILN_HAS_DNNL
  static const bool exact = (dnnl_get_effective_cpu_isa() & dnnl_cpu_isa_avx512_core_vnni) == dnnl_cpu_isa_avx512_core_vnni;
  return exact;
#else
  return false;
#endif
}

// One-row products (and products too small for oneDNN) run on kiln's VNNI kernel (int8_rows), which reads B as
// stored where oneDNN packs it on every call. 1 thread, Zen 4: 1×768×3072 49 µs against oneDNN's 94 (float32: 143),
// 1×3072×768 44 against 117, 1×1024×2048 61 against 88; but at 2 rows it only matches oneDNN (1024×2048: 135
// against 117) and at 4 it trails (768×3072: 157 against 118): B's interleaving is shared by the rows, the sums are not.
constexpr std::int64_t int8_rows_max_m = 1;

Int8GemmBackend int8_gemm_backend() {
  return gemm_has_dnnl() && dnnl_int8_exact() ? Int8GemmBackend::onednn : Int8GemmBackend::plain;
}

void gemm_s8s8s32_with(Int8GemmBackend backend, std::int64_t m, std::int64_t n, std::int64_t k, const std::int8_t* a,
                       std::int64_t lda, const std::int8_t* b, std::int64_t ldb, std::int32_t* c, std::int64_t ldc,
                       bool b_transposed) {
  if (m <= 0 || n <= 0) return;
  if (backend == Int8GemmBackend::vnni_rows && int8_rows_available())
    return int8_rows(m, n, k, a, lda, b, ldb, c, ldc, b_transposed);
#if KILN_HAS_DNNL
  if (backend == Int8GemmBackend::onednn && k > 0 && dnnl_int8_exact()) {
    // On the calling thread, as call_dnnl runs dnnl_sgemm.
    const int threads = omp_get_max_threads();
    if (threads != 1) omp_set_num_threads(1);
    const std::int32_t no_offset = 0;
    const dnnl_status_t status =
        dnnl_gemm_s8s8s32('N', b_transposed ? 'T' : 'N', 'F', m, n, k, 1.0f, a, lda, 0, b, ldb, 0, 0.0f, c, ldc, &no_offset);
    if (threads != 1) omp_set_num_threads(threads);
    if (status == dnnl_success) return;
  }
#else
  (void)backend;
#endif
  plain_s8s8s32(m, n, k, a, lda, b, ldb, c, ldc, b_transposed);
}

void gemm_s8s8s32(std::int64_t m, std::int64_t n, std::int64_t k, const std::int8_t* a, std::int64_t lda,
                  const std::int8_t* b, std::int64_t ldb, std::int32_t* c, std::int64_t ldc, bool b_transposed) {
  Int8GemmBackend backend = int8_gemm_backend();
  if (m * n * k < int8_dnnl_min_work || m <= int8_rows_max_m)
    backend = int8_rows_available() ? Int8GemmBackend::vnni_rows : Int8GemmBackend::plain;
  gemm_s8s8s32_with(backend, m, n, k, a, lda, b, ldb, c, ldc, b_transposed);
}

}  // namespace kiln::detail
