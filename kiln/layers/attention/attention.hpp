#pragma once
// Attention layers without projections.
//
// DotProductAttention(use_scale = true), as in the original 'Attention is all you need' TF2 code:
// called on [query, key, value] (or [query, value], key = value), it computes softmax(Q·Kᵀ·s)·V with
// s = 1/√d_k fixed when use_scale (d_k: the query's last dimension at build) and s = 1 otherwise.
// Call arguments: tensor "mask" ((batch, S) padding or (batch, T, S); 1 = may attend), options
// "use_causal_mask" and "return_attention_scores" (then the outputs are [output, weights (batch, T, S)]).
//
// Attention(use_scale = false, score_mode = "dot", dropout = 0, seed = null) is Keras's
// keras.layers.Attention: called on [query, value] or [query, value, key] (Keras's order); "dot" scores
// are q·kᵀ with no 1/√d, times a learned scalar `scale` when use_scale; "concat" scores are
// concat_score_weight·Σ tanh(scale·(q + k)). Call arguments: tensors "query_mask" (batch, T) and
// "value_mask" (batch, S), options "use_causal_mask", "return_attention_scores".
// A query with no key to attend gets zeros, the same rule as every attention layer in kiln and as Keras
// 3.14+'s MultiHeadAttention; Keras's Attention layer (an additive -1e9 bias) gives it a uniform average.
#include <cstdint>
#include <string>

#include <kiln/layers/layer.hpp>

namespace kiln {

/// The layer behind kiln::DotProductAttention: scaled dot-product attention with no weights. Inputs are
/// (batch, ..., length, depth), all of one rank (at least 3) and equal before their last two dimensions;
/// the query's depth must be known and equal the key's, and the key's length the value's.
class DotProductAttentionLayer : public Layer {
 public:
  /// Arguments: use_scale = true (scale the scores by 1/√d_k). Throws ConfigError on an unknown key.
  explicit DotProductAttentionLayer(const Config& config);
  /// Whether the scores are scaled by 1/√d_k, d_k being the query's depth at build.
  bool use_scale() const { return use_scale_; }
  Config get_config() const override;

 protected:
  /// Checks the shapes of [query, key, value] (or [query, value]) and fixes the scale from the query's depth.
  void build(const std::vector<Shape>& input_shapes) override;
  /// softmax(Q·Kᵀ·s)·V on [query, key, value], or [query, value] with the value as key: [output] of shape
  /// (batch, ..., T, value depth), or [output, weights (batch, ..., T, S)] with return_attention_scores.
  /// From `args`: "mask" (batch, S) or (batch, T, S), 0 where a key may not be attended; "use_causal_mask".
  /// A query whose depth differs from the one at build throws ShapeError.
  std::vector<Tensor> call(const std::vector<Tensor>& inputs, const CallArgs& args) override;
  std::vector<std::string> call_argument_names() const override {
    return {"mask", "use_causal_mask", "return_attention_scores"};
  }
  std::pair<std::size_t, std::size_t> input_count() const override { return {2, 3}; }

 private:
  bool use_scale_ = true;
  double scale_ = 1.0;
};

/// Scaled dot-product attention without projections, as in the 'Attention is all you need' TF2 code: the
/// core of a Transformer head, for when the projections are elsewhere.
///
///   kiln::Tensor context = kiln::DotProductAttention()({query, key, value});
class DotProductAttention : public LayerHandle<DotProductAttentionLayer> {
 public:
  /// `use_scale`: scale the scores by 1/√d_k (else 1). `options` holds further config keys: name, trainable,
  /// dtype.
  explicit DotProductAttention(bool use_scale = true, const Config& options = {});
  /// From a whole config, with the keys of DotProductAttentionLayer(const Config&).
  explicit DotProductAttention(const Config& config)
      : LayerHandle(std::make_shared<DotProductAttentionLayer>(config)) {}
};

/// The layer behind kiln::Attention. Its weights are scalars initialized to 1: "scale" with use_scale and
/// "concat_score_weight" with score_mode "concat". Inputs follow the shape rule of DotProductAttentionLayer.
class AttentionLayer : public Layer {
 public:
  /// Arguments (Keras names and defaults): use_scale = false, score_mode = "dot" (or "concat"), dropout = 0
  /// (in [0, 1): on the attention weights, while training), seed = null (an integer; without it the
  /// dropout stream is keyed by the layer's name). Throws ConfigError on another score_mode, a dropout
  /// outside [0, 1), a seed that is not an integer or an unknown key.
  explicit AttentionLayer(const Config& config);
  Config get_config() const override;
  /// The output keeps the query's steps: the query's mask passes on, as in Keras.
  bool supports_masking() const override { return true; }

 protected:
  /// Checks the shapes of [query, value] or [query, value, key] and creates the weights.
  void build(const std::vector<Shape>& input_shapes) override;
  /// Attention of [query, value] (the value is the key) or [query, value, key]: [output] of shape
  /// (batch, ..., T, value depth), or [output, weights (batch, ..., T, S)] with return_attention_scores.
  /// From `args`: "value_mask" (batch, S) or (batch, T, S), 0 where a key may not be attended;
  /// "query_mask" (batch, T), which zeroes the outputs of masked queries; "use_causal_mask".
  std::vector<Tensor> call(const std::vector<Tensor>& inputs, const CallArgs& args) override;
  std::vector<std::string> call_argument_names() const override {
    return {"query_mask", "value_mask", "use_causal_mask", "return_attention_scores"};
  }
  /// The query's and the value's masks fill query_mask and value_mask, as Keras's mask=[query, value].
  std::vector<std::string> input_mask_arguments() const override { return {"query_mask", "value_mask"}; }
  std::pair<std::size_t, std::size_t> input_count() const override { return {2, 3}; }

 private:
  Tensor scores(const Tensor& query, const Tensor& key) const;

  bool use_scale_ = false;
  std::string score_mode_ = "dot";
  double dropout_ = 0.0;
  Config seed_;
  WeightId scale_ = 0, concat_score_weight_ = 0;
};

/// Dot-product (Luong-style) or additive (Bahdanau-style) attention: Keras's layers.Attention, called on
/// [query, value] or [query, value, key], in Keras's order.
///
///   kiln::Tensor context = kiln::Attention()({query, value});
class Attention : public LayerHandle<AttentionLayer> {
 public:
  /// `use_scale` learns a scalar that multiplies the scores ("dot") or the sums inside tanh ("concat");
  /// `score_mode` is "dot" (q·kᵀ, not divided by √d) or "concat". `options` holds further config keys:
  /// dropout, seed, name, trainable, dtype.
  explicit Attention(bool use_scale = false, const std::string& score_mode = "dot", const Config& options = {});
  /// From a whole config, with the keys of AttentionLayer(const Config&).
  explicit Attention(const Config& config) : LayerHandle(std::make_shared<AttentionLayer>(config)) {}
};

}  // namespace kiln
