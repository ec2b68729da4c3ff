#pragma once
// The fused attention's row kernels (the softmax over a block of scores, its log-sum-exps, the scores'
// gradient), dispatched by instruction set (internal to ops/: not installed; see isa.hpp). Their exps are most of
// attention's time next to its products, and run a vector at a time: AVX-512's 16 floats, or AVX2's 8 in a
// portable build without dispatch.
#include <algorithm>
#include <cstdint>

#include <kiln/ops/detail/isa.hpp>

namespace kiln::detail {

// What the row kernels read of a head: its mask ((T or 1, S) rows mask_row_stride apart, or null), whether it is
// causal, and the scores' scale.
template <class T>
struct RowsHead {
  const T* mask;
  std::int64_t mask_row_stride;
  bool causal;
  T scale;

  const T* mask_row(std::int64_t query, std::int64_t first_key) const {
    return mask == nullptr ? nullptr : mask + query * mask_row_stride + first_key;
  }
  // How many of the keys [first_key, first_key + count) query `query` may attend before the causal cut.
  std::int64_t allowed(std::int64_t query, std::int64_t first_key, std::int64_t count) const {
    return causal ? std::clamp<std::int64_t>(query - first_key + 1, 0, count) : count;
  }
};

// Score rows are n elements (whole vectors of padding past the keys; see attention.cpp's score_width).
template <class T>
struct AttentionRows {
  // One score row of a key block into probabilities relative to the running max, updating the running max and
  // sum; returns the factor that rescales what the row accumulated from earlier blocks.
  T (*online_softmax_row)(T* x, const T* mask, std::int64_t allowed, std::int64_t n, T scale, T& max, T& sum);
  // The forward's probabilities again, from the saved log-sum-exp: exp(scale·s − lse), 0 where excluded.
  void (*probabilities_row)(T* x, const T* mask, std::int64_t allowed, std::int64_t n, T scale, T lse);
  // lse ← max + log(sum) for `rows` rows (+∞ where max is −∞); max and sum padded to whole vectors.
  void (*log_sum_exps)(const T* max, const T* sum, std::int64_t rows, T* lse);
  // grad ← scale·p ∘ (grad − dot) over a padded row.
  void (*scores_grad_row)(T* grad, const T* p, std::int64_t n, T dot, T scale);
  // A kept head's `rows` score rows (width apart, `keys` keys) into probabilities, with their max, 1/sum (or the
  // sum, on the row-by-row path) and log-sum-exps.
  void (*softmax_rows)(T* p, std::int64_t rows, std::int64_t width, const RowsHead<T>& h, std::int64_t keys,
                       T* row_max, T* row_sum, T* lse);
};

template <class T>
const AttentionRows<T>& attention_rows(Isa isa) {
  const IsaTables& tables = isa_tables(isa);
  return by_dtype<T>(tables.attention_float, tables.attention_double);
}
template <class T>
const AttentionRows<T>& attention_rows() {
  return attention_rows<T>(active_isa());
}

}  // namespace kiln::detail
