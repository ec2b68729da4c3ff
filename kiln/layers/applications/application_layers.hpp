#pragma once
// The layers keras.applications defines for its own families, under the names Keras registers them by:
// LayerScale and StochasticDepth (keras/src/applications/convnext.py) and CustomScaleLayer
// (keras/src/applications/inception_resnet_v2.py). Keras writes them with their module, so a file of
// ConvNeXt or InceptionResNetV2 names them "LayerScale" and "CustomScaleLayer"; kiln writes them back so.
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <kiln/layers/layer.hpp>

namespace kiln {

/// The layer behind kiln::LayerScale: x · gamma, gamma one trainable scale per channel (the last axis),
/// initialized to init_values (CaiT's LayerScale, in ConvNeXt's blocks).
class LayerScaleLayer : public Layer {
 public:
  /// Arguments (Keras's, both required): init_values (a number), projection_dim (the channels, ≥ 1).
  explicit LayerScaleLayer(const Config& config);
  double init_values() const { return init_values_; }              ///< gamma's initial value
  std::int64_t projection_dim() const { return projection_dim_; }  ///< gamma's length
  Config get_config() const override;

 protected:
  /// Creates "gamma" (projection_dim,). ShapeError unless the input's last axis is projection_dim (or gamma,
  /// of length 1, broadcasts).
  void build(const Shape& input_shape) override;
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  void check_input(const Shape& input_shape) const;
  double init_values_ = 0.0;
  std::int64_t projection_dim_ = 0;
  WeightId gamma_ = 0;
};

/// The layer behind kiln::StochasticDepth: in training, each sample's whole input is dropped with
/// probability drop_path_rate and the kept ones scaled by 1 / (1 − drop_path_rate); in inference, the input.
class StochasticDepthLayer : public Layer {
 public:
  /// Arguments (Keras's): drop_path_rate (required, in [0, 1)).
  explicit StochasticDepthLayer(const Config& config);
  double drop_path_rate() const { return rate_; }  ///< the probability a sample's path is dropped
  Config get_config() const override;

 protected:
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  double rate_ = 0.0;
};

/// The layer behind kiln::CustomScaleLayer: inputs[0] + inputs[1] · scale (InceptionResNetV2's residual).
class CustomScaleLayerLayer : public Layer {
 public:
  /// Arguments (Keras's): scale (required, a number).
  explicit CustomScaleLayerLayer(const Config& config);
  double scale() const { return scale_; }  ///< the residual's factor
  Config get_config() const override;

 protected:
  /// ShapeError unless the two inputs have one shape.
  void build(const std::vector<Shape>& input_shapes) override;
  std::vector<Tensor> call(const std::vector<Tensor>& inputs, const CallArgs& args) override;
  std::pair<std::size_t, std::size_t> input_count() const override { return {2, 2}; }

 private:
  void check_shapes(const Shape& x, const Shape& residual) const;
  double scale_ = 1.0;
};

/// ConvNeXt's LayerScale (keras.applications.convnext.LayerScale).
class LayerScale : public LayerHandle<LayerScaleLayer> {
 public:
  LayerScale(double init_values, std::int64_t projection_dim, const Config& options = {});
  /// From a whole config, with the keys of LayerScaleLayer(const Config&).
  explicit LayerScale(const Config& config) : LayerHandle(std::make_shared<LayerScaleLayer>(config)) {}
};

/// ConvNeXt's StochasticDepth (keras.applications.convnext.StochasticDepth).
class StochasticDepth : public LayerHandle<StochasticDepthLayer> {
 public:
  explicit StochasticDepth(double drop_path_rate, const Config& options = {});
  /// From a whole config, with the keys of StochasticDepthLayer(const Config&).
  explicit StochasticDepth(const Config& config) : LayerHandle(std::make_shared<StochasticDepthLayer>(config)) {}
};

/// InceptionResNetV2's CustomScaleLayer: called on {x, residual}, gives x + residual · scale.
class CustomScaleLayer : public LayerHandle<CustomScaleLayerLayer> {
 public:
  explicit CustomScaleLayer(double scale, const Config& options = {});
  /// From a whole config, with the keys of CustomScaleLayerLayer(const Config&).
  explicit CustomScaleLayer(const Config& config) : LayerHandle(std::make_shared<CustomScaleLayerLayer>(config)) {}
};

}  // namespace kiln
