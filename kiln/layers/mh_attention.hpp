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

class MHAttentionLayer : public Layer {
 public:
  explicit MHAttentionLayer(const Config& config);
  std::int64_t key_size() const { return key_size_; }
  std::int64_t heads() const { return heads_; }
  Config get_config() const override;
  Config build_config() const override;  ///< (None, None, window): the weights depend on the window only

 protected:
  void build(const Shape& input_shape) override;
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  Tensor split_heads(const Tensor& x) const;
  Tensor merge_heads(const Tensor& x) const;

  std::int64_t key_size_ = 0, heads_ = 0;
  Config window_;  ///< null until built
  LayerPtr query_, key_, value_, w0_, attention_norm_, feed_forward_hidden_, feed_forward_output_, output_norm_;
};

class MHAttention : public LayerHandle<MHAttentionLayer> {
 public:
  MHAttention(std::int64_t key_size, std::int64_t heads, const Config& options = {});
  explicit MHAttention(const Config& config) : LayerHandle(std::make_shared<MHAttentionLayer>(config)) {}
};

}  // namespace kiln
