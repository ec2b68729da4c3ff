#pragma once
// MHAttention(key_size, heads): a Transformer encoder block, registered as "Custom>MHAttention".
//
// For inputs (batch, sequence, window):
//   Q, K, V = Dense(heads·key_size)(x)            (with bias), split into heads
//   context = softmax(Q·Kᵀ / √key_size)·V          merged back to (batch, sequence, heads·key_size)
//   A = LayerNormalization(ε = 1e-6)(x + Dense(window)(context))          the "W0" projection
//   output = LayerNormalization(ε = 1e-6)(A + Dense(window)(Dense(4·window, swish)(A)))
//
// Config keys, as the layer kiln follows (the MQL5 book's Keras MHAttention) writes them: key_size, heads,
// dimension = heads·key_size (the width of the concatenated heads; a config that says otherwise is a
// ConfigError) and window (the input's last dimension, null until built). The sequence length is the
// input's and is not part of the config: a block takes any length. A config that carries the window builds
// the block at once, every sublayer included, so weights can be loaded before any call.
#include <cstdint>

#include <kiln/layers/layer.hpp>

namespace kiln {

/// The layer behind kiln::MHAttention: multi-head self-attention with a residual and layer norm, then a
/// feed-forward part (4·window units, swish) with a residual and layer norm. Its sublayers, whose names
/// prefix their weights' paths: Dense "query", "key", "value" (heads·key_size units each), "w0" (window),
/// "feed_forward_hidden" and "feed_forward_output", and LayerNormalization "attention_norm" and
/// "output_norm" (epsilon 1e-6).
class MHAttentionLayer : public Layer {
 public:
  /// Config keys: key_size and heads (required, positive), dimension (optional; heads·key_size), window
  /// (null, or the input's last dimension: then the block is built at once). Throws ConfigError on a
  /// dimension other than heads·key_size (except in configs from before version 2, where it held the sequence
  /// length), a size that is not positive or an unknown key.
  explicit MHAttentionLayer(const Config& config);
  std::int64_t key_size() const { return key_size_; }  ///< the depth of each head's queries, keys and values
  std::int64_t heads() const { return heads_; }        ///< the number of attention heads
  Config get_config() const override;
  Config build_config() const override;  ///< (None, None, window): the weights depend on the window only

 protected:
  /// Creates and builds every sublayer for (batch, sequence, window) inputs; the window must be known (else
  /// ShapeError), the batch and sequence need not be.
  void build(const Shape& input_shape) override;
  /// The block on (batch, sequence, window): the output has the input's shape. The sequence length must be
  /// known at call time and the window be the one built for, else ShapeError.
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  Tensor split_heads(const Tensor& x) const;
  Tensor merge_heads(const Tensor& x) const;

  std::int64_t key_size_ = 0, heads_ = 0;
  Config window_;  ///< null until built
  LayerPtr query_, key_, value_, w0_, attention_norm_, feed_forward_hidden_, feed_forward_output_, output_norm_;
};

/// A Transformer encoder block of `heads` heads of depth `key_size`, after the MQL5 book's Keras MHAttention
/// layer, with its config keys; registered as "Custom>MHAttention". It maps (batch, sequence, window) to the
/// same shape, so blocks stack.
///
///   kiln::Tensor h = kiln::MHAttention(/*key_size=*/16, /*heads=*/4)(x);  // x: (None, 20, 32)
class MHAttention : public LayerHandle<MHAttentionLayer> {
 public:
  /// `key_size` is each head's depth, `heads` the number of heads. `options` holds further config keys:
  /// window (to build at once), name, trainable, dtype.
  MHAttention(std::int64_t key_size, std::int64_t heads, const Config& options = {});
  /// From a whole config, with the keys of MHAttentionLayer(const Config&).
  explicit MHAttention(const Config& config) : LayerHandle(std::make_shared<MHAttentionLayer>(config)) {}
};

}  // namespace kiln
