#include <kiln/layers/activation.hpp>

#include <kiln/ops/ops.hpp>

namespace kiln {

ActivationLayer::ActivationLayer(const Config& config) : Layer(config, "Activation") {
  ConfigReader args = config_reader(config);
  // Required, as in Keras; null (Keras's None) is the identity.
  if (config.find("activation") == nullptr) args.fail("the argument 'activation' is required");
  activation_ = args.text("activation", "linear");
  args.finish();
  if (activation_.empty()) activation_ = "linear";
  ops::check_activation(activation_, describe());
}

Config ActivationLayer::get_config() const {
  Config config = base_config();
  config.set("activation", activation_);
  return config;
}

Tensor ActivationLayer::call(const Tensor& input, const CallArgs&) { return ops::activation(input, activation_); }

Activation::Activation(const std::string& activation, const Config& options)
    : LayerHandle(
          std::make_shared<ActivationLayer>(options.with("activation", activation.empty() ? "linear" : activation))) {}

KILN_REGISTER_LAYER("kiln>Activation", ActivationLayer);

}  // namespace kiln
