#pragma once
// Dropout: while training, zeroes each input element with probability `rate` and scales the rest by
// 1 / (1 - rate); at inference it is the identity (Keras's layers.Dropout).
#include <cstdint>
#include <optional>

#include <kiln/layers/layer.hpp>

namespace kiln {

/// The layer behind kiln::Dropout: inverted dropout of its input while training, the identity otherwise.
/// It has no weights.
class DropoutLayer : public Layer {
 public:
  /// Arguments (Keras names and defaults): rate (required, in [0, 1)), noise_shape = null (only null is
  /// supported), seed = null (then the mask stream is keyed by the layer's name).
  /// Throws ConfigError when rate is missing or outside [0, 1), noise_shape is set, or a key is unknown.
  explicit DropoutLayer(const Config& config);
  double rate() const { return rate_; }  ///< the probability that an element is dropped
  /// The seed of the masks, if the config gave one; without it the masks are keyed by the layer's name.
  const std::optional<std::int64_t>& seed() const { return seed_; }
  Config get_config() const override;

 protected:
  /// When `args` says training, zeroes each element with probability rate and scales the rest by
  /// 1 / (1 - rate); otherwise returns the input. Each call of the layer in a graph draws its own masks,
  /// and a graph built the same way draws the same ones.
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  double rate_ = 0.0;
  std::optional<std::int64_t> seed_;
};

/// Randomly zeroes inputs while training, against overfitting: Keras's layers.Dropout. fit() trains with it,
/// predict() and evaluate() run it as the identity.
class Dropout : public LayerHandle<DropoutLayer> {
 public:
  /// Drops each element with probability `rate`, in [0, 1). `options` holds further config keys: seed (an
  /// integer, for masks that do not depend on the layer's name), name, trainable, dtype.
  explicit Dropout(double rate, const Config& options = {});
  /// From a whole config, with the keys of DropoutLayer(const Config&).
  explicit Dropout(const Config& config) : LayerHandle(std::make_shared<DropoutLayer>(config)) {}
};

}  // namespace kiln
