#pragma once
// LayerNormalization: normalizes each sample over its last axis (or the axes given), then scales by gamma
// and shifts by beta (Keras's layers.LayerNormalization): y = (x - mean) / sqrt(var + epsilon) * gamma +
// beta, with the biased variance.
#include <cstdint>
#include <vector>

#include <kiln/layers/layer.hpp>

namespace kiln {

/// The layer behind kiln::LayerNormalization. Its weights, each of the normalized axes' sizes, are "gamma"
/// (with scale) and "beta" (with center), in that order, as in Keras.
class LayerNormalizationLayer : public Layer {
 public:
  bool supports_masking() const override { return true; }  ///< passes the mask on, as Keras's does
  /// Arguments (Keras names and defaults): axis = -1 (an int or a list of any axes but the batch's),
  /// epsilon = 1e-3, center = true, scale = true, rms_scaling = false (only false), beta_initializer = zeros,
  /// gamma_initializer = ones, beta/gamma regularizers and constraints.
  /// Throws ConfigError when epsilon is not positive, axis is an empty list, an unsupported argument is set
  /// or a key is unknown; an axis the input lacks, or names twice, is refused at build.
  explicit LayerNormalizationLayer(const Config& config);
  double epsilon() const { return epsilon_; }  ///< added to the variance before its square root
  bool center() const { return center_; }      ///< whether beta is added (else no shift)
  bool scale() const { return scale_; }        ///< whether gamma multiplies (else no scaling)
  Config get_config() const override;

 protected:
  /// Creates gamma and beta of the normalized axes' sizes. Throws ShapeError when one of those is unknown
  /// or absent.
  void build(const Shape& input_shape) override;
  /// Normalizes `input` over the layer's axes, which must have the sizes the layer was built for (else
  /// ShapeError); the output has the input's shape.
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  std::vector<std::int64_t> normalized_axes(const Shape& input_shape) const;
  Tensor gamma_for(const Tensor& input, std::int64_t features) const;
  Tensor beta_for(const Tensor& input, std::int64_t features) const;

  std::vector<std::int64_t> axis_;
  bool axis_is_list_ = false;       ///< an unbuilt layer writes axis back as given: -1 or [-1]
  std::vector<std::int64_t> axes_;  ///< at build: the axes normalized, non-negative and sorted
  double epsilon_ = 1e-3;
  bool center_ = true;
  bool scale_ = true;
  Initializer beta_initializer_, gamma_initializer_;
  WeightRegularization beta_regularization_, gamma_regularization_;
  WeightId gamma_ = 0, beta_ = 0;
};

/// Normalizes each sample over its last axis, then scales and shifts it by learned gamma and beta: Keras's
/// layers.LayerNormalization, as Transformer blocks use it.
class LayerNormalization : public LayerHandle<LayerNormalizationLayer> {
 public:
  /// `epsilon` keeps the division finite for constant features. `options` holds further config keys: axis,
  /// center, scale, beta_initializer, gamma_initializer, name, trainable, dtype.
  explicit LayerNormalization(double epsilon = 1e-3, const Config& options = {});
  /// From a whole config, with the keys of LayerNormalizationLayer(const Config&).
  explicit LayerNormalization(const Config& config) : LayerHandle(std::make_shared<LayerNormalizationLayer>(config)) {}
};

}  // namespace kiln
