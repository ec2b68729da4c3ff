#pragma once
// UnitNormalization: each vector scaled to unit length, a fixed, weightless transform (Keras's
// layers.UnitNormalization).
#include <cstdint>
#include <vector>

#include <kiln/layers/layer.hpp>

namespace kiln {

/// The layer behind kiln::UnitNormalization: each vector along `axis` scaled to unit L2 norm.
class UnitNormalizationLayer : public Layer {
 public:
  bool supports_masking() const override { return true; }  ///< passes the mask on, as Keras's does
  /// Arguments (Keras's): axis = -1, an int or a list of ints. ConfigError for another type.
  explicit UnitNormalizationLayer(const Config& config);
  /// The axes normalized over, as given (negative from the end).
  const std::vector<std::int64_t>& axis() const { return axis_; }
  Config get_config() const override;

 protected:
  /// Checks every axis exists (ShapeError naming the layer otherwise).
  void build(const Shape& input_shape) override;
  /// x · rsqrt(max(sum(x², axis), 1e-24)): Keras's ops.normalize with epsilon 1e-12, so a zero vector
  /// stays zero with a finite gradient.
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  void check_axes(const Shape& input_shape) const;

  std::vector<std::int64_t> axis_;
  bool axis_is_list_ = false;  ///< written back as given: -1 or [-1]
};

/// Scales each vector along the last axis (or `axis`) to unit length: Keras's layers.UnitNormalization.
class UnitNormalization : public LayerHandle<UnitNormalizationLayer> {
 public:
  /// Normalizes over `axis`; further config keys in `options`.
  explicit UnitNormalization(std::int64_t axis = -1, const Config& options = {});
  /// From a whole config, with the keys of UnitNormalizationLayer(const Config&).
  explicit UnitNormalization(const Config& config) : LayerHandle(std::make_shared<UnitNormalizationLayer>(config)) {}
};

}  // namespace kiln
