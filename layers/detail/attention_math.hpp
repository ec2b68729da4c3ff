#pragma once
// The scaled dot-product attention that every attention layer composes, from ops only.
#include <cstdint>
#include <string>

#include "core/tensor.hpp"

namespace kiln::detail {

struct Attended {
  Tensor output;   // softmax(q·kᵀ·scale, masked)·v
  Tensor weights;  // the attention distribution, (..., T, S)
};

// A (T, S) constant: 1 where query i may attend key j (j <= i, Keras's top-left aligned causal mask).
Tensor causal_mask(Graph& graph, std::int64_t query_length, std::int64_t key_length, DType dtype);

// The mask `who` was given, checked against scores of shape (batch, [heads,] T, S) and shaped to
// broadcast over them: (batch, S) is a padding mask on keys; (batch, T, S) masks each query's row.
// Throws ShapeError (or DTypeError) naming `who` and both shapes.
Tensor broadcastable_mask(const std::string& who, const Tensor& mask, const Tensor& scores);

// Softmax over the last axis that is exactly 0 where mask is 0. A row with nothing to attend is all
// zeros (never NaN, never uniform), as in Keras 3.14+ and torch's SDPA. `mask` may be empty.
Tensor masked_softmax(const Tensor& scores, const Tensor& mask);

// q (..., T, d), k (..., S, d): the scores q·kᵀ·scale, (..., T, S).
Tensor attention_scores(const Tensor& q, const Tensor& k, double scale);

// scores (..., T, S), v (..., S, dv); `mask` (optional, from broadcastable_mask) broadcasts to the scores.
// Dropout on the weights only when training and rate > 0.
Attended attend(const Tensor& scores, const Tensor& v, const Tensor& mask, double dropout_rate = 0.0,
                std::uint64_t seed = 0, bool training = false);

}  // namespace kiln::detail
