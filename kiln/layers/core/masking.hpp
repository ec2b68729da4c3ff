#pragma once
// Masking: marks the steps of a sequence whose features all equal mask_value as padding, so that the
// layers after it skip them (recurrent layers keep their state there, pooling and losses leave them out).
//
//   kiln::Tensor x = kiln::Input({kiln::Shape::unknown, 20, 8});
//   kiln::Tensor h = kiln::LSTM(16)(kiln::Masking(0.0)(x));   // all-zero steps are skipped
#include <kiln/layers/layer.hpp>

namespace kiln {

/// The layer behind kiln::Masking.
class MaskingLayer : public Layer {
 public:
  /// Keras's argument: mask_value = 0.0.
  explicit MaskingLayer(const Config& config);
  double mask_value() const { return mask_value_; }  ///< a step whose features all equal it is padding
  Config get_config() const override;
  bool supports_masking() const override { return true; }
  /// Keras's: 1 for the steps with a feature other than mask_value, 0 for the others; (batch, steps) for
  /// an input (batch, steps, features).
  std::vector<Tensor> compute_mask(const std::vector<Tensor>& inputs, const Tensor& mask) const override;

 protected:
  /// The input with its padding steps set to 0, as Keras's.
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  Tensor kept_steps(const Tensor& input) const;  ///< (..., 1): 1 where some feature differs from mask_value
  double mask_value_ = 0.0;
};

/// Masks the steps of a sequence that hold only `mask_value`: Keras's layers.Masking.
class Masking : public LayerHandle<MaskingLayer> {
 public:
  /// Steps whose features all equal `mask_value` become padding; further keys in `options` (name, ...).
  explicit Masking(double mask_value = 0.0, const Config& options = {});
  /// From a whole config, with the keys of MaskingLayer(const Config&).
  explicit Masking(const Config& config) : LayerHandle(std::make_shared<MaskingLayer>(config)) {}
};

}  // namespace kiln
