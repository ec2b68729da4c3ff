#pragma once
// LayerNormalization: normalizes each sample over its last axis, then scales by gamma and shifts by beta
// (Keras's layers.LayerNormalization): y = (x - mean) / sqrt(var + epsilon) * gamma + beta, with the
// biased variance.
#include <cstdint>
#include <vector>

#include <kiln/layers/layer.hpp>

namespace kiln {

class LayerNormalizationLayer : public Layer {
 public:
  /// Arguments (Keras names and defaults): axis = -1 (an int or a list; only the last axis is supported),
  /// epsilon = 1e-3, center = true, scale = true, rms_scaling = false (only false), beta_initializer = zeros,
  /// gamma_initializer = ones. Regularizers and constraints are not supported.
  explicit LayerNormalizationLayer(const Config& config);
  double epsilon() const { return epsilon_; }
  bool center() const { return center_; }
  bool scale() const { return scale_; }
  Config get_config() const override;

 protected:
  void build(const Shape& input_shape) override;
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  void check_axis(const Shape& input_shape) const;
  Tensor gamma_for(const Tensor& input) const;
  Tensor beta_for(const Tensor& input) const;

  std::vector<std::int64_t> axis_;
  bool axis_is_list_ = false;  ///< written back as given: -1 or [-1]
  double epsilon_ = 1e-3;
  bool center_ = true;
  bool scale_ = true;
  Initializer beta_initializer_, gamma_initializer_;
  WeightId gamma_ = 0, beta_ = 0;
};

class LayerNormalization : public LayerHandle<LayerNormalizationLayer> {
 public:
  explicit LayerNormalization(double epsilon = 1e-3, const Config& options = {});
  explicit LayerNormalization(const Config& config) : LayerHandle(std::make_shared<LayerNormalizationLayer>(config)) {}
};

}  // namespace kiln
