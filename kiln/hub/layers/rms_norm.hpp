#pragma once
// The root-mean-square norms of keras-hub's decoder families: x · rsqrt(mean(x²) + epsilon) · scale over the last axis,
// computed in float32. Llama's LlamaLayerNorm, Mistral's MistralLayerNormalization, Qwen's QwenLayerNorm, Qwen 3's
// Qwen3LayerNorm and Phi-3's Phi3LayerNorm multiply by `scale` (made ones); Gemma's RMSNormalization by 1 + `scale`
// (made zeros). Each is registered under keras-hub's name ("keras_hub>LlamaLayerNorm", ...), with its one config key,
// epsilon, and its one weight, "scale", as keras-hub names and saves it.
#include <kiln/layers/layer.hpp>

namespace kiln::hub {

/// What the six norms share; `offset` is 1 for Gemma's (1 + scale), 0 for the others.
class HubRMSNormLayer : public Layer {
 public:
  double epsilon() const { return epsilon_; }
  Config get_config() const override;
  bool supports_masking() const override { return true; }

 protected:
  /// Reads epsilon (default 1e-6, positive); refuses other keys.
  HubRMSNormLayer(const Config& config, const std::string& class_name, double offset);
  void build(const Shape& input_shape) override;
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  double epsilon_ = 1e-6;
  double offset_ = 0.0;
  WeightId scale_ = 0;
};

/// keras-hub's LlamaLayerNorm (Llama, Llama 3).
class LlamaLayerNormLayer final : public HubRMSNormLayer {
 public:
  explicit LlamaLayerNormLayer(const Config& config) : HubRMSNormLayer(config, "LlamaLayerNorm", 0.0) {}
};
/// keras-hub's MistralLayerNormalization.
class MistralLayerNormalizationLayer final : public HubRMSNormLayer {
 public:
  explicit MistralLayerNormalizationLayer(const Config& config)
      : HubRMSNormLayer(config, "MistralLayerNormalization", 0.0) {}
};
/// keras-hub's QwenLayerNorm.
class QwenLayerNormLayer final : public HubRMSNormLayer {
 public:
  explicit QwenLayerNormLayer(const Config& config) : HubRMSNormLayer(config, "QwenLayerNorm", 0.0) {}
};
/// keras-hub's Qwen3LayerNorm (Qwen 3's block and output norms; its attention's per-head norms are the
/// attention's own weights).
class Qwen3LayerNormLayer final : public HubRMSNormLayer {
 public:
  explicit Qwen3LayerNormLayer(const Config& config) : HubRMSNormLayer(config, "Qwen3LayerNorm", 0.0) {}
};
/// keras-hub's Phi3LayerNorm.
class Phi3LayerNormLayer final : public HubRMSNormLayer {
 public:
  explicit Phi3LayerNormLayer(const Config& config) : HubRMSNormLayer(config, "Phi3LayerNorm", 0.0) {}
};
/// keras-hub's Gemma RMSNormalization: x · rsqrt(mean(x²) + epsilon) · (1 + scale), scale made zeros.
class GemmaRMSNormalizationLayer final : public HubRMSNormLayer {
 public:
  explicit GemmaRMSNormalizationLayer(const Config& config) : HubRMSNormLayer(config, "RMSNormalization", 1.0) {}
};

}  // namespace kiln::hub
