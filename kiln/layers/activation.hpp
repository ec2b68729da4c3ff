#pragma once
// Activation: applies a named activation function elementwise (Keras's layers.Activation).
#include <string>

#include <kiln/layers/layer.hpp>

namespace kiln {

class ActivationLayer : public Layer {
 public:
  /// Arguments (Keras names): activation (required; a name ops::activation knows).
  explicit ActivationLayer(const Config& config);
  const std::string& activation() const { return activation_; }
  Config get_config() const override;

 protected:
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  std::string activation_;
};

class Activation : public LayerHandle<ActivationLayer> {
 public:
  explicit Activation(const std::string& activation, const Config& options = {});
  /// Activation("relu"): a string literal would otherwise be ambiguous with the Config form.
  explicit Activation(const char* activation, const Config& options = {})
      : Activation(std::string(activation), options) {}
  explicit Activation(const Config& config) : LayerHandle(std::make_shared<ActivationLayer>(config)) {}
};

}  // namespace kiln
