#pragma once
// Rescaling: a fixed, weightless transform of each value (Keras's layers.Rescaling, a preprocessing layer).
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

}  // namespace kiln
