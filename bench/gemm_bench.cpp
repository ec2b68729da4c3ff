// gemm_bench: single-threaded GFLOP/s of the matrix products kiln's small models run, per GEMM library:
// OpenBLAS, BLIS, libxsmm (JIT kernels for small products) and oneDNN's matmul, and kiln's own detail::gemm (the
// library it picks per shape, with its per-call work). The libraries export the same BLAS symbols, so this file
// is built once per library (GEMM_BENCH_<LIBRARY>), each binary linking one: gemm_bench_openblas,
// gemm_bench_blis, gemm_bench_xsmm, gemm_bench_dnnl, gemm_bench_kiln.
//
//   gemm_bench_<library> [--min-time S]     one JSON line per shape
//
// Each shape is a row-major C(m×n) = op(A)(m×k)·op(B)(k×n), run `count` times on distinct matrices (a batch:
// the per-head products of attention), repeated for at least min-time seconds after a warm-up; the rate is
// 2·m·n·k·count / time. Each library's kernel or primitive for a shape is made once, before timing, as kiln
// would make it at plan time. scripts/gemm_bench.sh runs the four and prints the table (bench/RESULTS.md).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#if defined(GEMM_BENCH_OPENBLAS)
#include <cblas.h>
#define GEMM_BENCH_LIBRARY "openblas"
#elif defined(GEMM_BENCH_BLIS)
#include <blis.h>
#define GEMM_BENCH_LIBRARY "blis"
#elif defined(GEMM_BENCH_XSMM)
#include <libxsmm.h>
#define GEMM_BENCH_LIBRARY "libxsmm"
#elif defined(GEMM_BENCH_DNNL)
#include <dnnl.hpp>
#define GEMM_BENCH_LIBRARY "onednn"
#elif defined(GEMM_BENCH_KILN)
#include <kiln/core/threads.hpp>
#include <kiln/ops/detail/gemm.hpp>
#define GEMM_BENCH_LIBRARY "kiln"
#else
#error "build with one of GEMM_BENCH_OPENBLAS, GEMM_BENCH_BLIS, GEMM_BENCH_XSMM, GEMM_BENCH_DNNL, GEMM_BENCH_KILN"
#endif

namespace {

struct Shape {
  const char* label;  // where kiln runs it
  int m, n, k;
  bool trans_a, trans_b;
  int count;
};

// kiln's real products. mql5_block (batch 64, 40 steps, 8 heads of 16, model width 12): the per-head
// attention products forward and backward, the Dense layers and their weight gradients; then one sample of
// it (batch 1); seed_mha's projection as a large reference.
const std::vector<Shape>& shapes() {
  static const std::vector<Shape> table = {
      {"mql5 scores q.kT (512 heads)", 40, 40, 16, false, true, 512},
      {"mql5 context p.v (512 heads)", 40, 16, 40, false, false, 512},
      {"mql5 d_scores dc.vT (512 heads)", 40, 40, 16, false, true, 512},
      {"mql5 d_v pT.dc (512 heads)", 40, 16, 40, true, false, 512},
      {"mql5 d_q ds.k (512 heads)", 40, 16, 40, false, false, 512},
      {"mql5 projection x.w (2560x12 -> 128)", 2560, 128, 12, false, false, 1},
      {"mql5 output w0 (2560x128 -> 12)", 2560, 12, 128, false, false, 1},
      {"mql5 feed-forward 12 -> 48", 2560, 48, 12, false, false, 1},
      {"mql5 feed-forward 48 -> 12", 2560, 12, 48, false, false, 1},
      {"mql5 head 480 -> 2 (batch 64)", 64, 2, 480, false, false, 1},
      {"mql5 projection grad xT.dy", 12, 128, 2560, true, false, 1},
      {"mql5 w0 grad hT.dy", 128, 12, 2560, true, false, 1},
      {"batch-1 scores (8 heads)", 40, 40, 16, false, true, 8},
      {"batch-1 context (8 heads)", 40, 16, 40, false, false, 8},
      {"batch-1 projection 40x12 -> 128", 40, 128, 12, false, false, 1},
      {"batch-1 feed-forward 40x12 -> 48", 40, 48, 12, false, false, 1},
      {"batch-1 head 480 -> 2", 1, 2, 480, false, false, 1},
      {"seed_mha projection 1500x512 -> 512", 1500, 512, 512, false, false, 1},
  };
  return table;
}

// The operands of `count` products, one after the other; each matrix row-major as op() says it is stored.
struct Operands {
  std::vector<float> a, b, c;
  std::size_t a_size, b_size, c_size;
  explicit Operands(const Shape& s)
      : a_size(static_cast<std::size_t>(s.m) * s.k),
        b_size(static_cast<std::size_t>(s.k) * s.n),
        c_size(static_cast<std::size_t>(s.m) * s.n) {
    a.resize(a_size * s.count);
    b.resize(b_size * s.count);
    c.assign(c_size * s.count, 0.0f);
    unsigned state = 12345;
    auto next = [&] {
      state = state * 1103515245u + 12345u;
      return static_cast<float>((state >> 8) & 0xffff) / 65536.0f - 0.5f;
    };
    for (float& v : a) v = next();
    for (float& v : b) v = next();
  }
};

// One library's way to run a shape's `count` products, made once.
class Runner {
 public:
  Runner(const Shape& s, Operands& o) : s_(s), o_(o) { prepare(); }
  bool supported() const { return supported_; }
  void run();

 private:
  void prepare();
  const Shape& s_;
  Operands& o_;
  bool supported_ = true;
  // leading dimensions of the stored (row-major) operands
  int lda() const { return s_.trans_a ? s_.m : s_.k; }
  int ldb() const { return s_.trans_b ? s_.k : s_.n; }
#if defined(GEMM_BENCH_XSMM)
  libxsmm_smmfunction kernel_ = nullptr;
#elif defined(GEMM_BENCH_KILN)
  kiln::detail::GemmShape gemm_{};
#elif defined(GEMM_BENCH_DNNL)
  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};
  dnnl::matmul matmul_;
  dnnl::memory a_mem_, b_mem_, c_mem_;
#endif
};

#if defined(GEMM_BENCH_OPENBLAS)
void Runner::prepare() { openblas_set_num_threads(1); }
void Runner::run() {
  for (int i = 0; i < s_.count; ++i)
    cblas_sgemm(CblasRowMajor, s_.trans_a ? CblasTrans : CblasNoTrans, s_.trans_b ? CblasTrans : CblasNoTrans, s_.m,
                s_.n, s_.k, 1.0f, o_.a.data() + i * o_.a_size, lda(), o_.b.data() + i * o_.b_size, ldb(), 0.0f,
                o_.c.data() + i * o_.c_size, s_.n);
}
#elif defined(GEMM_BENCH_BLIS)
void Runner::prepare() { bli_thread_set_num_threads(1); }
void Runner::run() {
  float one = 1.0f, zero = 0.0f;
  // BLIS takes a row and a column stride for each operand: row-major is (ld, 1).
  for (int i = 0; i < s_.count; ++i)
    bli_sgemm(s_.trans_a ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, s_.trans_b ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, s_.m,
              s_.n, s_.k, &one, o_.a.data() + i * o_.a_size, lda(), 1, o_.b.data() + i * o_.b_size, ldb(), 1, &zero,
              o_.c.data() + i * o_.c_size, s_.n, 1);
}
#elif defined(GEMM_BENCH_XSMM)
void Runner::prepare() {
  // libxsmm is column-major: row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ, so B goes first and the sizes swap.
  const libxsmm_blasint m = s_.n, n = s_.m, k = s_.k, lda = ldb(), ldb = this->lda(), ldc = s_.n;
  const float alpha = 1.0f, beta = 0.0f;
  const int flags = (s_.trans_b ? LIBXSMM_GEMM_FLAG_TRANS_A : 0) | (s_.trans_a ? LIBXSMM_GEMM_FLAG_TRANS_B : 0);
  kernel_ = libxsmm_smmdispatch(m, n, k, &lda, &ldb, &ldc, &alpha, &beta, &flags, nullptr);
  supported_ = kernel_ != nullptr;
}
void Runner::run() {
  for (int i = 0; i < s_.count; ++i)
    kernel_(o_.b.data() + i * o_.b_size, o_.a.data() + i * o_.a_size, o_.c.data() + i * o_.c_size);
}
#elif defined(GEMM_BENCH_KILN)
void Runner::prepare() {
  kiln::set_num_threads(1);
  gemm_ = {s_.m, s_.n, s_.k, s_.trans_a, s_.trans_b, lda(), ldb(), s_.n};
  kiln::detail::prepare_gemm(gemm_, kiln::DType::float32);  // as the planner does
}
void Runner::run() {
  for (int i = 0; i < s_.count; ++i)
    kiln::detail::gemm(gemm_, o_.a.data() + i * o_.a_size, o_.b.data() + i * o_.b_size, o_.c.data() + i * o_.c_size);
}
#elif defined(GEMM_BENCH_DNNL)
void Runner::prepare() {
  using dims = dnnl::memory::dims;
  using tag = dnnl::memory::data_type;
  const dnnl::memory::dim count = s_.count, m = s_.m, n = s_.n, k = s_.k;
  // One batched matmul primitive: (count, m, k) × (count, k, n); a transposed operand is a strided view.
  const dnnl::memory::desc a_desc(dims{count, m, k}, tag::f32,
                                  s_.trans_a ? dims{m * k, 1, m} : dims{m * k, k, 1});
  const dnnl::memory::desc b_desc(dims{count, k, n}, tag::f32,
                                  s_.trans_b ? dims{k * n, 1, k} : dims{k * n, n, 1});
  const dnnl::memory::desc c_desc(dims{count, m, n}, tag::f32, dims{m * n, n, 1});
  const dnnl::matmul::primitive_desc descriptor(dnnl::matmul::desc(a_desc, b_desc, c_desc), engine_);
  matmul_ = dnnl::matmul(descriptor);
  a_mem_ = dnnl::memory(a_desc, engine_, o_.a.data());
  b_mem_ = dnnl::memory(b_desc, engine_, o_.b.data());
  c_mem_ = dnnl::memory(c_desc, engine_, o_.c.data());
}
void Runner::run() {
  matmul_.execute(stream_, {{DNNL_ARG_SRC, a_mem_}, {DNNL_ARG_WEIGHTS, b_mem_}, {DNNL_ARG_DST, c_mem_}});
  stream_.wait();
}
#endif

// A reference product in double, for a check that the library computed the right thing.
double check(const Shape& s, const Operands& o) {
  double largest = 0;
  for (int i = 0; i < s.count; i += s.count > 4 ? s.count / 4 : 1)
    for (int r = 0; r < s.m; r += 7)
      for (int c = 0; c < s.n; c += 3) {
        double sum = 0;
        for (int p = 0; p < s.k; ++p) {
          const float a = s.trans_a ? o.a[i * o.a_size + p * s.m + r] : o.a[i * o.a_size + r * s.k + p];
          const float b = s.trans_b ? o.b[i * o.b_size + c * s.k + p] : o.b[i * o.b_size + p * s.n + c];
          sum += static_cast<double>(a) * b;
        }
        const double got = o.c[i * o.c_size + static_cast<std::size_t>(r) * s.n + c];
        largest = std::max(largest, std::abs(got - sum));
      }
  return largest;
}

}  // namespace

int main(int argc, char** argv) {
  double min_time = 0.3;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--min-time") == 0) min_time = std::atof(argv[i + 1]);
  for (const Shape& shape : shapes()) {
    Operands operands(shape);
    Runner runner(shape, operands);
    if (!runner.supported()) {
      std::printf("{\"library\":\"%s\",\"shape\":\"%s\",\"supported\":false}\n", GEMM_BENCH_LIBRARY, shape.label);
      continue;
    }
    for (int warm = 0; warm < 3; ++warm) runner.run();
    const double error = check(shape, operands);
    long reps = 0;
    const auto start = std::chrono::steady_clock::now();
    double seconds = 0;
    while (seconds < min_time || reps < 5) {
      runner.run();
      ++reps;
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    const double flop = 2.0 * shape.m * shape.n * shape.k * shape.count * static_cast<double>(reps);
    std::printf("{\"library\":\"%s\",\"shape\":\"%s\",\"m\":%d,\"n\":%d,\"k\":%d,\"count\":%d,\"gflops\":%.3f,"
                "\"us_per_call\":%.3f,\"max_error\":%.2g}\n",
                GEMM_BENCH_LIBRARY, shape.label, shape.m, shape.n, shape.k, shape.count, flop / seconds * 1e-9,
                seconds / static_cast<double>(reps) / shape.count * 1e6, error);
  }
  return 0;
}
