#pragma once
// Grouped-query self-attention as keras-hub's decoder families write it (LlamaAttention, CachedMistralAttention,
// QwenAttention, Qwen3Attention, Phi3Attention, CachedGemmaAttention, FalconAttention): num_query_heads query heads
// share num_key_value_heads key and value heads (query head h reads key/value head h / (num_query_heads /
// num_key_value_heads), keras-hub's ops.repeat), queries and keys rotated by their positions (RoPE), causal, optionally
// inside a sliding window (key j seen by query i when i - j < window) and with the scores soft-capped (c · tanh(s / c),
// Gemma 2). Qwen 3 normalizes each head's query and key (an RMS norm over the head's depth, one scale of head_dim
// shared by the heads, keras-hub's Qwen3LayerNorm) before rotating them. The projections are keras-hub's EinsumDense
// kernels, saved at keras-hub's attribute paths: query (hidden, heads, depth), key and value (hidden, kv_heads, depth),
// attention_output (heads, depth, hidden); Gemma keeps its heads first: query (heads, hidden, depth), key and value
// (kv_heads, hidden, depth). Made by the decoder blocks (kiln/hub/layers/decoder_blocks.hpp), not from a config of its
// own.
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <kiln/layers/layer.hpp>

namespace kiln::hub {

/// How one family's attention is made.
struct GroupedQueryAttentionOptions {
  std::string class_name = "LlamaAttention";  ///< keras-hub's class (for messages and summaries)
  std::string name = "self_attention";        ///< the sublayer's name in its block
  /// keras-hub's attribute names: "_query_dense", ... (Llama, Mistral, Qwen: `underscored`) or "query_dense",
  /// ... (Gemma, Phi-3).
  bool underscored = true;
  std::int64_t num_query_heads = 0;
  std::int64_t num_key_value_heads = 0;
  std::int64_t head_dim = 0;         ///< 0: the features divided by num_query_heads
  bool heads_first_kernels = false;  ///< Gemma's kernel layout
  bool qkv_bias = false;             ///< Qwen: query, key and value have biases (output never does)
  /// Qwen 3: > 0 normalizes queries and keys per head with this epsilon (saved as "_query_dense_layer_norm" and
  /// "_key_dense_layer_norm", after their projections' kernels); 0: no such norms.
  double qk_norm_epsilon = 0.0;
  double rope_max_wavelength = 10000.0;
  double rope_scaling_factor = 1.0;  ///< keras-hub's RotaryEmbedding scaling_factor ("linear")
  /// Llama 3's frequency adjustment (LlamaRotaryEmbedding): all four set, or none (Config null).
  Config rope_frequency_adjustment_factor, rope_low_freq_factor, rope_high_freq_factor,
      rope_pretraining_sequence_length;
  bool llama_rotary = false;           ///< LlamaRotaryEmbedding: no position scaling, the adjustment above
  /// Phi-3's "su" scaling (Phi3SuScaledRotaryEmbedding), when `su_scaling`, with factors (head_dim / 2 each): each
  /// frequency divided by its short factor in a call over at most su_pretraining_sequence_length tokens, by its
  /// long factor over more, and the rotation scaled by sqrt(1 + ln(m / p) / ln(p)) when the model's
  /// su_max_sequence_length m exceeds p. Decoding, the prompt's pass counts the row's whole length and a step
  /// one token, as keras-hub's cached generate calls them.
  bool su_scaling = false;
  std::vector<double> su_short_factor, su_long_factor;
  std::int64_t su_max_sequence_length = 4096, su_pretraining_sequence_length = 4096;
  std::string rotary_attribute = "rope_layer";  ///< the rotary layer's attribute when not `underscored`
  /// Falcon: no rotary embedding; ALiBi instead (slope_h · the key's place among the row's unpadded keys, added
  /// to q·k before the scaling, the slopes keras-hub's _get_slopes); the output projection a Dense (hidden,
  /// hidden) with a bias; its attributes query_dense, ..., attention_dropout, output_dense, softmax. Decoding, the
  /// prompt's pass counts every slot as unpadded and a one-token step adds no ALiBi, as keras-hub's cached
  /// generate (which passes no padding mask) does.
  bool falcon = false;
  std::int64_t sliding_window = 0;     ///< 0: none; else keys with i - j >= window are not attended
  double logit_soft_cap = 0.0;         ///< 0: none
  double query_scale = 0.0;            ///< 0: 1 / sqrt(head_dim)
  double dropout = 0.0;                ///< training only
  bool dropout_on_weights = false;     ///< Gemma drops attention weights; the others the attended output
  Config kernel_initializer;           ///< glorot_uniform when null
  Config bias_initializer;             ///< zeros when null
};

/// The layer: called on (batch, steps, features) with an optional "padding_mask" (batch, steps) tensor
/// argument, 1 for the tokens that count; returns (batch, steps, features). Under a detail::DecodingScope it
/// decodes one token: its rotated key and its value go into slot `start` of caches (batch, slots, kv_heads,
/// depth), and the query attends the visible slots (within the window), as keras-hub's cached call does.
class GroupedQueryAttentionLayer : public Layer {
 public:
  explicit GroupedQueryAttentionLayer(GroupedQueryAttentionOptions options);
  const GroupedQueryAttentionOptions& options() const { return options_; }
  std::int64_t head_dim() const { return head_dim_; }  ///< 0 until built
  std::vector<std::string> keras_weight_paths() const override;
  std::vector<std::pair<std::string, std::string>> keras_sublayers() const override;
  /// The projections Keras's quantize("int8") makes int8, by their sublayers' names: the four EinsumDense (Falcon:
  /// three and its output Dense); none for Gemma, whose heads-first kernels kiln does not run in int8 (said by
  /// quantization_refusal).
  std::vector<std::string> quantizable_projections() const override;
  std::string projection_mode(std::size_t index) const override {
    return index < 4 ? quantization_[index].mode : std::string();
  }
  std::string quantization_refusal(const Layer& part) const override;

 protected:
  /// A DTypePolicyMap (a keras-hub backbone's) gives the projections their policies, at "<path>/<projection>": an
  /// int8 one keeps Keras's int8 EinsumDense weights (kernel int8, kernel_scale (1, 1, heads, depth), the output's
  /// (1, 1, hidden); Falcon's output Dense (hidden,)) and quantizes its inputs per row, as Keras's _int8_call. An
  /// int4 one keeps Keras's int4 weights (the kernel flattened to (rows, columns) and packed along the columns,
  /// kernel_scale, and by blocks kernel_zero and g_idx) and multiplies the float kernel they stand for (Falcon's
  /// output Dense per channel: the unpacked kernel, then the division by its scale, as Dense._int4_call).
  /// Gemma's quantized attention is refused by name.
  void quantization_resolved() override;
  void build(const Shape& input_shape) override;
  Tensor call(const Tensor& input, const CallArgs& args) override;
  std::vector<std::string> call_argument_names() const override { return {"padding_mask"}; }

 private:
  Tensor project(const Tensor& x, int projection, WeightId kernel, WeightId bias, std::int64_t heads) const;
  Tensor repeat_heads(const Tensor& x) const;  ///< (B, S, kv, D) -> (B, S, heads, D), each kv head repeated
  /// softmax(scale q kᵀ (capped), masked) v for q (B, T, heads, D) and k, v (B, S, heads, D); `mask` (B, S) or
  /// (B, T, S) may be empty; causal: keys after the query's position are not attended.
  Tensor attend(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& mask, bool causal,
                const CallArgs& args, const Tensor& like, const Tensor& bias = Tensor()) const;
  /// Falcon's ALiBi for keys at `positions` (batch or 1, S): (batch or 1, heads, 1, S).
  Tensor alibi(const Tensor& positions) const;
  std::string attribute(const std::string& name) const;

  GroupedQueryAttentionOptions options_;
  std::int64_t head_dim_ = 0, hidden_ = 0;
  Tensor normalized(const Tensor& x, WeightId scale) const;  ///< Qwen 3's per-head RMS norm (x when none)

  WeightId query_kernel_ = 0, query_bias_ = 0, key_kernel_ = 0, key_bias_ = 0, value_kernel_ = 0, value_bias_ = 0,
           output_kernel_ = 0, output_bias_ = 0, query_norm_ = 0, key_norm_ = 0;
  // int8 (Keras's EinsumDense._int8_call) per projection: query, key, value, output; their kernel scales.
  ProjectionQuantization quantization_[4];
  bool int8(int projection) const { return quantization_[projection].int8(); }
  bool int4(int projection) const { return quantization_[projection].int4(); }
  WeightId scale_[4] = {0, 0, 0, 0};
  LayerPtr rotary_;
};

}  // namespace kiln::hub
