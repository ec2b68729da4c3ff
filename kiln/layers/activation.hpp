#pragma once
// Activation: applies a named activation function elementwise (Keras's layers.Activation).
#include <string>

#include <kiln/layers/layer.hpp>

namespace kiln {

/// The layer behind kiln::Activation: applies one named activation function to its input. It has no
/// weights, and the output has the input's shape.
class ActivationLayer : public Layer {
 public:
  /// Arguments (Keras names): activation (required; a name ops::activation knows).
  /// A null or empty activation is the identity, "linear". A missing activation, an unknown activation name or
  /// an unknown key throws ConfigError.
  explicit ActivationLayer(const Config& config);
  /// The activation's name, such as "relu". Never empty: a null or empty one reads "linear".
  const std::string& activation() const { return activation_; }
  Config get_config() const override;

 protected:
  /// Applies the activation to `input` of any shape: elementwise, or over the last axis for "softmax" and
  /// "log_softmax".
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  std::string activation_;
};

/// Applies a named activation function: Keras's layers.Activation. Use it to put an activation between
/// other layers, for example after a Dense layer that has none of its own.
class Activation : public LayerHandle<ActivationLayer> {
 public:
  /// `activation` is an ops::activation name ("relu", "sigmoid", "softmax", ...); "" means "linear".
  /// `options` holds further config keys (name, trainable, dtype). An unknown name throws ConfigError.
  explicit Activation(const std::string& activation, const Config& options = {});
  /// Activation("relu"): a string literal would otherwise be ambiguous with the Config form.
  explicit Activation(const char* activation, const Config& options = {})
      : Activation(std::string(activation), options) {}
  /// From a whole config, with the keys of ActivationLayer(const Config&).
  explicit Activation(const Config& config) : LayerHandle(std::make_shared<ActivationLayer>(config)) {}
};

}  // namespace kiln
