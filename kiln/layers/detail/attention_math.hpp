#pragma once
// The scaled dot-product attention that every attention layer composes, from ops only.
#include <cstdint>
#include <functional>
#include <string>

#include <kiln/core/tensor.hpp>

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
// attend"). A row with nothing to attend is all zeros (never NaN, never uniform), as in Keras 3.14+'s
// MultiHeadAttention (keras.layers.Attention still averages such a row uniformly).
// `mask` may be empty.
Tensor masked_softmax(const Tensor& scores, const Tensor& mask);

Tensor attention_scores(const Tensor& q, const Tensor& k, double scale);

// Dropout on the weights only when training and rate > 0.
Attended attend(const Tensor& scores, const Tensor& v, const Tensor& mask, double dropout_rate = 0.0,
                std::uint64_t seed = 0, bool training = false);

// What one attention call asks for, besides q, k and v.
struct AttentionOptions {
  const Tensor* mask = nullptr;  // the caller's mask, as combined_mask takes it (may be null)
  bool causal = false;
  bool return_weights = false;  // the weights are wanted (return_attention_scores)
  double dropout_rate = 0.0;    // on the weights, when training
  bool training = false;
  // Drawn only when dropout applies, once the scores and the mask are in the graph: where the layers
  // always drew it, so their dropout streams are unchanged.
  std::function<std::uint64_t()> seed;
  // q, k and v are (batch, length, heads, depth), as a head-split reshape leaves them, and so is the
  // output; the weights stay (batch, heads, T, S). The fused path reads them in place.
  bool heads_last = false;
};

// softmax(scale·q·kᵀ, masked)·v for q (batch, ..., T, d), k (batch, ..., S, d), v (batch, ..., S, dv), or
// the rank-4 heads_last layout.
// Fused (ops::fused_attention: no T×S buffer beyond 256 steps, weights never an output, `weights` left empty) unless
// the weights are wanted or dropped out; then the composition above. Both check the mask the same way.
Attended attend(const std::string& who, const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                const AttentionOptions& options);

}  // namespace kiln::detail
