// Fused scaled dot-product attention: softmax(scale·q·kᵀ, masked)·v.
// - A long sequence never holds its T×S scores. The forward streams over key blocks with an online softmax (a
//   running max and sum per query row) and keeps only each row's log-sum-exp; the backward recomputes the
//   probabilities block by block from q, k and that log-sum-exp (FlashAttention-2's loop order: key blocks
//   outside, query blocks inside).
// - A short one, one block pair per head (T ≤ 256 and S ≤ 256), keeps its probabilities: T×S per head, what the
//   unfused composition holds too. Its backward then skips the recompute, one of its five products and all of
//   its exps, and its forward needs no online rescaling (mql5_block, 40 steps: the backward 1.3× faster). In a
//   plan without the backward nobody reads them (KernelContext::read_output_elements), and they stay in scratch.
//
// Nodes are single-output, so the forward is two nodes. kiln>FusedAttention computes a flat "state" buffer laid
// out as [output (..., T, dv) | log-sum-exp (..., T) | the kept probabilities (..., T, S padded), if kept];
// kiln>FusedAttentionOutput is an alias of its head with the output's shape, and carries the backward rule. The
// backward is likewise one kernel writing [dq | dk | dv], and three views of it (FusedAttentionGradPart, aliases
// at an offset).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <kiln/core/attributes.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/op.hpp>
#include <kiln/core/parallel.hpp>
#include <kiln/ops/detail/attention_rows.hpp>
#include <kiln/ops/detail/flat_parts.hpp>
#include <kiln/ops/detail/gemm.hpp>
#include <kiln/ops/detail/row_sums.hpp>  // (xsimd, for stream_copy's AVX-512 stores)
#include <kiln/ops/ops.hpp>

namespace kiln {
namespace {

using detail::row_dots;

// Block sizes (rows of q × rows of k). A 256×256 score block is 256 KB in float, so a block pair's
// scores and their gradient stay in L2 (1 MB a core here). Measured (float32, 1 thread): at d = 32 and 64,
// query blocks of 64, 128 and 256 are within noise of each other; at d = 512 (seed_dpa) the larger GEMMs
// of one 150-row block are 10 % faster; 32×64 blocks are 20–35 % slower (more, smaller GEMM calls).
constexpr std::int64_t max_query_block = 256;
constexpr std::int64_t key_block = 256;

constexpr int max_leading_rank = Shape::max_rank - 2;

// Input positions of the three ops that take q, k and v.
struct ForwardInputs {  // FusedAttention
  static constexpr int q = 0, k = 1, v = 2, mask = 3;
};
struct OutputInputs {  // FusedAttentionOutput
  static constexpr int state = 0, q = 1, k = 2, v = 3, mask = 4;
};
struct GradInputs {  // FusedAttentionGrad
  static constexpr int q = 0, k = 1, v = 2, state = 3, output_grad = 4, mask = 5;
};

// ---- dimensions ---------------------------------------------------------------------------------------

struct Dims {
  std::int64_t heads = 1;  // the product of the leading dimensions: independent attention problems
  std::int64_t queries = 0, keys = 0, depth = 0, value_depth = 0;
  std::int64_t query_block = 1;  // query rows per block
  // Heads interleaved within each row (the heads_last layout, q (..., T, H, d)): H, else 1. Head n's rows
  // of a (rows × width) operand start at offset(n, rows, width), ld(width) apart.
  std::int64_t interleave = 1;

  std::int64_t offset(std::int64_t n, std::int64_t rows, std::int64_t width) const {
    return n / interleave * rows * interleave * width + n % interleave * width;
  }
  std::int64_t ld(std::int64_t width) const { return interleave * width; }
};

// q, k, v and the output as (..., H, length, depth) whatever their layout: for heads_last, (..., length,
// H, depth) with its length and heads axes swapped. Shapes, masks and errors are all about this view.
// Axis `axis` of the view is axis stored_axis(...) of the stored shape (kernels read shapes through it:
// a Shape copy would allocate in every step).
int stored_axis(int axis, int rank, bool heads_last) {
  if (!heads_last || rank < 3) return axis;
  return axis == rank - 3 ? rank - 2 : axis == rank - 2 ? rank - 3 : axis;
}

std::int64_t view_dim(const Shape& stored, int axis, bool heads_last) {
  if (axis < 0) axis += stored.rank();
  return stored[stored_axis(axis, stored.rank(), heads_last)];
}

Shape heads_first(const Shape& shape, bool heads_last) {
  if (!heads_last || shape.rank() < 3) return shape;
  std::vector<std::int64_t> dims = shape.dims();
  std::swap(dims[dims.size() - 3], dims[dims.size() - 2]);
  return Shape(std::move(dims));
}

// Query rows per block: the queries split evenly into blocks of at most max_query_block rows, so a short
// sequence is one block (one GEMM per key block: seed_dpa, T = 150 and d = 512, ran 10 % faster than in
// blocks of 64) and a long one has no ragged last block.
std::int64_t query_block_of(std::int64_t queries) {
  const std::int64_t blocks = std::max<std::int64_t>(1, (queries + max_query_block - 1) / max_query_block);
  return std::max<std::int64_t>(1, (queries + blocks - 1) / blocks);
}

Dims dims_of(const Shape& q, const Shape& v, bool heads_last) {
  Dims dims;
  if (heads_last) dims.interleave = view_dim(q, -3, true);
  for (int axis = 0; axis + 2 < q.rank(); ++axis) dims.heads *= view_dim(q, axis, heads_last);
  dims.queries = view_dim(q, -2, heads_last);
  dims.depth = q.dim(-1);
  dims.keys = view_dim(v, -2, heads_last);
  dims.value_depth = v.dim(-1);
  dims.query_block = query_block_of(dims.queries);
  return dims;
}

struct Blocks {
  std::int64_t queries, keys;
};

// A sequence that is one block pair per head (T ≤ max_query_block, S ≤ key_block) keeps its probabilities in
// the state (see the top of the file): T × score_width(S) per head, as many as the unfused composition holds.
bool keeps_probabilities(std::int64_t queries, std::int64_t keys) {
  return queries > 0 && keys > 0 && queries <= max_query_block && keys <= key_block;
}
bool keeps_probabilities(const Dims& dims) { return keeps_probabilities(dims.queries, dims.keys); }

Blocks blocks_of(const Dims& dims) {
  return {std::min(dims.queries, dims.query_block), std::min(dims.keys, key_block)};
}

std::int64_t query_blocks(const Dims& dims) { return (dims.queries + dims.query_block - 1) / dims.query_block; }

// How many workers' scratch the plan gave a kernel: its workspace holds that many copies of one worker's.
int slots(const KernelContext& context, std::size_t bytes_per_worker) {
  if (bytes_per_worker == 0) return 1;
  return static_cast<int>(std::max<std::size_t>(1, context.workspace_bytes / bytes_per_worker));
}

// Workspace regions start on 64-byte boundaries (16 elements of either dtype).
std::int64_t padded(std::int64_t count) { return (count + 15) / 16 * 16; }

// Where each head's mask starts, for a mask broadcast to (..., T, S) NumPy-style: a stride of 0 along
// the axes (leading, or the query axis) where the mask has size 1.
struct MaskLayout {
  int leading_rank = 0;
  std::array<std::int64_t, max_leading_rank> leading_dims{};
  std::array<std::int64_t, max_leading_rank> leading_strides{};
  std::int64_t row_stride = 0;

  std::int64_t offset(std::int64_t head) const {
    std::int64_t offset = 0;
    for (int axis = leading_rank - 1; axis >= 0; --axis) {
      const auto a = static_cast<std::size_t>(axis);
      offset += head % leading_dims[a] * leading_strides[a];
      head /= leading_dims[a];
    }
    return offset;
  }
};

MaskLayout mask_layout(const Shape& q, const Shape& mask, bool heads_last) {
  MaskLayout layout;
  layout.leading_rank = q.rank() - 2;
  const int shift = q.rank() - mask.rank();
  std::int64_t stride = mask.dim(-1);
  if (mask.rank() >= 2) {
    layout.row_stride = mask.dim(-2) == 1 ? 0 : stride;
    stride *= mask.dim(-2);
  }
  for (int axis = layout.leading_rank - 1; axis >= 0; --axis) {
    const auto a = static_cast<std::size_t>(axis);
    layout.leading_dims[a] = view_dim(q, axis, heads_last);
    const int mask_axis = axis - shift;
    if (mask_axis < 0) continue;
    layout.leading_strides[a] = mask[mask_axis] == 1 ? 0 : stride;
    stride *= mask[mask_axis];
  }
  return layout;
}

// ---- row kernels: kiln/ops/detail/isa/attention_rows.inl, dispatched by instruction set (isa.hpp) ----------

template <class T>
constexpr T minus_infinity = -std::numeric_limits<T>::infinity();

// ---- GEMM on blocks -------------------------------------------------------------------------------------

// The products of one (query block of `rows`, key block of `keys`) pair, as C = op(A)·op(B) on row-major
// blocks. q, k, v and the output (and their gradients) are read in place, their rows dims.ld(...) apart; the
// score blocks p, dP and dS have rows score_width(keys) apart. The kernels run them and prepare_products makes
// their GEMM kernels at planning: one table for both.
struct BlockProducts {
  detail::GemmShape scores;       // p = q·kᵀ                                   (rows × keys, inner d)
  detail::GemmShape output;       // out += p·v                                 (rows × dv, inner keys)
  detail::GemmShape value_grad;   // dv += pᵀ·dO                                (keys × dv, inner rows)
  detail::GemmShape scores_grad;  // dP = dO·vᵀ                                 (rows × keys, inner dv)
  detail::GemmShape query_grad;   // dq += dS·k                                 (rows × d, inner keys)
  detail::GemmShape key_grad;     // dk += dSᵀ·q                                (keys × d, inner rows)
};

// Score rows are padded to a multiple of 16 elements (whole SIMD vectors of either dtype): the softmax's exp
// then runs on whole vectors, its padding −∞ and its exp 0, with no partial vector to gather at each row's end
// (that took a third of the exp's time on 40-key rows). The GEMMs never read or write the padding.
std::int64_t score_width(std::int64_t keys) { return padded(keys); }

BlockProducts block_products(const Dims& dims, std::int64_t rows, std::int64_t keys) {
  const std::int64_t d = dims.depth, dv = dims.value_depth, width = score_width(keys);
  const std::int64_t qk_ld = dims.ld(d), v_ld = dims.ld(dv);  // (the output and dO are laid out as v)
  // {m, n, k, transpose_a, transpose_b, lda, ldb, ldc, accumulate}
  return {{rows, keys, d, false, true, qk_ld, qk_ld, width, false},
          {rows, dv, keys, false, false, width, v_ld, v_ld, true},
          {keys, dv, rows, true, false, width, v_ld, v_ld, true},
          {rows, keys, dv, false, true, v_ld, v_ld, width, false},
          {rows, d, keys, false, false, width, qk_ld, qk_ld, true},
          {keys, d, rows, true, false, width, qk_ld, qk_ld, true}};
}

// An accumulating product as C = op(A)·op(B): for the first contribution to C, which then needs no zeroing.
detail::GemmShape assigning(detail::GemmShape product) {
  product.accumulate = false;
  return product;
}

// ---- the problem a kernel solves --------------------------------------------------------------------

bool heads_last(const Attributes& attributes) {
  return attributes.has("heads_last") && attributes.get_bool("heads_last");
}

// One (T, d) × (S, d) × (S, dv) attention, and which keys each query may attend.
// Its mask (this head's (T or 1, S) rows, or null), causality and scale are the row kernels' RowsHead, with
// mask_row and allowed.
template <class T>
struct Head : detail::RowsHead<T> {
  const T* q;
  const T* k;
  const T* v;
  std::int64_t q_ld, k_ld, v_ld;  // row strides

  // Whether a block of queries starting at first_query (count rows) sees any key from first_key on.
  bool sees(std::int64_t first_query, std::int64_t count, std::int64_t first_key) const {
    return !this->causal || first_key <= first_query + count - 1;
  }
};

template <class T>
struct Problem {
  bool interleaved;  // the heads_last layout
  Dims dims;
  const T* q;
  const T* k;
  const T* v;
  const T* mask;
  MaskLayout layout;
  bool causal;
  T scale;

  Problem(const KernelContext& context, int q_index, int mask_index)
      : interleaved(heads_last(context.attributes())),
        dims(dims_of(context.input_shape(q_index), context.input_shape(q_index + 2), interleaved)),
        q(context.in<T>(q_index)),
        k(context.in<T>(q_index + 1)),
        v(context.in<T>(q_index + 2)),
        mask(context.num_inputs > mask_index ? context.in<T>(mask_index) : nullptr),
        causal(context.attributes().get_bool("causal")),
        scale(static_cast<T>(context.attributes().get_double("scale"))) {
    if (mask != nullptr)
      layout = mask_layout(context.input_shape(q_index), context.input_shape(mask_index), interleaved);
  }

  Head<T> head(std::int64_t n) const {
    return {{mask == nullptr ? nullptr : mask + layout.offset(n), layout.row_stride, causal, scale},
            q + dims.offset(n, dims.queries, dims.depth),
            k + dims.offset(n, dims.keys, dims.depth),
            v + dims.offset(n, dims.keys, dims.value_depth),
            dims.ld(dims.depth),
            dims.ld(dims.depth),
            dims.ld(dims.value_depth)};
  }
};

// ---- forward -------------------------------------------------------------------------------------------
// Asks for `rows` rows of `width` elements, ld apart, to be brought into the L2 cache: the next head's operands,
// while this head computes. A short sequence's head (one block pair) is a few µs of work on rows spread one cache
// line a row (heads_last: 512 bytes apart in mql5_block), and it waited on them: with them prefetched, mql5_block's
// FusedAttentionGrad took 2.05-2.28 ms a step against 2.45-2.63 on a quiet machine (1.98-2.15 against 2.33-2.48 on
// a busy one), the training forward's FusedAttention 0.9-1.0 of its time, the whole step 0.96-0.98. (Into L1,
// prefetcht0, the few hundred lines a head overran its miss buffers and gained nothing.)
template <class T>
void prefetch_rows(const T* rows_start, std::int64_t rows, std::int64_t width, std::int64_t ld) {
  const auto bytes = width * static_cast<std::int64_t>(sizeof(T));
  for (std::int64_t r = 0; r < rows; ++r) {
    const char* row = reinterpret_cast<const char*>(rows_start + r * ld);
    for (std::int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(row + b, 0, 1);
  }
}

template <class T>
void prefetch_operands(const Head<T>& h, const Dims& dims) {
  prefetch_rows(h.q, dims.queries, dims.depth, h.q_ld);
  prefetch_rows(h.k, dims.keys, dims.depth, h.k_ld);
  prefetch_rows(h.v, dims.keys, dims.value_depth, h.v_ld);
}

template <class T>
struct ForwardScratch {
  T* scores;  // query_block × key_block
  T* max;     // per query row of the block
  T* sum;
  T* rescale;
};

std::int64_t forward_workspace_elements(const Dims& dims) {
  const Blocks blocks = blocks_of(dims);
  return padded(blocks.queries * score_width(blocks.keys)) + 3 * padded(blocks.queries);
}

template <class T>
ForwardScratch<T> forward_scratch(T* workspace, const Dims& dims) {
  const Blocks blocks = blocks_of(dims);
  ForwardScratch<T> scratch;
  scratch.scores = workspace;
  scratch.max = scratch.scores + padded(blocks.queries * score_width(blocks.keys));
  scratch.sum = scratch.max + padded(blocks.queries);
  scratch.rescale = scratch.sum + padded(blocks.queries);
  return scratch;
}

// One key block's contribution to `rows` query rows starting at `first`: out ← rescale·out + p·v. The first
// block writes out ← p·v (there is nothing yet to rescale), so out needs no zeroing before.
template <class T>
void forward_key_block(const Head<T>& h, const Dims& dims, std::int64_t first, std::int64_t rows,
                       std::int64_t first_key, T* out, const ForwardScratch<T>& s) {
  const std::int64_t keys = std::min(dims.keys - first_key, key_block), width = score_width(keys);
  const std::int64_t dv = dims.value_depth, out_ld = dims.ld(dv);
  const BlockProducts products = block_products(dims, rows, keys);
  detail::gemm(products.scores, h.q + first * h.q_ld, h.k + first_key * h.k_ld, s.scores);
  const detail::AttentionRows<T>& rows_kernels = detail::attention_rows<T>();
  for (std::int64_t r = 0; r < rows; ++r)
    s.rescale[r] = rows_kernels.online_softmax_row(s.scores + r * width, h.mask_row(first + r, first_key),
                                                   h.allowed(first + r, first_key, keys), width, h.scale, s.max[r],
                                                   s.sum[r]);
  if (first_key == 0) {
    detail::gemm(assigning(products.output), s.scores, h.v, out);
    return;
  }
  for (std::int64_t r = 0; r < rows; ++r) {
    const T rescale = s.rescale[r];
    if (rescale == T(1)) continue;
    T* row = out + r * out_ld;
    for (std::int64_t c = 0; c < dv; ++c) row[c] *= rescale;
  }
  detail::gemm(products.output, s.scores, h.v + first_key * h.v_ld, out);
}

// Query rows [first, first + rows) of one head: their outputs and log-sum-exps.
template <class T>
void forward_query_block(const Head<T>& h, const Dims& dims, std::int64_t first, std::int64_t rows, T* out, T* lse,
                         const ForwardScratch<T>& s) {
  const std::int64_t dv = dims.value_depth, out_ld = dims.ld(dv);
  if (dims.keys == 0)  // no key block runs: rows that attend nothing, zeros as below
    for (std::int64_t r = 0; r < rows; ++r) std::fill(out + r * out_ld, out + r * out_ld + dv, T(0));
  std::fill(s.max, s.max + rows, minus_infinity<T>);
  std::fill(s.sum, s.sum + rows, T(0));
  for (std::int64_t first_key = 0; first_key < dims.keys && h.sees(first, rows, first_key); first_key += key_block)
    forward_key_block(h, dims, first, rows, first_key, out, s);
  for (std::int64_t r = 0; r < rows; ++r) {
    T* row = out + r * out_ld;
    if (s.max[r] == minus_infinity<T>) {  // a row that may attend nothing is all zeros, as unfused
      std::fill(row, row + dv, T(0));
    } else {  // (a NaN score makes the row NaN, as unfused)
      const T inverse = T(1) / s.sum[r];
      for (std::int64_t c = 0; c < dv; ++c) row[c] *= inverse;
    }
  }
  detail::attention_rows<T>().log_sum_exps(s.max, s.sum, rows, lse);
}

// to ← from, n elements, to aligned to whole vectors: with streaming stores, which write past the caches. The
// kept probabilities are written once and read in the backward, several MB later: computed in a head's scratch
// and streamed out, the forward no longer reads each line of the state in before writing it (mql5_block's
// training forward about a tenth faster). The fence orders the streamed stores before whatever signals the end of
// the kernel to another thread.
template <class T>
void stream_copy(T* to, const T* from, std::int64_t n) {
  const auto address = reinterpret_cast<std::uintptr_t>(to);
#if XSIMD_WITH_AVX512F
  constexpr std::int64_t per_vector = 64 / sizeof(T);
  if (address % 64 == 0 && n % per_vector == 0) {
    for (std::int64_t i = 0; i < n; i += per_vector) {
      if constexpr (std::is_same_v<T, float>) _mm512_stream_ps(to + i, _mm512_loadu_ps(from + i));
      if constexpr (std::is_same_v<T, double>) _mm512_stream_pd(to + i, _mm512_loadu_pd(from + i));
    }
    _mm_sfence();
    return;
  }
#elif XSIMD_WITH_AVX
  constexpr std::int64_t per_vector = 32 / sizeof(T);
  if (address % 32 == 0 && n % per_vector == 0) {
    for (std::int64_t i = 0; i < n; i += per_vector) {
      if constexpr (std::is_same_v<T, float>) _mm256_stream_ps(to + i, _mm256_loadu_ps(from + i));
      if constexpr (std::is_same_v<T, double>) _mm256_stream_pd(to + i, _mm256_loadu_pd(from + i));
    }
    _mm_sfence();
    return;
  }
#endif
  (void)address;
  std::memcpy(to, from, sizeof(T) * static_cast<std::size_t>(n));
}

// A head whose probabilities are kept (keeps_probabilities): p ← softmax(scale·q·kᵀ) in the head's scratch, then
// out ← p·v, and p streamed into the state at `kept` (null when nothing will read it). One key block, so no online
// rescaling; the rows are normalized before the product, so the output needs no pass of its own.
template <class T>
void forward_kept_head(const Head<T>& h, const Dims& dims, T* out, T* lse, T* kept, const ForwardScratch<T>& s) {
  const std::int64_t rows = dims.queries, keys = dims.keys, width = score_width(keys);
  const BlockProducts products = block_products(dims, rows, keys);
  T* p = s.scores;
  detail::gemm(products.scores, h.q, h.k, p);
  detail::attention_rows<T>().softmax_rows(p, rows, width, h, keys, s.max, s.sum, lse);
  detail::gemm(assigning(products.output), p, h.v, out);
  if (kept != nullptr) stream_copy(kept, p, rows * width);
}

template <class T>
void fused_attention_kernel(const KernelContext& context) {
  const Problem<T> p(context, ForwardInputs::q, ForwardInputs::mask);
  const Dims& dims = p.dims;
  T* out = context.out<T>();
  T* lse = out + dims.heads * dims.queries * dims.value_depth;
  T* kept = keeps_probabilities(dims) ? lse + dims.heads * dims.queries : nullptr;
  // Without a backward in the plan nothing reads the kept probabilities: they stay in each head's scratch.
  const bool kept_read =
      kept != nullptr && (context.read_output_elements < 0 || context.read_output_elements > kept - out);
  const std::int64_t blocks = query_blocks(dims);
  const std::int64_t scratch_elements = forward_workspace_elements(dims);
  // (head, query block) pairs are independent: each worker takes a contiguous range, with its own scratch.
  detail::parallel_for(
      dims.heads * blocks, slots(context, scratch_elements * sizeof(T)),
      [&](std::int64_t begin, std::int64_t end, int worker) {
        const ForwardScratch<T> scratch = forward_scratch(context.scratch<T>() + worker * scratch_elements, dims);
        for (std::int64_t item = begin; item < end; ++item) {
          const std::int64_t n = item / blocks;
          if (kept != nullptr) {  // (one query block)
            if (item + 1 < end) prefetch_operands(p.head(n + 1), dims);
            forward_kept_head(p.head(n), dims, out + dims.offset(n, dims.queries, dims.value_depth),
                              lse + n * dims.queries,
                              kept_read ? kept + n * dims.queries * score_width(dims.keys) : nullptr, scratch);
            continue;
          }
          const std::int64_t first = item % blocks * dims.query_block;
          const std::int64_t rows = std::min(dims.queries - first, dims.query_block);
          forward_query_block(p.head(n), dims, first, rows,
                              out + dims.offset(n, dims.queries, dims.value_depth) + first * dims.ld(dims.value_depth),
                              lse + n * dims.queries + first, scratch);
        }
      });
}

// ---- backward ------------------------------------------------------------------------------------------

template <class T>
struct BackwardScratch {
  T* probabilities;  // query_block × key_block
  T* scores_grad;    // query_block × key_block: dP, then dS
  T* row_dots;       // rowsum(dO ∘ O) for every query of a head
};

std::int64_t backward_workspace_elements(const Dims& dims) {
  const Blocks blocks = blocks_of(dims);
  return 2 * padded(blocks.queries * score_width(blocks.keys)) + padded(dims.queries);
}

template <class T>
BackwardScratch<T> backward_scratch(T* workspace, const Dims& dims) {
  const Blocks blocks = blocks_of(dims);
  BackwardScratch<T> scratch;
  scratch.probabilities = workspace;
  scratch.scores_grad = scratch.probabilities + padded(blocks.queries * score_width(blocks.keys));
  scratch.row_dots = scratch.scores_grad + padded(blocks.queries * score_width(blocks.keys));
  return scratch;
}

// What one head's backward reads and writes.
template <class T>
struct HeadGrad {
  const T* out;  // the forward output O
  const T* lse;
  const T* probabilities;  // the kept probabilities (keeps_probabilities), else null: recomputed from q, k and lse
  const T* out_grad;       // dO
  T* q_grad;
  T* k_grad;
  T* v_grad;
};

// The contributions of one (query block, key block) pair to dq, dk and dv.
// With `only` (the head's one pair of blocks, a short sequence's) the products write dq, dk and dv rather than add
// to them, and the caller zeroes nothing.
template <class T>
void backward_block(const Head<T>& h, const HeadGrad<T>& g, const Dims& dims, std::int64_t first, std::int64_t rows,
                    std::int64_t first_key, std::int64_t keys, bool only, const BackwardScratch<T>& s) {
  const std::int64_t out_ld = dims.ld(dims.value_depth);
  const BlockProducts products = block_products(dims, rows, keys);
  T* dp = s.scores_grad;
  const T* q = h.q + first * h.q_ld;
  const T* k = h.k + first_key * h.k_ld;
  const T* v = h.v + first_key * h.v_ld;
  const std::int64_t width = score_width(keys);
  const T* p = g.probabilities;  // (kept only for a head of one block pair)
  const detail::AttentionRows<T>& rows_kernels = detail::attention_rows<T>();
  if (p == nullptr) {
    detail::gemm(products.scores, q, k, s.probabilities);
    for (std::int64_t r = 0; r < rows; ++r)
      rows_kernels.probabilities_row(s.probabilities + r * width, h.mask_row(first + r, first_key),
                                     h.allowed(first + r, first_key, keys), width, h.scale, g.lse[first + r]);
    p = s.probabilities;
  }
  const T* out_grad = g.out_grad + first * out_ld;
  // dV += pᵀ·dO, then dP = dO·vᵀ
  detail::gemm(only ? assigning(products.value_grad) : products.value_grad, p, out_grad, g.v_grad + first_key * h.v_ld);
  detail::gemm(products.scores_grad, out_grad, v, dp);
  for (std::int64_t r = 0; r < rows; ++r)  // dS = p ∘ (dP − rowsum(dO ∘ O)), with the scale folded in
    rows_kernels.scores_grad_row(dp + r * width, p + r * width, width, s.row_dots[first + r], h.scale);
  // dQ += dS·k, dK += dSᵀ·q
  detail::gemm(only ? assigning(products.query_grad) : products.query_grad, dp, k, g.q_grad + first * h.q_ld);
  detail::gemm(only ? assigning(products.key_grad) : products.key_grad, dp, q, g.k_grad + first_key * h.k_ld);
}

template <class T>
void backward_head(const Head<T>& h, const HeadGrad<T>& g, const Dims& dims, const BackwardScratch<T>& s) {
  const std::int64_t dv = dims.value_depth, out_ld = dims.ld(dv);
  row_dots(g.out_grad, g.out, out_ld, dims.queries, dv, s.row_dots);
  auto zero_rows = [](T* rows, std::int64_t count, std::int64_t width, std::int64_t ld) {
    for (std::int64_t r = 0; r < count; ++r) std::fill(rows + r * ld, rows + r * ld + width, T(0));
  };
  const bool only_pair = dims.keys > 0 && dims.keys <= key_block && query_blocks(dims) == 1;
  if (!only_pair) {
    zero_rows(g.q_grad, dims.queries, dims.depth, h.q_ld);
    zero_rows(g.k_grad, dims.keys, dims.depth, h.k_ld);
    zero_rows(g.v_grad, dims.keys, dv, h.v_ld);
  }
  for (std::int64_t first_key = 0; first_key < dims.keys; first_key += key_block) {
    const std::int64_t keys = std::min(dims.keys - first_key, key_block);
    for (std::int64_t first = 0; first < dims.queries; first += dims.query_block) {
      const std::int64_t rows = std::min(dims.queries - first, dims.query_block);
      if (h.sees(first, rows, first_key)) backward_block(h, g, dims, first, rows, first_key, keys, only_pair, s);
    }
  }
}

template <class T>
void fused_attention_grad_kernel(const KernelContext& context) {
  const Problem<T> p(context, GradInputs::q, GradInputs::mask);
  const Dims& dims = p.dims;
  const T* out = context.in<T>(GradInputs::state);
  const T* lse = out + dims.heads * dims.queries * dims.value_depth;
  const T* kept = keeps_probabilities(dims) ? lse + dims.heads * dims.queries : nullptr;
  const T* out_grad = context.in<T>(GradInputs::output_grad);
  T* q_grad = context.out<T>();
  T* k_grad = q_grad + dims.heads * dims.queries * dims.depth;
  T* v_grad = k_grad + dims.heads * dims.keys * dims.depth;
  auto head_grad = [&](std::int64_t n) {
    const std::int64_t out_offset = dims.offset(n, dims.queries, dims.value_depth);
    return HeadGrad<T>{out + out_offset,
                       lse + n * dims.queries,
                       kept == nullptr ? nullptr : kept + n * dims.queries * score_width(dims.keys),
                       out_grad + out_offset,
                       q_grad + dims.offset(n, dims.queries, dims.depth),
                       k_grad + dims.offset(n, dims.keys, dims.depth),
                       v_grad + dims.offset(n, dims.keys, dims.value_depth)};
  };
  const std::int64_t scratch_elements = backward_workspace_elements(dims);
  // Heads are independent (each writes its own dq, dk, dv): each worker takes a contiguous range of them.
  detail::parallel_for(
      dims.heads, slots(context, scratch_elements * sizeof(T)), [&](std::int64_t begin, std::int64_t end, int worker) {
        const BackwardScratch<T> scratch = backward_scratch(context.scratch<T>() + worker * scratch_elements, dims);
        for (std::int64_t n = begin; n < end; ++n) {
          if (kept != nullptr && n + 1 < end) {  // (a short sequence's heads: prefetch_rows)
            const HeadGrad<T> next = head_grad(n + 1);
            prefetch_operands(p.head(n + 1), dims);
            prefetch_rows(next.probabilities, 1, dims.queries * score_width(dims.keys), 0);
            prefetch_rows(next.out, dims.queries, dims.value_depth, dims.ld(dims.value_depth));
            prefetch_rows(next.out_grad, dims.queries, dims.value_depth, dims.ld(dims.value_depth));
          }
          backward_head(p.head(n), head_grad(n), dims, scratch);
        }
      });
}

// ---- shape rules ---------------------------------------------------------------------------------------

bool mask_dim_fits(std::int64_t mask, std::int64_t wanted) {
  return mask == wanted || mask == 1 || mask == Shape::unknown || wanted == Shape::unknown;
}

[[noreturn]] void fail_attention(const InferContext& ctx, int q_index, int mask_index, const std::string& what) {
  std::string shapes = "q=" + ctx.input_shape(q_index).to_string() + ", k=" + ctx.input_shape(q_index + 1).to_string() +
                       ", v=" + ctx.input_shape(q_index + 2).to_string();
  if (ctx.num_inputs() > mask_index) shapes += ", mask=" + ctx.input_shape(mask_index).to_string();
  ctx.fail_with(what + " (" + shapes + ")");
}

// The mask broadcasts against the heads-first view (..., H, T, S) in either layout.
void check_mask(const InferContext& ctx, int q_index, int mask_index) {
  const bool interleaved = heads_last(ctx.attributes());
  const Shape q = heads_first(ctx.input_shape(q_index), interleaved);
  const Shape& mask = ctx.input_shape(mask_index);
  const std::int64_t keys = heads_first(ctx.input_shape(q_index + 1), interleaved).dim(-2);
  bool fits = mask.rank() >= 1 && mask.rank() <= q.rank() && mask.dim(-1) == keys;
  for (int axis = 2; fits && axis <= mask.rank(); ++axis) fits = mask_dim_fits(mask.dim(-axis), q.dim(-axis));
  if (!fits)
    fail_attention(ctx, q_index, mask_index,
                   "the mask must broadcast to (..., query_length, key_length) with the keys as its last dimension");
}

// q (..., T, d), k (..., S, d), v (..., S, dv) with equal leading dimensions, and an optional mask; with
// heads_last, q (..., T, H, d), k (..., S, H, d), v (..., S, H, dv), checked as their heads-first views.
void check_attention(const InferContext& ctx, int q_index, int mask_index) {
  const bool interleaved = heads_last(ctx.attributes());
  const int min_rank = interleaved ? 3 : 2;
  const Shape& stored_q = ctx.input_shape(q_index);
  if (stored_q.rank() < min_rank || ctx.input_shape(q_index + 1).rank() != stored_q.rank() ||
      ctx.input_shape(q_index + 2).rank() != stored_q.rank())
    fail_attention(ctx, q_index, mask_index,
                   interleaved
                       ? "with heads_last, q, k and v must have one rank, 3 or more: (..., length, heads, depth)"
                       : "q, k and v must have one rank, 2 or more: (..., length, depth)");
  const Shape q = heads_first(stored_q, interleaved);
  const Shape k = heads_first(ctx.input_shape(q_index + 1), interleaved);
  const Shape v = heads_first(ctx.input_shape(q_index + 2), interleaved);
  for (int axis = 0; axis + 2 < q.rank(); ++axis)
    if (q[axis] != k[axis] || k[axis] != v[axis])
      fail_attention(ctx, q_index, mask_index, "q, k and v differ before their last two dimensions");
  if (q.dim(-1) != k.dim(-1))
    fail_attention(ctx, q_index, mask_index, "q and k must have the same depth (last dimension)");
  if (k.dim(-2) != v.dim(-2)) fail_attention(ctx, q_index, mask_index, "k and v must have the same length");
  if (ctx.num_inputs() > mask_index) check_mask(ctx, q_index, mask_index);
}

// A flat buffer of sum(counts) elements; unknown while a dimension is (the plan knows it).
Shape flat_shape(const std::vector<std::vector<std::int64_t>>& products) {
  std::int64_t total = 0;
  for (const auto& factors : products) {
    std::int64_t product = 1;
    for (std::int64_t factor : factors) {
      if (factor == Shape::unknown) return Shape{Shape::unknown};
      product *= factor;
    }
    total += product;
  }
  return Shape{total};
}

std::int64_t leading_product(const Shape& q) {
  std::int64_t product = 1;
  for (int axis = 0; axis + 2 < q.rank(); ++axis) {
    if (q[axis] == Shape::unknown) return Shape::unknown;
    product *= q[axis];
  }
  return product;
}

Shape fused_attention_shape(const InferContext& ctx) {
  check_attention(ctx, ForwardInputs::q, ForwardInputs::mask);
  const bool interleaved = heads_last(ctx.attributes());
  const Shape q = heads_first(ctx.input_shape(ForwardInputs::q), interleaved);
  const std::int64_t heads = leading_product(q), queries = q.dim(-2);
  const std::int64_t keys = heads_first(ctx.input_shape(ForwardInputs::k), interleaved).dim(-2);
  if (keys == Shape::unknown) return Shape{Shape::unknown};  // (whether the probabilities are kept depends on it)
  std::vector<std::vector<std::int64_t>> parts = {{heads, queries, ctx.input_shape(ForwardInputs::v).dim(-1)},
                                                  {heads, queries}};
  if (queries != Shape::unknown && keeps_probabilities(queries, keys))
    parts.push_back({heads, queries, score_width(keys)});
  return flat_shape(parts);
}

Shape output_shape(const InferContext& ctx) {
  const Shape& q = ctx.input_shape(OutputInputs::q);
  std::vector<std::int64_t> dims(q.dims().begin(), q.dims().end() - 1);
  dims.push_back(ctx.input_shape(OutputInputs::v).dim(-1));
  return Shape(std::move(dims));
}

Shape grad_shape(const InferContext& ctx) {
  check_attention(ctx, GradInputs::q, GradInputs::mask);
  const Shape& q = ctx.input_shape(GradInputs::q);
  const Shape& k = ctx.input_shape(GradInputs::k);
  const Shape& v = ctx.input_shape(GradInputs::v);
  std::vector<std::int64_t> out_dims(q.dims().begin(), q.dims().end() - 1);
  out_dims.push_back(v.dim(-1));
  if (ctx.input_shape(GradInputs::output_grad) != Shape(out_dims))
    ctx.fail("the output gradient does not have the output's shape");
  // [dq | dk | dv], each laid out as its input.
  return flat_shape({q.dims(), k.dims(), v.dims()});
}

Shape grad_part_shape(const InferContext& ctx) {
  const std::int64_t part = ctx.attributes().get_int("part");
  if (part < 0 || part > 2) ctx.fail("part must be 0 (q), 1 (k) or 2 (v), got " + std::to_string(part));
  return ctx.input_shape(1 + static_cast<int>(part));
}

// ---- workspaces ----------------------------------------------------------------------------------------

// Per-worker scratch, for as many workers as the kernel could use now (kiln::get_num_threads()).
std::size_t forward_workspace(const std::vector<Shape>& inputs, const Shape&, const Attributes& attributes,
                              DType dtype) {
  const Dims dims = dims_of(inputs[ForwardInputs::q], inputs[ForwardInputs::v], heads_last(attributes));
  const int workers = detail::parallel_workers(dims.heads * query_blocks(dims), std::numeric_limits<int>::max());
  return static_cast<std::size_t>(forward_workspace_elements(dims) * workers) * dtype_size(dtype);
}

std::size_t backward_workspace(const std::vector<Shape>& inputs, const Shape&, const Attributes& attributes,
                               DType dtype) {
  const Dims dims = dims_of(inputs[GradInputs::q], inputs[GradInputs::v], heads_last(attributes));
  const int workers = detail::parallel_workers(dims.heads, std::numeric_limits<int>::max());
  return static_cast<std::size_t>(backward_workspace_elements(dims) * workers) * dtype_size(dtype);
}

// ---- plan-time preparation -----------------------------------------------------------------------------

// Makes the GEMM kernels of every block pair's products: full and ragged query blocks, full and ragged key blocks.
void prepare_products(const Dims& dims, DType dtype, bool backward) {
  const std::int64_t last_rows = dims.queries - (query_blocks(dims) - 1) * dims.query_block;
  const std::int64_t last_keys = dims.keys - (dims.keys - 1) / key_block * key_block;
  for (const std::int64_t rows : {std::min(dims.queries, dims.query_block), last_rows})
    for (const std::int64_t keys : {std::min(dims.keys, key_block), last_keys}) {
      const BlockProducts products = block_products(dims, rows, keys);
      if (backward) {
        for (const detail::GemmShape& product :
             {products.scores, products.value_grad, products.scores_grad, products.query_grad, products.key_grad})
          detail::prepare_gemm(product, dtype);
        for (const detail::GemmShape& product : {products.value_grad, products.query_grad, products.key_grad})
          detail::prepare_gemm(assigning(product), dtype);
      } else {
        detail::prepare_gemm(products.scores, dtype);
        detail::prepare_gemm(products.output, dtype);
        detail::prepare_gemm(assigning(products.output), dtype);
      }
    }
}

void forward_prepare(const std::vector<Shape>& inputs, const Shape&, const Attributes& attributes, DType dtype) {
  const Dims dims = dims_of(inputs[ForwardInputs::q], inputs[ForwardInputs::v], heads_last(attributes));
  if (dims.queries > 0 && dims.keys > 0) prepare_products(dims, dtype, false);
}

void backward_prepare(const std::vector<Shape>& inputs, const Shape&, const Attributes& attributes, DType dtype) {
  const Dims dims = dims_of(inputs[GradInputs::q], inputs[GradInputs::v], heads_last(attributes));
  if (dims.queries > 0 && dims.keys > 0) prepare_products(dims, dtype, true);
}

// ---- backward rule -------------------------------------------------------------------------------------

Attributes settings_of(const Attributes& attributes) {
  return Attributes()
      .set("scale", attributes.get_double("scale"))
      .set("causal", attributes.get_bool("causal"))
      .set("heads_last", heads_last(attributes));
}

std::vector<Tensor> fused_attention_backward(const GradContext& g) {
  Graph& graph = g.output().graph();
  const Tensor q = g.input(OutputInputs::q), k = g.input(OutputInputs::k), v = g.input(OutputInputs::v);
  std::vector<Tensor> inputs = {q, k, v, g.input(OutputInputs::state), g.output_grad()};
  if (g.num_inputs() > OutputInputs::mask) inputs.push_back(g.input(OutputInputs::mask));
  const Tensor grads =
      graph.add_op("kiln>FusedAttentionGrad", inputs, settings_of(g.attributes()), "fused_attention_grad");
  std::vector<Tensor> result(static_cast<std::size_t>(g.num_inputs()));
  for (int part = 0; part < 3; ++part)
    if (g.needs_grad(OutputInputs::q + part))
      result[static_cast<std::size_t>(OutputInputs::q + part)] =
          graph.add_op("kiln>FusedAttentionGradPart", {grads, q, k, v}, Attributes().set("part", part),
                       part == 0   ? "q_grad"
                       : part == 1 ? "k_grad"
                                   : "v_grad");
  return result;
}

constexpr const char* second_order = "second-order gradients of fused_attention are not implemented";

}  // namespace

KILN_REGISTER_OP(OpDef("kiln>FusedAttention")
                     .inputs(3, 4)
                     .attributes({"scale", "causal", "heads_last"})
                     .infer_shape(fused_attention_shape)
                     .forward(fused_attention_kernel<float>, fused_attention_kernel<double>)
                     .workspace(forward_workspace)
                     .prepare(forward_prepare)
                     .not_differentiable("the internal state of fused_attention: gradients flow through "
                                         "kiln>FusedAttentionOutput"));
KILN_REGISTER_OP(OpDef("kiln>FusedAttentionOutput")
                     .inputs(4, 5)
                     .attributes({"scale", "causal", "heads_last"})
                     .infer_shape(output_shape)
                     .forward(detail::head_kernel<float>, detail::head_kernel<double>)
                     .backward(fused_attention_backward)
                     .non_differentiable_inputs({OutputInputs::state, OutputInputs::mask},
                                                "the state is recomputed from q, k and v; masks carry no gradient")
                     .sharing(Sharing::alias));
KILN_REGISTER_OP(OpDef("kiln>FusedAttentionGrad")
                     .inputs(5, 6)
                     .attributes({"scale", "causal", "heads_last"})
                     .infer_shape(grad_shape)
                     .forward(fused_attention_grad_kernel<float>, fused_attention_grad_kernel<double>)
                     .workspace(backward_workspace)
                     .prepare(backward_prepare)
                     .not_differentiable(second_order));
KILN_REGISTER_OP(OpDef("kiln>FusedAttentionGradPart")
                     .inputs(4)
                     .attributes({"part"})
                     .infer_shape(grad_part_shape)
                     .forward(detail::flat_part_kernel<float>, detail::flat_part_kernel<double>)
                     .sharing(Sharing::alias)
                     .alias_offset(detail::flat_part_offset)
                     .not_differentiable(second_order));

namespace ops {

Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, const Tensor& mask, bool causal,
                       bool heads_last) {
  std::vector<Tensor> inputs = {q, k, v};
  if (mask.valid()) inputs.push_back(mask);
  Graph& graph = q.graph();
  const Attributes settings = Attributes().set("scale", scale).set("causal", causal).set("heads_last", heads_last);
  const Tensor state = graph.add_op("kiln>FusedAttention", inputs, settings, "fused_attention");
  inputs.insert(inputs.begin(), state);
  return graph.add_op("kiln>FusedAttentionOutput", inputs, settings, "fused_attention_output");
}

}  // namespace ops
}  // namespace kiln
