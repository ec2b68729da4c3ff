#pragma once
// keras-hub's Transformer blocks: TransformerEncoder (self-attention, then a feed-forward network) and
// TransformerDecoder (causal self-attention, optional cross-attention to an encoder's output, then a
// feed-forward network). Each part is residual; normalize_first = false normalizes after the residual
// sum (BERT, the original paper), true before the part (GPT-2: x + part(LayerNorm(x))). The head depth is
// the features divided by num_heads. Registered as "keras_hub>TransformerEncoder" and
// "keras_hub>TransformerDecoder", with keras-hub's config keys, sublayer names and weight paths.
//
//   kiln::Tensor h = kiln::TokenAndPositionEmbedding(65, 64, 128)(ids);
//   h = kiln::TransformerDecoder(/*intermediate_dim=*/512, /*num_heads=*/4,
//                                {{"normalize_first", true}, {"activation", "gelu"}})(h);
//
// Masks: an input's mask (Embedding's mask_zero) leaves its padded steps out as keys and passes on to the
// output; call arguments "padding_mask" (batch, steps) and "attention_mask" (batch, T, S) for the encoder,
// "decoder_padding_mask", "decoder_attention_mask", "encoder_padding_mask", "encoder_attention_mask" and
// "use_causal_mask" (true by default) for the decoder. Where keras-hub's padded query rows attend the kept
// keys, kiln's attention gives them zeros (only the outputs at padding differ).
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <kiln/layers/layer.hpp>

namespace kiln {

namespace detail {
struct DecodingStep;
}  // namespace detail

/// What TransformerEncoder and TransformerDecoder share: keras-hub's arguments and the residual parts.
class TransformerBlockLayer : public Layer {
 public:
  std::int64_t intermediate_dim() const { return intermediate_dim_; }  ///< the feed-forward network's width
  std::int64_t num_heads() const { return num_heads_; }  ///< attention heads
  bool normalize_first() const { return normalize_first_; }  ///< pre-norm (true) or post-norm
  Config get_config() const override;
  bool supports_masking() const override { return true; }
  /// keras-hub keeps each sublayer in an attribute named after it with a leading underscore
  /// ("_self_attention_layer/query_dense/vars/0").
  std::vector<std::string> keras_weight_paths() const override;
  std::vector<std::pair<std::string, std::string>> keras_sublayers() const override;

 protected:
  /// Reads intermediate_dim and num_heads (required, positive), dropout = 0 (in [0, 1)), activation = relu,
  /// layer_norm_epsilon = 1e-5, kernel_initializer = glorot_uniform, bias_initializer = zeros,
  /// normalize_first = false; `more` reads the subclass's keys.
  TransformerBlockLayer(const Config& config, const std::string& class_name,
                        const std::function<void(ConfigReader&)>& more = {});
  /// The head depth for `features`: features / num_heads, which must be at least 1.
  std::int64_t head_dim(std::int64_t features) const;
  /// Tracks a MultiHeadAttention sublayer of the block's heads and head depth (value_dim too when asked).
  LayerPtr make_attention(const std::string& name, std::int64_t features, bool value_dim);
  LayerPtr make_norm(const std::string& name);     ///< tracks a LayerNormalization of layer_norm_epsilon
  LayerPtr make_dropout(const std::string& name);  ///< tracks a Dropout of the block's rate
  /// Tracks a Dense sublayer with the block's initializers.
  LayerPtr make_dense(const std::string& name, std::int64_t units, const std::string& activation);
  /// One residual part: r + dropout(part(x')), x' = norm(x) before (pre-norm), the sum normalized after
  /// (post-norm).
  Tensor residual(const Tensor& x, const LayerPtr& norm, const LayerPtr& dropout, const CallArgs& inner,
                  const std::function<Tensor(const Tensor&)>& part) const;
  /// The feed-forward part's inner function: dense_out(dense_intermediate(x)).
  Tensor feed_forward(const Tensor& x, const CallArgs& inner) const;
  /// keras-hub's merge_padding_and_attention_mask for the call's explicit masks: the padding mask
  /// (batch, S) and the attention mask (batch, T, S), each may be null; the result (batch, S) or (batch, T, S),
  /// or an empty Tensor.
  Tensor merged_mask(const Tensor* padding, const Tensor* attention, const Tensor& keys) const;

  std::int64_t intermediate_dim_ = 0;  ///< the feed-forward width
  std::int64_t num_heads_ = 0;         ///< attention heads
  double dropout_ = 0.0;               ///< on the attention weights and after each part
  double layer_norm_epsilon_ = 1e-5;   ///< every LayerNormalization's epsilon
  std::string activation_ = "relu";    ///< the feed-forward activation
  Config kernel_initializer_;          ///< every sublayer's kernels'
  Config bias_initializer_;            ///< every sublayer's biases'
  bool normalize_first_ = false;       ///< pre-norm
  LayerPtr feedforward_intermediate_dense_;  ///< Dense(intermediate_dim, activation)
  LayerPtr feedforward_output_dense_;        ///< Dense(features)
  LayerPtr feedforward_layer_norm_;          ///< the feed-forward part's LayerNormalization
  LayerPtr feedforward_dropout_;             ///< the feed-forward part's Dropout
};

/// The layer behind kiln::TransformerEncoder. Sublayers, in keras-hub's order: "self_attention_layer"
/// (MultiHeadAttention), "self_attention_layer_norm", "self_attention_dropout", "feedforward_layer_norm",
/// "feedforward_intermediate_dense", "feedforward_output_dense", "feedforward_dropout".
class TransformerEncoderLayer : public TransformerBlockLayer {
 public:
  /// TransformerBlockLayer's arguments.
  explicit TransformerEncoderLayer(const Config& config);

 protected:
  /// For inputs (batch, steps, features) with known features.
  void build(const Shape& input_shape) override;
  /// The block; the output has the input's shape.
  Tensor call(const Tensor& input, const CallArgs& args) override;
  std::vector<std::string> call_argument_names() const override { return {"padding_mask", "attention_mask"}; }

 private:
  LayerPtr self_attention_, self_attention_norm_, self_attention_dropout_;
};

/// A Transformer encoder block: keras-hub's layers.TransformerEncoder.
class TransformerEncoder : public LayerHandle<TransformerEncoderLayer> {
 public:
  /// A feed-forward width of `intermediate_dim` and `num_heads` heads; further config keys in `options`
  /// (dropout, activation, layer_norm_epsilon, kernel_initializer, bias_initializer, normalize_first, name).
  TransformerEncoder(std::int64_t intermediate_dim, std::int64_t num_heads, const Config& options = {});
  /// From a whole config, with the keys of TransformerEncoderLayer(const Config&).
  explicit TransformerEncoder(const Config& config)
      : LayerHandle(std::make_shared<TransformerEncoderLayer>(config)) {}
};

/// The layer behind kiln::TransformerDecoder, on [decoder_sequence] or [decoder_sequence, encoder_sequence].
/// Sublayers, in keras-hub's order: "self_attention", "self_attention_layer_norm", "self_attention_dropout",
/// with an encoder sequence "cross_attention", "cross_attention_layer_norm", "cross_attention_dropout",
/// then "feedforward_intermediate_dense", "feedforward_output_dense", "feedforward_layer_norm",
/// "feedforward_dropout".
class TransformerDecoderLayer : public TransformerBlockLayer {
 public:
  /// TransformerBlockLayer's arguments, plus decoder_sequence_shape and encoder_sequence_shape (null, or the
  /// shapes to build for at once, as keras-hub's config saves them).
  explicit TransformerDecoderLayer(const Config& config);
  Config get_config() const override;
  bool has_cross_attention() const { return cross_attention_ != nullptr; }  ///< built with an encoder sequence

 protected:
  void build(const std::vector<Shape>& input_shapes) override;
  /// The block: causal self-attention (unless use_causal_mask is false), cross-attention to the encoder
  /// sequence when built with one, the feed-forward part. The output has the decoder sequence's shape.
  std::vector<Tensor> call(const std::vector<Tensor>& inputs, const CallArgs& args) override;
  std::vector<std::string> call_argument_names() const override {
    return {"decoder_padding_mask", "decoder_attention_mask", "encoder_padding_mask", "encoder_attention_mask",
            "use_causal_mask"};
  }
  std::pair<std::size_t, std::size_t> input_count() const override { return {1, 2}; }

 private:
  Tensor decode_step(const Tensor& decoder, const detail::DecodingStep& step, const CallArgs& inner);

  Config decoder_sequence_shape_, encoder_sequence_shape_;
  LayerPtr self_attention_, self_attention_norm_, self_attention_dropout_;
  LayerPtr cross_attention_, cross_attention_norm_, cross_attention_dropout_;
};

/// A Transformer decoder block: keras-hub's layers.TransformerDecoder. Called on one sequence it is a
/// GPT block (causal self-attention and a feed-forward network); on [decoder, encoder] sequences it also
/// attends the encoder's.
class TransformerDecoder : public LayerHandle<TransformerDecoderLayer> {
 public:
  /// As TransformerEncoder's.
  TransformerDecoder(std::int64_t intermediate_dim, std::int64_t num_heads, const Config& options = {});
  /// From a whole config, with the keys of TransformerDecoderLayer(const Config&).
  explicit TransformerDecoder(const Config& config)
      : LayerHandle(std::make_shared<TransformerDecoderLayer>(config)) {}
};

}  // namespace kiln
