#include <kiln/hub/layers/rms_norm.hpp>

#include <kiln/ops/ops.hpp>

namespace kiln::hub {

HubRMSNormLayer::HubRMSNormLayer(const Config& config, const std::string& class_name, double offset)
    : Layer(config, class_name), offset_(offset) {
  ConfigReader args = config_reader(config);
  epsilon_ = args.number("epsilon", 1e-6);
  args.finish();
  if (!(epsilon_ > 0.0)) args.fail("epsilon must be positive, got " + std::to_string(epsilon_));
}

Config HubRMSNormLayer::get_config() const {
  Config config = base_config();
  config.set("epsilon", epsilon_);
  return config;
}

void HubRMSNormLayer::build(const Shape& input_shape) {
  if (input_shape.rank() < 1 || input_shape[input_shape.rank() - 1] == Shape::unknown)
    shape_error("needs a known last axis", {{"input", input_shape}});
  scale_ = add_weight("scale", Shape{input_shape[input_shape.rank() - 1]},
                      Initializer::get(offset_ == 0.0 ? "ones" : "zeros"));
}

Tensor HubRMSNormLayer::call(const Tensor& input, const CallArgs&) {
  const Shape& built = build_shapes().at(0);
  if (input.rank() < 1 || input.shape()[input.rank() - 1] != built[built.rank() - 1])
    shape_error("was built for another last axis", {{"built for", built}, {"input", input.shape()}});
  const Tensor scale = variable(scale_, input);
  return ops::rms_norm(input, offset_ == 0.0 ? scale : scale + offset_, epsilon_);
}

KILN_REGISTER_LAYER("keras_hub>LlamaLayerNorm", LlamaLayerNormLayer);
KILN_REGISTER_LAYER("keras_hub>MistralLayerNormalization", MistralLayerNormalizationLayer);
KILN_REGISTER_LAYER("keras_hub>QwenLayerNorm", QwenLayerNormLayer);
KILN_REGISTER_LAYER("keras_hub>Qwen3LayerNorm", Qwen3LayerNormLayer);
KILN_REGISTER_LAYER("keras_hub>Phi3LayerNorm", Phi3LayerNormLayer);
KILN_REGISTER_LAYER("keras_hub>RMSNormalization", GemmaRMSNormalizationLayer);

}  // namespace kiln::hub
