#pragma once
// Rescaling and UnitNormalization: fixed, weightless transforms of each value (Keras's layers.Rescaling,
// a preprocessing layer, and layers.UnitNormalization).
#include <cstdint>
#include <vector>

#include <kiln/layers/layer.hpp>

namespace kiln {

/// The layer behind kiln::Rescaling: outputs = inputs · scale + offset.
class RescalingLayer : public Layer {
 public:
  bool supports_masking() const override { return true; }  ///< passes the mask on, as Keras's does
  /// Arguments (Keras's): scale (required), offset = 0.0. Each is a number, or per-channel numbers (a list,
  /// nested lists, or Keras's serialized numpy array) that broadcast over the input's last axes as NumPy
  /// broadcasts them: [r, g, b] scales the channels of a channels_last image. ConfigError for anything else.
  explicit RescalingLayer(const Config& config);
  const Config& scale() const { return scale_; }    ///< the factor, as given
  const Config& offset() const { return offset_; }  ///< added after scaling, as given
  Config get_config() const override;

 protected:
  /// Checks that scale and offset broadcast over the input without changing its shape (ShapeError).
  void build(const Shape& input_shape) override;
  /// inputs · scale + offset, of the input's shape.
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  Config scale_, offset_;  ///< as given, checked by the constructor
};

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

/// Scales and shifts every value: Keras's layers.Rescaling, e.g. pixels to [0, 1] with scale 1/255.
///
///   kiln::Tensor unit = kiln::Rescaling(1.0 / 255)(pixels);
class Rescaling : public LayerHandle<RescalingLayer> {
 public:
  /// inputs · `scale` + `offset`; further config keys in `options`.
  explicit Rescaling(double scale, double offset = 0.0, const Config& options = {});
  /// Per channel (the last axis): Rescaling({1 / 0.229, 1 / 0.224, 1 / 0.225}, {-0.485 / 0.229, ...}).
  /// An offset of one number applies to every channel.
  Rescaling(const std::vector<double>& scale, const std::vector<double>& offset, const Config& options = {});
  /// From a whole config, with the keys of RescalingLayer(const Config&).
  explicit Rescaling(const Config& config) : LayerHandle(std::make_shared<RescalingLayer>(config)) {}
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
