#pragma once
// ActivityRegularization: the identity, whose output's L1 and L2 penalties (divided by the batch size)
// join the training loss (Keras's layers.ActivityRegularization).
#include <kiln/layers/layer.hpp>

namespace kiln {

/// The layer behind kiln::ActivityRegularization: an activity regularizer L1L2(l1, l2) on the identity.
class ActivityRegularizationLayer : public Layer {
 public:
  bool supports_masking() const override { return true; }  ///< passes the mask on, as Keras's does
  /// Arguments (Keras's): l1 = 0.0, l2 = 0.0, non-negative. ConfigError otherwise or for an unknown key.
  explicit ActivityRegularizationLayer(const Config& config);
  double l1() const { return l1_; }  ///< the factor of Σ|x|
  double l2() const { return l2_; }  ///< the factor of Σx²
  /// The base keys with l1 and l2 (no activity_regularizer: it is this layer's own, as in Keras).
  Config get_config() const override;

 protected:
  /// The input itself; the penalty is recorded by the call.
  Tensor call(const Tensor& input, const CallArgs& /*args*/) override { return input; }

 private:
  double l1_ = 0.0, l2_ = 0.0;
};

/// Penalizes the activations that pass through it: Keras's layers.ActivityRegularization.
///
///   kiln::Tensor sparse = kiln::ActivityRegularization(1e-4)(kiln::Dense(64, "relu")(x));
class ActivityRegularization : public LayerHandle<ActivityRegularizationLayer> {
 public:
  /// l1 · Σ|x| + l2 · Σx², divided by the batch size, added to the loss; further config keys in `options`.
  explicit ActivityRegularization(double l1 = 0.0, double l2 = 0.0, const Config& options = {});
  /// From a whole config.
  explicit ActivityRegularization(const Config& config)
      : LayerHandle(std::make_shared<ActivityRegularizationLayer>(config)) {}
};

}  // namespace kiln
