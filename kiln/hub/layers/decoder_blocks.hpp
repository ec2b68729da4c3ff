#pragma once
// keras-hub's decoder blocks of the grouped-query families, with keras-hub's config keys, sublayer names and
// weight paths, registered as "keras_hub>LlamaTransformerDecoder", "keras_hub>MistralTransformerDecoder",
// "keras_hub>QwenTransformerDecoder", "keras_hub>Qwen3TransformerDecoder", "keras_hub>Phi3Decoder",
// "keras_hub>GemmaDecoderBlock" and "keras_hub>FalconTransformerDecoder".
//
// Llama, Mistral and Qwen: x + attention(norm(x)), then h + down(activation(gate(norm(h))) · up(norm(h)))
// (SwiGLU with activation = silu), RMS norms, no biases but Qwen's query/key/value; Mistral attends within a
// sliding window, Qwen within one when use_sliding_window_attention; Qwen 3 has no biases but normalizes each
// head's query and key, with a head_dim of its own and a sliding window when sliding_window_size; Phi-3 names its
// parts otherwise (pre_attention_layernorm, attention, post_attention_layernorm, no underscores), drops out after
// the feed-forward part too, and may scale its rotary embedding as Phi-3's "su" does. Gemma: the same shape with GeGLU
// (gelu_approximate(gating(x)) · gating_2(x)), norms scaled by 1 + scale, optional norms after the attention
// and the feed-forward part (Gemma 2), soft-capped scores and a sliding window.
//
// Called on (batch, steps, hidden) with the tensor argument "decoder_padding_mask" ("padding_mask" for
// Gemma), (batch, steps), 1 at the tokens that count; always causal.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <kiln/layers/layer.hpp>

namespace kiln::hub {

/// LlamaTransformerDecoder, MistralTransformerDecoder, QwenTransformerDecoder, Qwen3TransformerDecoder and
/// Phi3Decoder.
class GatedTransformerDecoderLayer : public Layer {
 public:
  enum class Family { llama, mistral, qwen, qwen3, phi3 };
  Family family() const { return family_; }
  Config get_config() const override;
  bool supports_masking() const override { return true; }
  /// keras-hub's attributes: "_self_attention_layer/_query_dense/vars/0", "_feedforward_gate_dense/vars/0", ...
  std::vector<std::string> keras_weight_paths() const override;
  std::vector<std::pair<std::string, std::string>> keras_sublayers() const override;

 protected:
  /// keras-hub's arguments for `family`: intermediate_dim, num_query_heads, num_key_value_heads (required),
  /// rope_max_wavelength = 10000, activation = silu, layer_norm_epsilon = 1e-5, kernel_initializer =
  /// glorot_uniform, dropout = 0; Llama's rope_position_scaling_factor = 1 and Llama 3's
  /// rope_frequency_adjustment_factor, rope_low_freq_factor, rope_high_freq_factor and
  /// rope_pretraining_sequence_length (null); Mistral's and Qwen's rope_scaling_factor = 1; Mistral's
  /// sliding_window = 512 (null: none) and head_dim = null; Qwen's use_sliding_window_attention = false and
  /// sliding_window_size = 4096; Qwen 3's head_dim (required) and sliding_window_size = null (none). keras-hub's
  /// Qwen3TransformerDecoder leaves head_dim and sliding_window_size out of its config, so it cannot be rebuilt
  /// from it; kiln writes both. Phi-3's hidden_dim (required, the input's), max_sequence_length = 4096,
  /// pretraining_sequence_length = 4096, rope_scaling_type = null (or "su"), rope_scaling_short_factor and
  /// rope_scaling_long_factor (lists, for "su").
  GatedTransformerDecoderLayer(const Config& config, const std::string& class_name, Family family);
  void build(const Shape& input_shape) override;
  Tensor call(const Tensor& input, const CallArgs& args) override;
  std::vector<std::string> call_argument_names() const override { return {"decoder_padding_mask"}; }

 private:
  Family family_;
  std::int64_t intermediate_dim_ = 0, num_query_heads_ = 0, num_key_value_heads_ = 0;
  double rope_max_wavelength_ = 10000.0, rope_scaling_factor_ = 1.0, layer_norm_epsilon_ = 1e-5, dropout_ = 0.0;
  Config rope_frequency_adjustment_factor_, rope_low_freq_factor_, rope_high_freq_factor_,
      rope_pretraining_sequence_length_;
  Config sliding_window_, head_dim_;  ///< Mistral's
  bool use_sliding_window_attention_ = false;
  std::int64_t sliding_window_size_ = 4096;  ///< Qwen's (Qwen 3's: 0 for none)
  std::int64_t hidden_dim_ = 0, max_sequence_length_ = 4096, pretraining_sequence_length_ = 4096;  ///< Phi-3's
  Config rope_scaling_type_, rope_scaling_short_factor_, rope_scaling_long_factor_;              ///< Phi-3's
  std::string activation_ = "silu";
  Config kernel_initializer_;
  LayerPtr attention_, attention_norm_, attention_dropout_, intermediate_, gate_, output_, feedforward_norm_,
      feedforward_dropout_;
};

class LlamaTransformerDecoderLayer final : public GatedTransformerDecoderLayer {
 public:
  explicit LlamaTransformerDecoderLayer(const Config& config)
      : GatedTransformerDecoderLayer(config, "LlamaTransformerDecoder", Family::llama) {}
};
class MistralTransformerDecoderLayer final : public GatedTransformerDecoderLayer {
 public:
  explicit MistralTransformerDecoderLayer(const Config& config)
      : GatedTransformerDecoderLayer(config, "MistralTransformerDecoder", Family::mistral) {}
};
class QwenTransformerDecoderLayer final : public GatedTransformerDecoderLayer {
 public:
  explicit QwenTransformerDecoderLayer(const Config& config)
      : GatedTransformerDecoderLayer(config, "QwenTransformerDecoder", Family::qwen) {}
};

class Qwen3TransformerDecoderLayer final : public GatedTransformerDecoderLayer {
 public:
  explicit Qwen3TransformerDecoderLayer(const Config& config)
      : GatedTransformerDecoderLayer(config, "Qwen3TransformerDecoder", Family::qwen3) {}
};

class Phi3DecoderLayer final : public GatedTransformerDecoderLayer {
 public:
  explicit Phi3DecoderLayer(const Config& config) : GatedTransformerDecoderLayer(config, "Phi3Decoder", Family::phi3) {}
};

/// keras-hub's GemmaDecoderBlock (Gemma and Gemma 2).
class GemmaDecoderBlockLayer final : public Layer {
 public:
  /// keras-hub's arguments: hidden_dim, intermediate_dim (the gated width is intermediate_dim / 2), head_dim,
  /// num_query_heads, num_key_value_heads (required), query_head_dim_normalize = true, use_post_ffw_norm and
  /// use_post_attention_norm = false, logit_soft_cap = null, use_sliding_window_attention = false,
  /// sliding_window_size = 4096, layer_norm_epsilon = 1e-6, dropout = 0. As in keras-hub, the attention
  /// always scales queries by 1/sqrt(head_dim) (the block passes query_head_dim_normalize = true on).
  explicit GemmaDecoderBlockLayer(const Config& config);
  Config get_config() const override;
  bool supports_masking() const override { return true; }
  std::vector<std::string> keras_weight_paths() const override;
  std::vector<std::pair<std::string, std::string>> keras_sublayers() const override;
  /// keras-hub's Gemma feed-forward layers are EinsumDense ("btd,df->btf", int8 kernel_scale (1, 1, units)), which
  /// kiln holds as Dense layers: kiln::quantize leaves them float rather than write a file Keras cannot read.
  std::string quantization_refusal(const Layer& part) const override;

 protected:
  void build(const Shape& input_shape) override;
  Tensor call(const Tensor& input, const CallArgs& args) override;
  std::vector<std::string> call_argument_names() const override { return {"padding_mask"}; }

 private:
  std::int64_t hidden_dim_ = 0, intermediate_dim_ = 0, head_dim_ = 0, num_query_heads_ = 0, num_key_value_heads_ = 0;
  bool query_head_dim_normalize_ = true, use_post_ffw_norm_ = false, use_post_attention_norm_ = false,
       use_sliding_window_attention_ = false;
  Config logit_soft_cap_;
  std::int64_t sliding_window_size_ = 4096;
  double layer_norm_epsilon_ = 1e-6, dropout_ = 0.0;
  LayerPtr pre_attention_norm_, post_attention_norm_, attention_, attention_dropout_, feedforward_dropout_,
      pre_ffw_norm_, post_ffw_norm_, gating_, gating_2_, linear_;
};

/// keras-hub's FalconTransformerDecoder: x + attention(LayerNorm(x)), then h + dense_4h_to_h(gelu(dense_h_to_4h(
/// LayerNorm(h)))), LayerNormalizations and Dense layers with biases, and attention with ALiBi instead of rotary
/// embeddings (FalconAttention: as many key/value heads as query heads, biased projections).
class FalconTransformerDecoderLayer final : public Layer {
 public:
  /// keras-hub's arguments: num_attention_heads, intermediate_dim (required), layer_norm_epsilon = 1e-5,
  /// attention_dropout_rate = 0 (on the attention weights, then on the attention's output), feedforward_dropout_rate
  /// = 0.
  explicit FalconTransformerDecoderLayer(const Config& config);
  Config get_config() const override;
  bool supports_masking() const override { return true; }
  std::vector<std::string> keras_weight_paths() const override;
  std::vector<std::pair<std::string, std::string>> keras_sublayers() const override;

 protected:
  void build(const Shape& input_shape) override;
  Tensor call(const Tensor& input, const CallArgs& args) override;
  std::vector<std::string> call_argument_names() const override { return {"decoder_padding_mask"}; }

 private:
  std::int64_t num_attention_heads_ = 0, intermediate_dim_ = 0;
  double layer_norm_epsilon_ = 1e-5, attention_dropout_rate_ = 0.0, feedforward_dropout_rate_ = 0.0;
  LayerPtr input_norm_, attention_, attention_dropout_, post_attention_norm_, dense_h_to_4h_, dense_4h_to_h_,
      feedforward_dropout_;
};

}  // namespace kiln::hub
