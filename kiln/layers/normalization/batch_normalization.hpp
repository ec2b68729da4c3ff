#pragma once
// BatchNormalization, Keras 3's: in training, each feature is normalized with the batch's mean and biased
// variance, and the moving statistics follow them (moving = moving·momentum + batch·(1 − momentum), as
// state updates of the training step); at inference, and whenever the layer is not trainable, the moving
// statistics normalize instead: y = (x − moving_mean)·rsqrt(moving_variance + epsilon)·gamma + beta.
#include <cstdint>

#include <kiln/layers/layer.hpp>

namespace kiln {

/// The layer behind kiln::BatchNormalization. Its weights, each of the feature axis's size, are "gamma"
/// (with scale), "beta" (with center), "moving_mean" and "moving_variance" (not trainable), in Keras's
/// order.
class BatchNormalizationLayer : public Layer {
 public:
  bool supports_masking() const override { return true; }  ///< passes the mask on, as Keras's does
  /// Arguments (Keras names and defaults): axis = -1 (the feature axis), momentum = 0.99, epsilon = 1e-3,
  /// center = true, scale = true, beta_initializer = zeros, gamma_initializer = ones,
  /// moving_mean_initializer = zeros, moving_variance_initializer = ones, synchronized = false and
  /// renorm = false (only false), renorm_clipping = null, renorm_momentum = 0.99 (kept for the config).
  /// Regularizers and constraints must stay null. ConfigError for an epsilon that is not positive, a
  /// momentum outside [0, 1], an unsupported argument or an unknown key.
  explicit BatchNormalizationLayer(const Config& config);
  std::int64_t axis() const { return axis_; }    ///< the feature axis as given (negative from the end)
  double momentum() const { return momentum_; }  ///< the weight of the old moving statistics
  double epsilon() const { return epsilon_; }    ///< added to the variance before its square root
  bool center() const { return center_; }        ///< whether beta is added
  bool scale() const { return scale_; }          ///< whether gamma multiplies
  Config get_config() const override;

 protected:
  /// Creates the four weights for the input's feature axis. ShapeError naming the layer when the axis does
  /// not exist or its size is unknown.
  void build(const Shape& input_shape) override;
  /// Normalizes `input` (training mode: batch statistics and moving-statistics updates), keeping its shape.
  /// ShapeError for another rank or feature size than the layer was built for.
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  int feature_axis(const Shape& shape) const;
  void check_input(const Shape& input_shape) const;

  std::int64_t axis_ = -1;
  double momentum_ = 0.99, epsilon_ = 1e-3, renorm_momentum_ = 0.99;
  bool center_ = true, scale_ = true;
  Initializer beta_initializer_, gamma_initializer_, moving_mean_initializer_, moving_variance_initializer_;
  WeightRegularization beta_regularization_, gamma_regularization_;
  WeightId gamma_ = 0, beta_ = 0, moving_mean_ = 0, moving_variance_ = 0;
};

/// Normalizes each feature over the batch: Keras's layers.BatchNormalization.
///
///   kiln::Tensor h = kiln::BatchNormalization()(kiln::Conv2D(32, 3)(images));  // channels_last images
///   kiln::Tensor g = kiln::BatchNormalization(1)(nchw);                         // channels_first
class BatchNormalization : public LayerHandle<BatchNormalizationLayer> {
 public:
  /// The feature `axis` and further config keys in `options` (see BatchNormalizationLayer(const Config&)).
  explicit BatchNormalization(std::int64_t axis = -1, const Config& options = {});
  /// From a whole config, with the keys of BatchNormalizationLayer(const Config&).
  explicit BatchNormalization(const Config& config) : LayerHandle(std::make_shared<BatchNormalizationLayer>(config)) {}
};

}  // namespace kiln
