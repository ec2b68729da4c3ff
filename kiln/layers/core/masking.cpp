#include <kiln/layers/core/masking.hpp>

#include <kiln/ops/ops.hpp>

namespace kiln {

MaskingLayer::MaskingLayer(const Config& config) : Layer(config, "Masking") {
  ConfigReader args = config_reader(config);
  mask_value_ = args.number("mask_value", 0.0);
  args.finish();
}

Config MaskingLayer::get_config() const {
  Config config = base_config();
  config.set("mask_value", mask_value_);
  return config;
}

Tensor MaskingLayer::kept_steps(const Tensor& input) const {
  if (input.rank() < 2) shape_error("takes inputs of rank 2 or more, (batch, ..., features)", {{"input", input.shape()}});
  const Tensor differs = ops::scalar_like(input, 1.0) - ops::equal(input, ops::scalar_like(input, mask_value_));
  return ops::max(differs, {-1}, /*keepdims=*/true);
}

std::vector<Tensor> MaskingLayer::compute_mask(const std::vector<Tensor>& inputs, const Tensor&) const {
  return {ops::squeeze(kept_steps(inputs.at(0)), {-1})};
}

Tensor MaskingLayer::call(const Tensor& input, const CallArgs&) {
  return ops::where(kept_steps(input), input, ops::scalar_like(input, 0.0));
}

Masking::Masking(double mask_value, const Config& options)
    : LayerHandle(std::make_shared<MaskingLayer>(options.with("mask_value", mask_value))) {}

KILN_REGISTER_LAYER("kiln>Masking", MaskingLayer);

}  // namespace kiln
