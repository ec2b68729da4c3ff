// gemm_bench: single-threaded GFLOP/s of the matrix products kiln's benchmark models run, per GEMM library:
// OpenBLAS, BLIS, libxsmm (JIT kernels for small products), oneDNN (its matmul primitive and its dnnl_sgemm), and
// kiln's own detail::gemm (the library it picks per shape, with its per-call work). The libraries export the same BLAS symbols, so this file
// is built once per library (GEMM_BENCH_<LIBRARY>), each binary linking one: gemm_bench_openblas,
// gemm_bench_blis, gemm_bench_xsmm, gemm_bench_dnnl, gemm_bench_kiln.
//
//   gemm_bench_<library> [--min-time S] [--only TEXT]     one JSON line per shape (whose label contains TEXT)
//   gemm_bench_kiln [--backend openblas|libxsmm|libxsmm_tb|onednn_sgemm]   every product on that backend of kiln's
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
#include <cstdint>
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
  // The stored operands' leading dimensions (0: packed, the row's width) and whether the product adds to C
  // (BLAS's beta = 1), as the benchmark models run them: a head's slice of a wider projection, a slice of C.
  int lda = 0, ldb = 0, ldc = 0;
  bool accumulate = false;
  // All `count` products multiply by the same B (a recurrence's weights, step after step), not one B each.
  bool shared_b = false;

  int a_rows() const { return trans_a ? k : m; }
  int a_columns() const { return trans_a ? m : k; }
  int b_rows() const { return trans_b ? n : k; }
  int b_columns() const { return trans_b ? k : n; }
  int stored_lda() const { return lda > 0 ? lda : a_columns(); }
  int stored_ldb() const { return ldb > 0 ? ldb : b_columns(); }
  int stored_ldc() const { return ldc > 0 ? ldc : n; }
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
      // The benchmark models' products as kiln runs them (each product of a forward and a train step at 1 thread,
      // traced from detail::gemm, with the leading dimensions and accumulation it was given): the ones that carry
      // each row's work. A product split over threads runs as slices of these.
      {"seed_dpa scores q.kT", 150, 150, 512, false, true, 10, 512, 512, 160},
      {"seed_dpa context p.v", 150, 512, 150, false, false, 10, 160, 512, 512},
      {"seed_mha scores (head of 64)", 150, 150, 64, false, true, 80, 512, 512, 160},
      {"seed_mha context (head of 64)", 150, 64, 150, false, false, 80, 160, 512, 512},
      {"seed_mha d_v pT.dc (head of 64)", 150, 64, 150, true, false, 80, 160, 512, 512},
      {"seed_mha d_x dy.wT", 1500, 512, 512, false, true, 1},
      {"seed_mha weight grad xT.dy", 512, 512, 1500, true, false, 1},
      {"char_gpt q/k/v/out 768x128 -> 128", 768, 128, 128, false, false, 1},
      {"char_gpt d_x dy.wT 128 -> 128", 768, 128, 128, false, true, 1},
      {"char_gpt weight grad 128x128", 128, 128, 768, true, false, 1},
      {"char_gpt feed-forward 128 -> 512", 768, 512, 128, false, false, 1},
      {"char_gpt feed-forward 512 -> 128", 768, 128, 512, false, false, 1},
      {"char_gpt d_h dy.wT 512 -> 128", 768, 512, 128, false, true, 1},
      {"char_gpt d_x dy.wT 128 -> 512", 768, 128, 512, false, true, 1},
      {"char_gpt weight grad 128x512", 128, 512, 768, true, false, 1},
      {"char_gpt weight grad 512x128", 512, 128, 768, true, false, 1},
      {"char_gpt scores (head of 32)", 64, 64, 32, false, true, 48, 128, 128, 64},
      {"char_gpt context (head of 32)", 64, 32, 64, false, false, 48, 64, 128, 128},
      {"char_gpt tied head 128 -> 65", 768, 65, 128, false, true, 1},
      {"bert projection 768 -> 768", 1024, 768, 768, false, false, 1},
      {"bert feed-forward 768 -> 3072", 1024, 3072, 768, false, false, 1},
      {"bert feed-forward 3072 -> 768", 1024, 768, 3072, false, false, 1},
      {"bert scores (head of 64)", 128, 128, 64, false, true, 96, 768, 768, 128},
      {"bert context (head of 64)", 128, 64, 128, false, false, 96, 128, 768, 768},
      {"lstm step [x|h].[W;U] (64 rows)", 64, 512, 160, false, false, 100, 0, 0, 0, false, true},
      {"lstm d_h dg.UT (64 rows)", 64, 128, 512, false, false, 100, 0, 0, 0, true, true},
      {"lstm d_U [x|h]T.dg (64 rows)", 128, 512, 64, true, false, 100, 0, 0, 0, true},
      {"lstm d_x dg.WT (6400 rows)", 6400, 32, 512, false, true, 1},
      {"lstm d_W xT.dg", 32, 512, 6400, true, false, 1},
      {"rnn lstm step (32 rows)", 32, 512, 160, false, false, 100, 0, 0, 0, false, true},
      {"rnn gru step (32 rows)", 32, 192, 64, false, false, 100, 0, 0, 0, false, true},
      {"lstm step (half its columns)", 64, 256, 160, false, false, 100, 0, 512, 512, false, true},
      {"cnn_small conv2 im2col.w", 1815, 64, 288, false, false, 4},
      {"cnn_small conv2 d_cols dy.wT", 1815, 288, 64, false, true, 4},
      {"cnn_small conv2 d_w colsT.dy", 288, 64, 1815, true, false, 4, 0, 0, 0, true},
      {"cnn_small conv1 im2col.w", 43264, 32, 9, false, false, 1},
      {"tcn conv im2col.w", 1536, 64, 320, false, false, 4},
      {"tcn d_cols dy.wT", 1536, 320, 64, false, true, 4},
      {"resnet50 3x3 conv 256 (slice)", 196, 256, 2304, false, false, 4},
      {"resnet50 3x3 conv 128 (slice)", 784, 128, 1152, false, false, 4},
      {"resnet50 3x3 conv 64 (slice)", 3136, 64, 576, false, false, 4},
      {"resnet50 3x3 conv 512 (slice)", 98, 512, 4608, false, false, 4},
      {"resnet50 1x1 conv 256 -> 1024", 1568, 1024, 256, false, false, 1},
      {"resnet50 1x1 conv 1024 -> 256", 1568, 256, 1024, false, false, 1},
      {"resnet50 1x1 conv 128 -> 512", 6272, 512, 128, false, false, 1},
      {"resnet50 1x1 conv 64 -> 256", 25088, 256, 64, false, false, 1},
      {"resnet50 stem 7x7 (slice)", 12544, 64, 147, false, false, 1},
      {"resnet50 1x1 conv 512 -> 2048", 392, 2048, 512, false, false, 1},
      {"resnet50 1x1 conv d_cols dy.wT", 1568, 256, 1024, false, true, 1},
      {"resnet50 1x1 conv d_w colsT.dy", 256, 1024, 1568, true, false, 1},
      {"gpt2 prompt projection 128x768", 128, 768, 768, false, false, 1},
      {"gpt2 token projection 1x768", 1, 768, 768, false, false, 12},
      {"gpt2 token feed-forward 768 -> 3072", 1, 3072, 768, false, false, 4},
      {"gpt2 token feed-forward 3072 -> 768", 1, 768, 3072, false, false, 4},
      {"gpt2 token tied head 768 -> 50257", 1, 50257, 768, false, true, 1},
      {"char_gpt token projection 1x128", 1, 128, 128, false, false, 16},
      {"char_gpt token feed-forward 128 -> 512", 1, 512, 128, false, false, 16},
  };
  return table;
}

// The operands of `count` products, one after the other; each matrix row-major as op() says it is stored.
struct Operands {
  std::vector<float> a, b, c;
  std::size_t a_size, b_size, c_size;
  std::size_t b_step;  // from one product's B to the next's: 0 when they share it
  explicit Operands(const Shape& s)
      : a_size(static_cast<std::size_t>(s.a_rows()) * s.stored_lda()),
        b_size(static_cast<std::size_t>(s.b_rows()) * s.stored_ldb()),
        c_size(static_cast<std::size_t>(s.m) * s.stored_ldc()),
        b_step(s.shared_b ? 0 : b_size) {
    a.resize(a_size * s.count);
    b.resize(b_size * (s.shared_b ? 1 : s.count));
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
  int lda() const { return s_.stored_lda(); }
  int ldb() const { return s_.stored_ldb(); }
  int ldc() const { return s_.stored_ldc(); }
  float beta() const { return s_.accumulate ? 1.0f : 0.0f; }
#if defined(GEMM_BENCH_XSMM)
  libxsmm_smmfunction kernel_ = nullptr;
#elif defined(GEMM_BENCH_KILN)
 public:
  kiln::detail::GemmShape gemm_{};

 private:
#elif defined(GEMM_BENCH_DNNL)
  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};
  dnnl::matmul matmul_;
  dnnl::memory a_mem_, b_mem_, c_mem_;
  std::vector<std::uint16_t> a_bf16_, b_bf16_;
#endif
};

#if defined(GEMM_BENCH_OPENBLAS)
void Runner::prepare() { openblas_set_num_threads(1); }
void Runner::run() {
  for (int i = 0; i < s_.count; ++i)
    cblas_sgemm(CblasRowMajor, s_.trans_a ? CblasTrans : CblasNoTrans, s_.trans_b ? CblasTrans : CblasNoTrans, s_.m,
                s_.n, s_.k, 1.0f, o_.a.data() + i * o_.a_size, lda(), o_.b.data() + i * o_.b_step, ldb(), beta(),
                o_.c.data() + i * o_.c_size, ldc());
}
#elif defined(GEMM_BENCH_BLIS)
void Runner::prepare() { bli_thread_set_num_threads(1); }
void Runner::run() {
  float one = 1.0f, b = beta();
  // BLIS takes a row and a column stride for each operand: row-major is (ld, 1).
  for (int i = 0; i < s_.count; ++i)
    bli_sgemm(s_.trans_a ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, s_.trans_b ? BLIS_TRANSPOSE : BLIS_NO_TRANSPOSE, s_.m,
              s_.n, s_.k, &one, o_.a.data() + i * o_.a_size, lda(), 1, o_.b.data() + i * o_.b_step, ldb(), 1, &b,
              o_.c.data() + i * o_.c_size, ldc(), 1);
}
#elif defined(GEMM_BENCH_XSMM)
void Runner::prepare() {
  // libxsmm is column-major: row-major C = A·B is column-major Cᵀ = Bᵀ·Aᵀ, so B goes first and the sizes swap.
  const libxsmm_blasint m = s_.n, n = s_.m, k = s_.k, lda = ldb(), ldb = this->lda(), ldc = this->ldc();
  const float alpha = 1.0f, beta = this->beta();
  const int flags = (s_.trans_b ? LIBXSMM_GEMM_FLAG_TRANS_A : 0) | (s_.trans_a ? LIBXSMM_GEMM_FLAG_TRANS_B : 0);
  kernel_ = libxsmm_smmdispatch(m, n, k, &lda, &ldb, &ldc, &alpha, &beta, &flags, nullptr);
  supported_ = kernel_ != nullptr;
}
void Runner::run() {
  for (int i = 0; i < s_.count; ++i)
    kernel_(o_.b.data() + i * o_.b_step, o_.a.data() + i * o_.a_size, o_.c.data() + i * o_.c_size);
}
#elif defined(GEMM_BENCH_KILN)
void Runner::prepare() {
  kiln::set_num_threads(1);
  gemm_ = {s_.m, s_.n, s_.k, s_.trans_a, s_.trans_b, lda(), ldb(), ldc(), s_.accumulate};
  kiln::detail::prepare_gemm(gemm_, kiln::DType::float32);  // as the planner does
}
// --backend NAME runs every product on that backend of kiln's (kiln::detail::gemm_with), whatever it would choose.
int forced_backend = -1;
// --bf16 runs every product through detail::gemm_bf16 (operands rounded to bfloat16, float32 sums), as a
// mixed_bfloat16 layer does: its packing of the float32 operands included.
// --bf16-rounded: every one on the fallback (the float32 product of the rounded operands).
bool kiln_bf16 = false, kiln_bf16_rounded = false;
void Runner::run() {
  if (kiln_bf16_rounded) {
    for (int i = 0; i < s_.count; ++i)
      kiln::detail::gemm_bf16_with(kiln::detail::Bf16GemmBackend::rounded, gemm_, o_.a.data() + i * o_.a_size,
                                   o_.b.data() + i * o_.b_step, o_.c.data() + i * o_.c_size);
    return;
  }
  if (kiln_bf16) {
    for (int i = 0; i < s_.count; ++i)
      kiln::detail::gemm_bf16(gemm_, o_.a.data() + i * o_.a_size, o_.b.data() + i * o_.b_step,
                              o_.c.data() + i * o_.c_size);
    return;
  }
  if (forced_backend >= 0) {
    for (int i = 0; i < s_.count; ++i)
      kiln::detail::gemm_with(static_cast<kiln::detail::GemmBackend>(forced_backend), gemm_, o_.a.data() + i * o_.a_size,
                              o_.b.data() + i * o_.b_step, o_.c.data() + i * o_.c_size);
    return;
  }
  for (int i = 0; i < s_.count; ++i)
    kiln::detail::gemm(gemm_, o_.a.data() + i * o_.a_size, o_.b.data() + i * o_.b_step, o_.c.data() + i * o_.c_size);
}
#elif defined(GEMM_BENCH_DNNL)
// Two ways into oneDNN: its matmul primitive (one batched primitive for the shape's `count` products, made once,
// as PyTorch 2 runs a Linear through ideep), and its BLAS-like dnnl_sgemm (no primitive to make). --bf16: the
// primitive on operands already in bfloat16 (converted once, before timing), float32 result: the ceiling of a
// bfloat16 product that had nothing to convert.
bool dnnl_use_sgemm = false;
bool use_bf16_operands = false;
void Runner::prepare() {
  if (dnnl_use_sgemm) return;
  using dims = dnnl::memory::dims;
  using tag = dnnl::memory::data_type;
  const tag operand_type = use_bf16_operands ? tag::bf16 : tag::f32;
  const dnnl::memory::dim count = s_.count, m = s_.m, n = s_.n, k = s_.k, a_size = o_.a_size, b_size = o_.b_size,
                          c_size = o_.c_size, lda = this->lda(), ldb = this->ldb(), ldc = this->ldc();
  // (count, m, k) × (count, k, n) into (count, m, n); a transposed or wider-stored operand is a strided view.
  const dnnl::memory::desc a_desc(dims{count, m, k}, operand_type,
                                  s_.trans_a ? dims{a_size, 1, lda} : dims{a_size, lda, 1});
  const dnnl::memory::desc b_desc(dims{s_.shared_b ? 1 : count, k, n}, operand_type,
                                  s_.trans_b ? dims{b_size, 1, ldb} : dims{b_size, ldb, 1});
  const dnnl::memory::desc c_desc(dims{count, m, n}, tag::f32, dims{c_size, ldc, 1});
  dnnl::primitive_attr attr;
  if (s_.accumulate) {
    dnnl::post_ops ops;
    ops.append_sum(1.0f);
    attr.set_post_ops(ops);
  }
  const dnnl::matmul::primitive_desc descriptor(dnnl::matmul::desc(a_desc, b_desc, c_desc), attr, engine_);
  matmul_ = dnnl::matmul(descriptor);
  if (use_bf16_operands) {  // the operands in bfloat16, rounded to nearest even, made once
    auto convert = [](const std::vector<float>& from, std::vector<std::uint16_t>& to) {
      to.resize(from.size());
      for (std::size_t i = 0; i < from.size(); ++i) {
        std::uint32_t bits;
        std::memcpy(&bits, &from[i], 4);
        to[i] = static_cast<std::uint16_t>((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
      }
    };
    convert(o_.a, a_bf16_);
    convert(o_.b, b_bf16_);
    a_mem_ = dnnl::memory(a_desc, engine_, a_bf16_.data());
    b_mem_ = dnnl::memory(b_desc, engine_, b_bf16_.data());
  } else {
    a_mem_ = dnnl::memory(a_desc, engine_, o_.a.data());
    b_mem_ = dnnl::memory(b_desc, engine_, o_.b.data());
  }
  c_mem_ = dnnl::memory(c_desc, engine_, o_.c.data());
}
void Runner::run() {
  if (dnnl_use_sgemm) {
    for (int i = 0; i < s_.count; ++i)
      dnnl_sgemm(s_.trans_a ? 'T' : 'N', s_.trans_b ? 'T' : 'N', s_.m, s_.n, s_.k, 1.0f, o_.a.data() + i * o_.a_size,
                 lda(), o_.b.data() + i * o_.b_step, ldb(), beta(), o_.c.data() + i * o_.c_size, ldc());
    return;
  }
  matmul_.execute(stream_, {{DNNL_ARG_SRC, a_mem_}, {DNNL_ARG_WEIGHTS, b_mem_}, {DNNL_ARG_DST, c_mem_}});
  stream_.wait();
}
#endif

// A reference product in double, for a check that the library computed the right thing (C zeroed, one run).
double check(const Shape& s, const Operands& o) {
  const std::size_t lda = s.stored_lda(), ldb = s.stored_ldb(), ldc = s.stored_ldc();
  double largest = 0;
  for (int i = 0; i < s.count; i += s.count > 4 ? s.count / 4 : 1)
    for (int r = 0; r < s.m; r += 7)
      for (int c = 0; c < s.n; c += 3) {
        double sum = 0;
        for (int p = 0; p < s.k; ++p) {
          const float a = s.trans_a ? o.a[i * o.a_size + p * lda + r] : o.a[i * o.a_size + r * lda + p];
          const float b = s.trans_b ? o.b[i * o.b_step + c * ldb + p] : o.b[i * o.b_step + p * ldb + c];
          sum += static_cast<double>(a) * b;
        }
        const double got = o.c[i * o.c_size + r * ldc + c];
        largest = std::max(largest, std::abs(got - sum));
      }
  return largest;
}

#if defined(GEMM_BENCH_KILN)
const char* const backend_names[] = {"none", "openblas", "libxsmm", "libxsmm_tb", "onednn_sgemm"};
#endif

// One library's JSON line per shape (those whose label contains `only`).
void run_library(const char* library, double min_time, const std::string& only) {
  for (const Shape& shape : shapes()) {
    if (!only.empty() && std::string(shape.label).find(only) == std::string::npos) continue;
    Operands operands(shape);
    Runner runner(shape, operands);
    if (!runner.supported()) {
      std::printf("{\"library\":\"%s\",\"shape\":\"%s\",\"supported\":false}\n", library, shape.label);
      continue;
    }
    runner.run();
    const double error = check(shape, operands);
    for (int warm = 0; warm < 3; ++warm) runner.run();
    long reps = 0;
    const auto start = std::chrono::steady_clock::now();
    double seconds = 0;
    while (seconds < min_time || reps < 5) {
      runner.run();
      ++reps;
      seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    const double flop = 2.0 * shape.m * shape.n * shape.k * shape.count * static_cast<double>(reps);
    const char* backend = "";  // where kiln's detail::gemm ran it
#if defined(GEMM_BENCH_KILN)
    backend = backend_names[forced_backend >= 0 ? forced_backend
                                                : static_cast<int>(kiln::detail::gemm_backend(runner.gemm_,
                                                                                               kiln::DType::float32))];
#endif
    std::printf("{\"library\":\"%s\",\"shape\":\"%s\",\"m\":%d,\"n\":%d,\"k\":%d,\"count\":%d,\"gflops\":%.3f,"
                "\"us_per_call\":%.3f,\"max_error\":%.2g,\"backend\":\"%s\"}\n",
                library, shape.label, shape.m, shape.n, shape.k, shape.count, flop / seconds * 1e-9,
                seconds / static_cast<double>(reps) / shape.count * 1e6, error, backend);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  double min_time = 0.3;
  std::string only;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--min-time") == 0) min_time = std::atof(argv[i + 1]);
    if (std::strcmp(argv[i], "--only") == 0) only = argv[i + 1];
#if defined(GEMM_BENCH_KILN)
    if (std::strcmp(argv[i], "--backend") == 0)
      for (int b = 0; b < 5; ++b)
        if (std::strcmp(argv[i + 1], backend_names[b]) == 0) forced_backend = b;
#endif
  }
  bool bf16 = false;
  for (int i = 1; i < argc; ++i) bf16 = bf16 || std::strcmp(argv[i], "--bf16") == 0;
#if defined(GEMM_BENCH_KILN)
  kiln_bf16 = bf16;
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--bf16-rounded") == 0) kiln_bf16_rounded = bf16 = true;
#elif defined(GEMM_BENCH_DNNL)
  use_bf16_operands = bf16;
#endif
  run_library(bf16 ? GEMM_BENCH_LIBRARY "_bf16" : GEMM_BENCH_LIBRARY, min_time, only);
#if defined(GEMM_BENCH_DNNL)
  if (bf16) return 0;
  dnnl_use_sgemm = true;
  run_library("onednn_sgemm", min_time, only);
#endif
  return 0;
}
