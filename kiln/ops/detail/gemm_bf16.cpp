// bfloat16 products (Keras's bfloat16 and mixed_bfloat16 policies): C = op(A)·op(B) with A and B rounded to bfloat16
// and the sums in float32. See gemm.hpp.
#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <kiln/ops/detail/lane_masks.hpp>
#endif
#if KILN_HAS_DNNL
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif

#include <kiln/core/parallel.hpp>
#include <kiln/ops/detail/gemm.hpp>

namespace kiln::detail {

namespace {
// float32's bits rounded to bfloat16 in the high half: to nearest, ties to even, as vcvtneps2bf16 and ml_dtypes do;
// a NaN stays a (quiet) NaN. Branch-free, so that the loops below vectorize.
inline std::uint32_t rounded_high_half(std::uint32_t bits) {
  const std::uint32_t rounded = bits + 0x7fffu + ((bits >> 16) & 1u);
  const std::uint32_t nan = bits | 0x00400000u;
  return ((bits & 0x7fffffffu) > 0x7f800000u ? nan : rounded) & 0xffff0000u;
}

inline std::uint32_t bits_of(const float* value) {
  std::uint32_t bits;
  std::memcpy(&bits, value, sizeof bits);
  return bits;
}
}  // namespace

std::uint16_t to_bfloat16(float value) { return static_cast<std::uint16_t>(rounded_high_half(bits_of(&value)) >> 16); }

float from_bfloat16(std::uint16_t value) {
  const std::uint32_t bits = std::uint32_t{value} << 16;
  float result;
  std::memcpy(&result, &bits, sizeof result);
  return result;
}

void to_bfloat16(const float* from, std::uint16_t* to, std::int64_t count) {
  for (std::int64_t i = 0; i < count; ++i) to[i] = static_cast<std::uint16_t>(rounded_high_half(bits_of(from + i)) >> 16);
}

float round_to_bfloat16(float value) { return from_bfloat16(to_bfloat16(value)); }

namespace {

void pack_rounded(const float* from, std::int64_t rows, std::int64_t cols, std::int64_t ld, float* to) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* row = from + r * ld;
    float* out = to + r * cols;
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::uint32_t result = rounded_high_half(bits_of(row + c));
      std::memcpy(out + c, &result, sizeof result);
    }
  }
}

// The operands as stored: A is m × k (k × m when transposed), B k × n (n × k).
struct Stored {
  std::int64_t rows, cols;
};
Stored stored_a(const GemmShape& s) { return s.transpose_a ? Stored{s.k, s.m} : Stored{s.m, s.k}; }
Stored stored_b(const GemmShape& s) { return s.transpose_b ? Stored{s.n, s.k} : Stored{s.k, s.n}; }

// Per-thread buffers for the packed operands, grown to the largest product a thread has run and kept.
template <class T>
T* thread_buffer(int which, std::int64_t count) {
  thread_local std::vector<T> buffers[2];
  std::vector<T>& buffer = buffers[which];
  if (static_cast<std::int64_t>(buffer.size()) < count) buffer.resize(static_cast<std::size_t>(count));
  return buffer.data();
}

void rounded_product(const GemmShape& s, const float* a, const float* b, float* c) {
  const Stored sa = stored_a(s), sb = stored_b(s);
  float* pa = thread_buffer<float>(0, sa.rows * sa.cols);
  float* pb = thread_buffer<float>(1, sb.rows * sb.cols);
  pack_rounded(a, sa.rows, sa.cols, s.lda, pa);
  pack_rounded(b, sb.rows, sb.cols, s.ldb, pb);
  GemmShape tight = s;
  tight.lda = sa.cols;
  tight.ldb = sb.cols;
  gemm(tight, pa, pb, c);  // inside a worker: on the calling thread
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// ---- few rows (a token's products in generation) ------------------------------------------------------------------
// C's few rows with each B value rounded to bfloat16 as it is read, in registers: B read once, as a float32 product
// of that size reads it, where packing B for oneDNN would read it, write it and read it again (and oneDNN's kernels
// are slowest there). A's rows are rounded once into a per-thread buffer. AVX-512F only (any CPU with it).
constexpr std::int64_t few_rows_max = 4;

// (GCC 12's headers build some 512-bit results from an undefined vector, which -Wmaybe-uninitialized reports
// wherever they are inlined: a false alarm, silenced for these kernels, as in int8_rows.cpp.)
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// Two ways to round 16 floats to bfloat16 (kept as float32): AVX-512F integer arithmetic (to nearest even, NaN kept
// quiet, as rounded_high_half), or AVX512_BF16's vcvtneps2bf16 and a shift back (3 instructions instead of 7).
struct RoundByIntegers {
  __attribute__((target("avx512f,avx512bw,avx512bf16"))) static inline __m512 apply(__m512 v) {
    const __m512i bits = _mm512_castps_si512(v);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(bits, 16), _mm512_set1_epi32(1));
    const __m512i rounded = _mm512_add_epi32(_mm512_add_epi32(bits, _mm512_set1_epi32(0x7fff)), lsb);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(bits, _mm512_set1_epi32(0x7fffffff)),
                                                  _mm512_set1_epi32(0x7f800000));
    const __m512i chosen = _mm512_mask_or_epi32(rounded, nan, bits, _mm512_set1_epi32(0x00400000));
    return _mm512_castsi512_ps(_mm512_and_si512(chosen, _mm512_set1_epi32(static_cast<int>(0xffff0000u))));
  }
};
struct RoundByBf16 {
  __attribute__((target("avx512f,avx512bw,avx512bf16"))) static inline __m512 apply(__m512 v) {
    const __m256i half = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(v));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
  }
};

// (compiled for AVX512_BF16 so that RoundByBf16 inlines; with RoundByIntegers it runs AVX-512F and BW instructions
// only, on any CPU few_rows_fit admits)
template <int M, class Round>
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void few_rows(const GemmShape& s, const float* ra,
                                                                       const float* b, float* c) {
  if (!s.transpose_b) {
    // B k × n, read row after row as a float32 product streams it: 8 of its rows at a time across all of C's
    // columns, 64 at a time in M × 4 accumulators, the partial sums kept in a per-thread row buffer between them.
    constexpr std::int64_t chunk = 8;
    float* partial = thread_buffer<float>(1, M * s.n);
    for (std::int64_t p0 = 0; p0 < s.k; p0 += chunk) {
      const std::int64_t p1 = std::min(s.k, p0 + chunk);
      for (std::int64_t j0 = 0; j0 < s.n; j0 += 64) {
        __mmask16 mask[4];
        for (int v = 0; v < 4; ++v) mask[v] = lanes_below(s.n - j0 - 16 * v);
        __m512 acc[M][4];
        for (int i = 0; i < M; ++i)
          for (int v = 0; v < 4; ++v)
            acc[i][v] = p0 == 0 ? _mm512_setzero_ps() : _mm512_maskz_loadu_ps(mask[v], partial + i * s.n + j0 + 16 * v);
        for (std::int64_t p = p0; p < p1; ++p) {
          const float* row = b + p * s.ldb + j0;
          __m512 bv[4];
          for (int v = 0; v < 4; ++v) bv[v] = Round::apply(_mm512_maskz_loadu_ps(mask[v], row + 16 * v));
          for (int i = 0; i < M; ++i) {
            const __m512 av = _mm512_set1_ps(ra[i * s.k + p]);
            for (int v = 0; v < 4; ++v) acc[i][v] = _mm512_fmadd_ps(av, bv[v], acc[i][v]);
          }
        }
        for (int i = 0; i < M; ++i)
          for (int v = 0; v < 4; ++v) {
            if (p1 < s.k) {
              _mm512_mask_storeu_ps(partial + i * s.n + j0 + 16 * v, mask[v], acc[i][v]);
              continue;
            }
            float* out = c + i * s.ldc + j0 + 16 * v;
            const __m512 sum = s.accumulate ? _mm512_add_ps(acc[i][v], _mm512_maskz_loadu_ps(mask[v], out)) : acc[i][v];
            _mm512_mask_storeu_ps(out, mask[v], sum);
          }
      }
    }
    return;
  }
  for (std::int64_t j = 0; j < s.n; ++j) {  // B n × k (a tied table read in reverse): one dot product per row of it
    const float* row = b + j * s.ldb;
    __m512 acc[M];
    for (int i = 0; i < M; ++i) acc[i] = _mm512_setzero_ps();
    for (std::int64_t p = 0; p < s.k; p += 16) {
      const __mmask16 mask = lanes_below(s.k - p);
      const __m512 bv = Round::apply(_mm512_maskz_loadu_ps(mask, row + p));
      for (int i = 0; i < M; ++i) acc[i] = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(mask, ra + i * s.k + p), bv, acc[i]);
    }
    for (int i = 0; i < M; ++i) {
      const float sum = _mm512_reduce_add_ps(acc[i]);
      c[i * s.ldc + j] = s.accumulate ? c[i * s.ldc + j] + sum : sum;
    }
  }
}

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

bool few_rows_fit(const GemmShape& s) {
  static const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
  return avx512 && s.m <= few_rows_max && !s.transpose_a;
}

#if KILN_HAS_DNNL
bool dnnl_bf16_native();
#endif

void few_rows_product(const GemmShape& s, const float* a, const float* b, float* c) {
  float* ra = thread_buffer<float>(0, s.m * s.k);
  for (std::int64_t i = 0; i < s.m; ++i)
    for (std::int64_t p = 0; p < s.k; ++p) {
      const std::uint32_t bits = rounded_high_half(bits_of(a + i * s.lda + p));
      std::memcpy(ra + i * s.k + p, &bits, sizeof bits);
    }
  // vcvtneps2bf16 where the CPU has it and oneDNN may use it (DNNL_MAX_CPU_ISA holds both back, for the tests)
#if KILN_HAS_DNNL
  static const bool bf16 = __builtin_cpu_supports("avx512bf16") && dnnl_bf16_native();
#else
  static const bool bf16 = __builtin_cpu_supports("avx512bf16");
#endif
  if (bf16) {
    switch (s.m) {
      case 1: return few_rows<1, RoundByBf16>(s, ra, b, c);
      case 2: return few_rows<2, RoundByBf16>(s, ra, b, c);
      case 3: return few_rows<3, RoundByBf16>(s, ra, b, c);
      default: return few_rows<4, RoundByBf16>(s, ra, b, c);
    }
  }
  switch (s.m) {
    case 1: return few_rows<1, RoundByIntegers>(s, ra, b, c);
    case 2: return few_rows<2, RoundByIntegers>(s, ra, b, c);
    case 3: return few_rows<3, RoundByIntegers>(s, ra, b, c);
    default: return few_rows<4, RoundByIntegers>(s, ra, b, c);
  }
}
#else
bool few_rows_fit(const GemmShape&) { return false; }
void few_rows_product(const GemmShape& s, const float* a, const float* b, float* c) { rounded_product(s, a, b, c); }
#endif

#if KILN_HAS_DNNL
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// vcvtne2ps2bf16: 32 floats a step, rounding to nearest even as to_bfloat16 does, except that it reads float32
// subnormals as zero (as oneDNN's own conversions do). Only called where the CPU has AVX512_BF16 (the oneDNN
// backend), whatever kiln was compiled for.
__attribute__((target("avx512f,avx512bw,avx512bf16"))) void to_bfloat16_avx512(const float* from, std::uint16_t* to,
                                                                                  std::int64_t count) {
  std::int64_t i = 0;
  for (; i + 32 <= count; i += 32) {
    const __m512bh packed = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(from + i + 16), _mm512_loadu_ps(from + i));
    _mm512_storeu_si512(to + i, reinterpret_cast<__m512i>(packed));
  }
  if (i < count) {
    const std::int64_t left = count - i;
    const __mmask16 low = lanes_below(left), high = lanes_below(left - 16);
    const __m512bh packed = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(high, from + i + 16),
                                                _mm512_maskz_loadu_ps(low, from + i));
    _mm512_mask_storeu_epi16(to + i, (__mmask32(high) << 16) | low, reinterpret_cast<__m512i>(packed));
  }
}
#endif

// A rows × cols block of a row-major matrix (rows ld apart), packed tight as bfloat16 (or as float32 rounded to
// bfloat16, for the fallback).
void pack(const float* from, std::int64_t rows, std::int64_t cols, std::int64_t ld, std::uint16_t* to) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  for (std::int64_t r = 0; r < rows; ++r) to_bfloat16_avx512(from + r * ld, to + r * cols, cols);
#else
  for (std::int64_t r = 0; r < rows; ++r) to_bfloat16(from + r * ld, to + r * cols, cols);
#endif
}

// oneDNN's matmul primitive on bfloat16 operands with a float32 C (its brgemm kernels on AVX512_BF16 or AMX), one
// per product shape and thread, made at the thread's first product of that shape and kept with its memory objects
// (whose data handles each call sets), so a call allocates nothing. Run on the calling thread, as dnnl_sgemm.
struct Bf16Primitive {
  dnnl::matmul product;
  dnnl::memory a, b, c, scratch;
  std::vector<unsigned char> scratch_buffer;
};

using Bf16Key = std::tuple<std::int64_t, std::int64_t, std::int64_t, bool, bool, std::int64_t, bool>;

// The thread's oneDNN engine and stream, and its primitives by shape (destroyed before the engine they were made
// on): a null entry is a shape oneDNN refused, or would run only on its reference kernel, which the fallback runs.
struct DnnlContext {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<Bf16Key, std::unique_ptr<Bf16Primitive>> primitives;
};
DnnlContext& dnnl_context() {
  thread_local DnnlContext context;
  return context;
}

Bf16Primitive* make_bf16_primitive(const GemmShape& s, const dnnl::engine& engine);

// The primitive for this shape, made at the thread's first product of it; null where oneDNN has none worth running.
Bf16Primitive* bf16_primitive(const GemmShape& s) {
  DnnlContext& context = dnnl_context();
  const Bf16Key key{s.m, s.n, s.k, s.transpose_a, s.transpose_b, s.ldc, s.accumulate};
  if (auto found = context.primitives.find(key); found != context.primitives.end()) return found->second.get();
  std::unique_ptr<Bf16Primitive> made;
  try {
    made.reset(make_bf16_primitive(s, context.engine));
  } catch (const dnnl::error&) {
    made.reset();
  }
  return context.primitives.emplace(key, std::move(made)).first->second.get();
}

Bf16Primitive* make_bf16_primitive(const GemmShape& s, const dnnl::engine& engine) {
  using dims = dnnl::memory::dims;
  using dt = dnnl::memory::data_type;
  const dnnl::memory::desc a({s.m, s.k}, dt::bf16, s.transpose_a ? dims{1, s.m} : dims{s.k, 1});
  const dnnl::memory::desc b({s.k, s.n}, dt::bf16, s.transpose_b ? dims{1, s.k} : dims{s.n, 1});
  const dnnl::memory::desc c({s.m, s.n}, dt::f32, dims{s.ldc, 1});
  dnnl::primitive_attr attributes;
  attributes.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (s.accumulate) {
    dnnl::post_ops sum;
    sum.append_sum(1.0f);
    attributes.set_post_ops(sum);
  }
  // Made for the one OpenMP thread it runs on (oneDNN blocks a product for the threads it sees when it makes it).
  const int threads = omp_get_max_threads();
  if (threads != 1) omp_set_num_threads(1);
  struct Restore {
    int threads;
    ~Restore() {
      if (threads != 1) omp_set_num_threads(threads);
    }
  } restore{threads};
  const dnnl::matmul::primitive_desc description(dnnl::matmul::desc(a, b, c), attributes, engine);
  const std::string implementation = description.impl_info_str();
  if (implementation.rfind("ref", 0) == 0) return nullptr;  // oneDNN's reference loop: the fallback is faster
  auto made = std::make_unique<Bf16Primitive>();
  made->product = dnnl::matmul(description);
  made->a = dnnl::memory(a, engine, DNNL_MEMORY_NONE);
  made->b = dnnl::memory(b, engine, DNNL_MEMORY_NONE);
  made->c = dnnl::memory(c, engine, DNNL_MEMORY_NONE);
  made->scratch_buffer.resize(std::max<std::size_t>(description.scratchpad_desc().get_size(), 1));
  made->scratch = dnnl::memory(description.scratchpad_desc(), engine, made->scratch_buffer.data());
  return made.release();
}

// False (nothing written) where oneDNN has no primitive for the shape.
bool dnnl_product(const GemmShape& s, const float* a, const float* b, float* c) {
  Bf16Primitive* primitive = bf16_primitive(s);
  if (primitive == nullptr) return false;
  const Stored sa = stored_a(s), sb = stored_b(s);
  std::uint16_t* pa = thread_buffer<std::uint16_t>(0, sa.rows * sa.cols);
  std::uint16_t* pb = thread_buffer<std::uint16_t>(1, sb.rows * sb.cols);
  pack(a, sa.rows, sa.cols, s.lda, pa);
  pack(b, sb.rows, sb.cols, s.ldb, pb);
  primitive->a.set_data_handle(pa);
  primitive->b.set_data_handle(pb);
  primitive->c.set_data_handle(c);
  dnnl::stream& stream = dnnl_context().stream;
  const int threads = omp_get_max_threads();
  if (threads != 1) omp_set_num_threads(1);
  // The C API takes the arguments as an array: the C++ one's std::unordered_map would allocate every call.
  const dnnl_exec_arg_t arguments[] = {{DNNL_ARG_SRC, primitive->a.get()},
                                       {DNNL_ARG_WEIGHTS, primitive->b.get()},
                                       {DNNL_ARG_DST, primitive->c.get()},
                                       {DNNL_ARG_SCRATCHPAD, primitive->scratch.get()}};
  const dnnl_status_t status = dnnl_primitive_execute(primitive->product.get(), stream.get(), 4, arguments);
  if (threads != 1) omp_set_num_threads(threads);
  return status == dnnl_success;  // (else the fallback writes all of C again)
}

// oneDNN runs bfloat16 products natively only with AVX512_BF16 (or AMX), which it must be allowed to use
// (DNNL_MAX_CPU_ISA may hold it below); elsewhere it would emulate them, or run its reference kernel, slower than
// the float32 product of the rounded operands.
bool dnnl_bf16_native() {
  static const bool native = [] {
    const unsigned isa = static_cast<unsigned>(dnnl_get_effective_cpu_isa());
    const unsigned needed = static_cast<unsigned>(dnnl_cpu_isa_avx512_core_bf16);
    if ((isa & needed) != needed) return false;
    const GemmShape probe{16, 16, 16, false, false, 16, 16, 16};  // and Debian's oneDNN makes a primitive here
    return bf16_primitive(probe) != nullptr;
  }();
  return native;
}
#endif

void run_bf16(Bf16GemmBackend backend, const GemmShape& s, const float* a, const float* b, float* c) {
  if (backend == Bf16GemmBackend::few_rows) return few_rows_fit(s) ? few_rows_product(s, a, b, c) : rounded_product(s, a, b, c);
#if KILN_HAS_DNNL
  // Where oneDNN has no primitive for the shape (or fails to run it), the fallback gives the same product.
  if (backend == Bf16GemmBackend::onednn && dnnl_bf16_native() && dnnl_product(s, a, b, c)) return;
#else
  (void)backend;
#endif
  rounded_product(s, a, b, c);
}

}  // namespace

Bf16GemmBackend bf16_gemm_backend() {
#if KILN_HAS_DNNL
  if (dnnl_bf16_native()) return Bf16GemmBackend::onednn;
#endif
  return Bf16GemmBackend::rounded;
}

void gemm_bf16_with(Bf16GemmBackend backend, const GemmShape& s, const float* a, const float* b, float* c) {
  if (s.m <= 0 || s.n <= 0 || s.k <= 0) return gemm(s, a, b, c);  // empty: C zeroed (or left), as gemm does
  run_bf16(backend, s, a, b, c);
}

void gemm_bf16(const GemmShape& s, const float* a, const float* b, float* c) {
  if (s.m <= 0 || s.n <= 0 || s.k <= 0) return gemm(s, a, b, c);
  // Split over kiln's threads as gemm splits float32 products; each worker packs its own slice of the operands.
  const Bf16GemmBackend backend = bf16_gemm_backend();
  split_product(
      s, a, b, c,
      [](const GemmShape& slice, const float* pa, const float* pb, float* pc, const void* context) {
        // (a few rows, as a token's products: rounded as read, B once)
        run_bf16(few_rows_fit(slice) ? Bf16GemmBackend::few_rows : *static_cast<const Bf16GemmBackend*>(context), slice,
                 pa, pb, pc);
      },
      &backend);
}

}  // namespace kiln::detail
