#pragma once
// Dropout and SpatialDropout1D/2D: while training, zero each input element (or each whole feature map)
// with probability `rate` and scale the rest by 1 / (1 - rate); at inference they are the identity
// (Keras's layers.Dropout, layers.SpatialDropout1D, layers.SpatialDropout2D).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <kiln/layers/layer.hpp>

namespace kiln {

/// The layer behind kiln::Dropout: inverted dropout of its input while training, the identity otherwise.
/// It has no weights.
class DropoutLayer : public Layer {
 public:
  bool supports_masking() const override { return true; }  ///< passes the mask on, as Keras's does
  /// Arguments (Keras names and defaults): rate (required, in [0, 1)), noise_shape = null (a list of the
  /// input's rank, each entry null or the input's size on that axis, or 1 to share one draw along it),
  /// seed = null (then the mask stream is keyed by the layer's name).
  /// Throws ConfigError when rate is missing or outside [0, 1), noise_shape is not a list of ints and nulls,
  /// or a key is unknown.
  explicit DropoutLayer(const Config& config);
  double rate() const { return rate_; }  ///< the probability that an element is dropped
  /// The seed of the masks, if the config gave one; without it the masks are keyed by the layer's name.
  const std::optional<std::int64_t>& seed() const { return seed_; }
  Config get_config() const override;

 protected:
  /// The spatial dropouts: `class_name` with a fixed noise shape for inputs of rank `spatial_rank` + 2
  /// (and data_format for 2-D), no noise_shape argument.
  DropoutLayer(const Config& config, const std::string& class_name, int spatial_rank);
  /// When `args` says training, zeroes each element (or each slice along the broadcast axes) with
  /// probability rate and scales the rest by 1 / (1 - rate); otherwise returns the input. Each call of the
  /// layer in a graph draws its own masks, and a graph built the same way draws the same ones. ShapeError
  /// naming the layer for an input the noise shape does not fit.
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  void read_common(ConfigReader& args);
  // The axes one draw is shared along, for `input_shape`; empty for plain dropout.
  std::vector<int> broadcast_axes(const Shape& input_shape) const;

  double rate_ = 0.0;
  std::optional<std::int64_t> seed_;
  int spatial_rank_ = 0;     ///< 0: Dropout; 1 or 2: SpatialDropout1D or 2D
  Config noise_shape_;       ///< Dropout's noise_shape as given (null: none)
  std::string data_format_;  ///< SpatialDropout2D's
};

/// The layer behind kiln::SpatialDropout1D: drops whole channels of a (batch, steps, channels) input.
class SpatialDropout1DLayer : public DropoutLayer {
 public:
  /// Arguments (Keras's): rate (required, in [0, 1)), seed = null.
  explicit SpatialDropout1DLayer(const Config& config) : DropoutLayer(config, "SpatialDropout1D", 1) {}
};

/// The layer behind kiln::SpatialDropout2D: drops whole feature maps of an image batch.
class SpatialDropout2DLayer : public DropoutLayer {
 public:
  /// Arguments (Keras's): rate (required, in [0, 1)), data_format = "channels_last", seed = null.
  explicit SpatialDropout2DLayer(const Config& config) : DropoutLayer(config, "SpatialDropout2D", 2) {}
};

/// Randomly zeroes inputs while training, against overfitting: Keras's layers.Dropout. fit() trains with it,
/// predict() and evaluate() run it as the identity.
class Dropout : public LayerHandle<DropoutLayer> {
 public:
  /// Drops each element with probability `rate`, in [0, 1). `options` holds further config keys: seed (an
  /// integer, for masks that do not depend on the layer's name), noise_shape, name, trainable, dtype.
  explicit Dropout(double rate, const Config& options = {});
  /// From a whole config, with the keys of DropoutLayer(const Config&).
  explicit Dropout(const Config& config) : LayerHandle(std::make_shared<DropoutLayer>(config)) {}
};

/// Dropout of whole channels of a sequence, for convolutional sequence models whose neighbouring steps are
/// correlated: Keras's layers.SpatialDropout1D.
///
///   kiln::Tensor h = kiln::SpatialDropout1D(0.2)(kiln::Conv1D(64, 5, "relu")(x));
class SpatialDropout1D : public LayerHandle<SpatialDropout1DLayer> {
 public:
  /// Drops each channel of each sample with probability `rate`; further config keys (seed, name, dtype).
  explicit SpatialDropout1D(double rate, const Config& options = {});
  /// From a whole config.
  explicit SpatialDropout1D(const Config& config) : LayerHandle(std::make_shared<SpatialDropout1DLayer>(config)) {}
};

/// Dropout of whole feature maps of images: Keras's layers.SpatialDropout2D.
class SpatialDropout2D : public LayerHandle<SpatialDropout2DLayer> {
 public:
  /// Drops each feature map of each sample with probability `rate`; further config keys (data_format, seed,
  /// name, dtype).
  explicit SpatialDropout2D(double rate, const Config& options = {});
  /// From a whole config.
  explicit SpatialDropout2D(const Config& config) : LayerHandle(std::make_shared<SpatialDropout2DLayer>(config)) {}
};

}  // namespace kiln
