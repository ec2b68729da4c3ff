#pragma once
// The activation layers of Keras's layers/activations: Activation (a named function), and the layers with
// arguments of their own: ReLU, LeakyReLU, ELU, Softmax and PReLU (whose slopes are weights).
#include <cstdint>
#include <string>
#include <vector>

#include <kiln/layers/layer.hpp>

namespace kiln {

/// The layer behind kiln::Activation: applies one named activation function to its input. It has no
/// weights, and the output has the input's shape.
class ActivationLayer : public Layer {
 public:
  bool supports_masking() const override { return true; }  ///< passes the mask on, as Keras's does
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

/// The layer behind kiln::ReLU: Keras's ReLU with its three arguments, y = min(x, max_value) for x at or
/// above threshold, negative_slope · (x − threshold) below it.
class ReLULayer : public Layer {
 public:
  bool supports_masking() const override { return true; }  ///< passes the mask on, as Keras's does
  /// Arguments (Keras names and defaults): max_value = null (no cap), negative_slope = 0, threshold = 0;
  /// ConfigError for a negative one or an unknown key.
  explicit ReLULayer(const Config& config);
  Config get_config() const override;

 protected:
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  Config max_value_;
  double negative_slope_ = 0.0, threshold_ = 0.0;
};

/// The layer behind kiln::LeakyReLU: x for x ≥ 0, negative_slope · x below.
class LeakyReLULayer : public Layer {
 public:
  bool supports_masking() const override { return true; }  ///< passes the mask on, as Keras's does
  /// Arguments: negative_slope = 0.3 (Keras 3's default; Keras 2's name for it, alpha, is read too).
  /// ConfigError for a negative slope or an unknown key.
  explicit LeakyReLULayer(const Config& config);
  Config get_config() const override;

 protected:
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  double negative_slope_ = 0.3;
};

/// The layer behind kiln::ELU: x for x > 0, alpha · (exp(x) − 1) below.
class ELULayer : public Layer {
 public:
  bool supports_masking() const override { return true; }  ///< passes the mask on, as Keras's does
  /// Arguments: alpha = 1.0. ConfigError on an unknown key.
  explicit ELULayer(const Config& config);
  Config get_config() const override;

 protected:
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  double alpha_ = 1.0;
};

/// The layer behind kiln::Softmax: softmax over an axis, or jointly over several.
class SoftmaxLayer : public Layer {
 public:
  bool supports_masking() const override { return true; }  ///< passes the mask on, as Keras's does
  /// Arguments: axis = -1 (an int or a list of ints). ConfigError on an unknown key or an empty list; an
  /// axis the input lacks is refused when the layer is called (ShapeError).
  explicit SoftmaxLayer(const Config& config);
  Config get_config() const override;

 protected:
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  std::vector<std::int64_t> axis_;
  bool axis_is_list_ = false;
};

/// The layer behind kiln::PReLU: x for x ≥ 0, alpha · x below, with alpha a weight of the input's shape
/// without its batch axis (size 1 along shared_axes).
class PReLULayer : public Layer {
 public:
  bool supports_masking() const override { return true; }  ///< passes the mask on, as Keras's does
  /// Arguments: alpha_initializer = zeros, alpha_regularizer, alpha_constraint, shared_axes = null (an int
  /// or a list of axes, counted with the batch axis as 0). ConfigError on an unknown key.
  explicit PReLULayer(const Config& config);
  Config get_config() const override;

 protected:
  /// Creates "alpha". ShapeError when an axis alpha spans has an unknown size or a shared axis does not exist.
  void build(const Shape& input_shape) override;
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  Initializer alpha_initializer_;
  WeightRegularization alpha_regularization_;
  std::vector<std::int64_t> shared_axes_;
  bool shared_axes_given_ = false, shared_axes_is_list_ = false;
  WeightId alpha_ = 0;
};

/// Keras's layers.ReLU: a rectifier with an optional cap, threshold and leak.
class ReLU : public LayerHandle<ReLULayer> {
 public:
  /// `options` holds the config keys (max_value, negative_slope, threshold, name, ...).
  explicit ReLU(const Config& options = {}) : LayerHandle(std::make_shared<ReLULayer>(options)) {}
};

/// Keras's layers.LeakyReLU.
class LeakyReLU : public LayerHandle<LeakyReLULayer> {
 public:
  /// `negative_slope` multiplies negative inputs; `options` holds further keys (name, ...).
  explicit LeakyReLU(double negative_slope = 0.3, const Config& options = {})
      : LayerHandle(std::make_shared<LeakyReLULayer>(options.with("negative_slope", negative_slope))) {}
  /// From a whole config, with the keys of LeakyReLULayer(const Config&).
  explicit LeakyReLU(const Config& config) : LayerHandle(std::make_shared<LeakyReLULayer>(config)) {}
};

/// Keras's layers.ELU.
class ELU : public LayerHandle<ELULayer> {
 public:
  /// `alpha` scales the negative part; `options` holds further keys (name, ...).
  explicit ELU(double alpha = 1.0, const Config& options = {})
      : LayerHandle(std::make_shared<ELULayer>(options.with("alpha", alpha))) {}
  /// From a whole config, with the keys of ELULayer(const Config&).
  explicit ELU(const Config& config) : LayerHandle(std::make_shared<ELULayer>(config)) {}
};

/// Keras's layers.Softmax.
class Softmax : public LayerHandle<SoftmaxLayer> {
 public:
  /// Softmax over `axis`; `options` holds further keys (name, or a list "axis").
  explicit Softmax(std::int64_t axis = -1, const Config& options = {})
      : LayerHandle(std::make_shared<SoftmaxLayer>(options.with("axis", axis))) {}
  /// From a whole config, with the keys of SoftmaxLayer(const Config&).
  explicit Softmax(const Config& config) : LayerHandle(std::make_shared<SoftmaxLayer>(config)) {}
};

/// Keras's layers.PReLU: a leaky rectifier whose slopes are learned.
class PReLU : public LayerHandle<PReLULayer> {
 public:
  /// `options` holds the config keys (alpha_initializer, shared_axes, name, ...).
  explicit PReLU(const Config& options = {}) : LayerHandle(std::make_shared<PReLULayer>(options)) {}
};

}  // namespace kiln
