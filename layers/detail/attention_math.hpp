#pragma once
// The scaled dot-product attention that every attention layer composes, from ops only.
#include <cstdint>
#include <string>

#include "core/tensor.hpp"

namespace kiln::detail {

struct Attended {
  Tensor output;   // softmax(scores, masked)·v
  Tensor weights;  // the attention distribution, before any dropout
};

// The mask of one call: `given` (may be null) checked against the scores and shaped to broadcast over
// them, times the causal mask when `causal`; empty when neither. A given mask is (batch, S), padding
// over keys, or (batch, T, S); heads, if the scores have them, broadcast. Throws ShapeError (or
// DTypeError) naming `who` and the shapes.
Tensor combined_mask(const std::string& who, const Tensor* given, bool causal, const Tensor& scores);

// Softmax over the last axis that is exactly 0 where mask is 0 (any nonzero mask value means "may
// attend"). A row with nothing to attend is all zeros (never NaN, never uniform), as in Keras 3.14+.
// `mask` may be empty.
Tensor masked_softmax(const Tensor& scores, const Tensor& mask);

Tensor attention_scores(const Tensor& q, const Tensor& k, double scale);

// Dropout on the weights only when training and rate > 0.
Attended attend(const Tensor& scores, const Tensor& v, const Tensor& mask, double dropout_rate = 0.0,
                std::uint64_t seed = 0, bool training = false);

}  // namespace kiln::detail
