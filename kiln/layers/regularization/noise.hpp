#pragma once
// GaussianNoise and GaussianDropout: multiplicative or additive normal noise while training, the identity
// at inference (Keras's layers.GaussianNoise and layers.GaussianDropout), against overfitting.
//   GaussianNoise:   x + N(0, stddev²)
//   GaussianDropout: x · N(1, rate / (1 − rate)), the variance of inverted dropout's mask at that rate
#include <cstdint>
#include <optional>
#include <string>

#include <kiln/layers/layer.hpp>

namespace kiln {

/// The layer behind kiln::GaussianNoise and kiln::GaussianDropout (one class each, sharing this one).
class NoiseLayer : public Layer {
 public:
  bool supports_masking() const override { return true; }  ///< passes the mask on, as Keras's does
  /// The amount: GaussianNoise's stddev or GaussianDropout's rate.
  double amount() const { return amount_; }
  /// The seed of the draws, if the config gave one; without it they are keyed by the layer's name.
  const std::optional<std::int64_t>& seed() const { return seed_; }
  Config get_config() const override;

 protected:
  /// Reads `amount_key` (required, in [0, 1] as Keras checks; a GaussianDropout rate below 1) and seed.
  NoiseLayer(const Config& config, const std::string& class_name, const char* amount_key, bool multiplicative);
  /// The noisy input while training, the input itself otherwise. Each call of the layer in a graph draws
  /// its own noise, new at every training step.
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  const char* amount_key_;
  bool multiplicative_;
  double amount_ = 0.0;
  std::optional<std::int64_t> seed_;
};

/// The layer behind kiln::GaussianNoise.
class GaussianNoiseLayer : public NoiseLayer {
 public:
  /// Arguments (Keras's): stddev (required, in [0, 1]), seed = null.
  explicit GaussianNoiseLayer(const Config& config) : NoiseLayer(config, "GaussianNoise", "stddev", false) {}
};

/// The layer behind kiln::GaussianDropout.
class GaussianDropoutLayer : public NoiseLayer {
 public:
  /// Arguments (Keras's): rate (required, in [0, 1)), seed = null.
  explicit GaussianDropoutLayer(const Config& config) : NoiseLayer(config, "GaussianDropout", "rate", true) {}
};

/// Adds zero-mean normal noise of `stddev` while training: Keras's layers.GaussianNoise, a regularizer
/// and a data augmentation for real-valued inputs.
///
///   kiln::Tensor h = kiln::GaussianNoise(0.1)(features);
class GaussianNoise : public LayerHandle<GaussianNoiseLayer> {
 public:
  /// Noise of standard deviation `stddev`; further config keys (seed, name, dtype) in `options`.
  explicit GaussianNoise(double stddev, const Config& options = {});
  /// From a whole config.
  explicit GaussianNoise(const Config& config) : LayerHandle(std::make_shared<GaussianNoiseLayer>(config)) {}
};

/// Multiplies by mean-one normal noise while training: Keras's layers.GaussianDropout, dropout's smooth
/// counterpart.
class GaussianDropout : public LayerHandle<GaussianDropoutLayer> {
 public:
  /// Noise of variance rate / (1 − rate); further config keys (seed, name, dtype) in `options`.
  explicit GaussianDropout(double rate, const Config& options = {});
  /// From a whole config.
  explicit GaussianDropout(const Config& config) : LayerHandle(std::make_shared<GaussianDropoutLayer>(config)) {}
};

}  // namespace kiln
