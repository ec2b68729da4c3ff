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
// Unlike Keras, a query with no key to attend gets zeros rather than a uniform average, the same
// rule as every attention layer in kiln.
#include <cstdint>
#include <string>

#include <kiln/layers/layer.hpp>

namespace kiln {

class DotProductAttentionLayer : public Layer {
 public:
  explicit DotProductAttentionLayer(const Config& config);
  bool use_scale() const { return use_scale_; }
  Config get_config() const override;

 protected:
  void build(const std::vector<Shape>& input_shapes) override;
  std::vector<Tensor> call(const std::vector<Tensor>& inputs, const CallArgs& args) override;
  std::vector<std::string> call_argument_names() const override {
    return {"mask", "use_causal_mask", "return_attention_scores"};
  }
  std::pair<std::size_t, std::size_t> input_count() const override { return {2, 3}; }

 private:
  bool use_scale_ = true;
  double scale_ = 1.0;
};

class DotProductAttention : public LayerHandle<DotProductAttentionLayer> {
 public:
  explicit DotProductAttention(bool use_scale = true, const Config& options = {});
  explicit DotProductAttention(const Config& config)
      : LayerHandle(std::make_shared<DotProductAttentionLayer>(config)) {}
};

class AttentionLayer : public Layer {
 public:
  explicit AttentionLayer(const Config& config);
  Config get_config() const override;

 protected:
  void build(const std::vector<Shape>& input_shapes) override;
  std::vector<Tensor> call(const std::vector<Tensor>& inputs, const CallArgs& args) override;
  std::vector<std::string> call_argument_names() const override {
    return {"query_mask", "value_mask", "use_causal_mask", "return_attention_scores"};
  }
  std::pair<std::size_t, std::size_t> input_count() const override { return {2, 3}; }

 private:
  Tensor scores(const Tensor& query, const Tensor& key) const;

  bool use_scale_ = false;
  std::string score_mode_ = "dot";
  double dropout_ = 0.0;
  Config seed_;
  WeightId scale_ = 0, concat_score_weight_ = 0;
};

class Attention : public LayerHandle<AttentionLayer> {
 public:
  explicit Attention(bool use_scale = false, const std::string& score_mode = "dot", const Config& options = {});
  explicit Attention(const Config& config) : LayerHandle(std::make_shared<AttentionLayer>(config)) {}
};

}  // namespace kiln
