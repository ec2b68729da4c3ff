#pragma once
// GroupNormalization and RMSNormalization, Keras 3's (layers.GroupNormalization, layers.RMSNormalization):
// normalizations of each sample on its own, so they behave the same in training and inference and for
// any batch size.
//   GroupNormalization: the channels split into `groups`; each sample's group is normalized over its
//   channels and every other axis but the batch: y = (x − mean)·rsqrt(var + epsilon)·gamma + beta.
//   RMSNormalization: y = x·rsqrt(mean(x², axis) + epsilon)·scale (Zhang and Sennrich 2019).
#include <cstdint>
#include <vector>

#include <kiln/layers/layer.hpp>

namespace kiln {

/// The layer behind kiln::GroupNormalization. Its weights, each of the channel count's size, are "gamma"
/// (with scale) and "beta" (with center), in Keras's order.
class GroupNormalizationLayer : public Layer {
 public:
  bool supports_masking() const override { return true; }  ///< passes the mask on, as Keras's does
  /// Arguments (Keras names and defaults): groups = 32 (-1: one group per channel, instance
  /// normalization), axis = -1 (the channel axis), epsilon = 1e-3, center = true, scale = true,
  /// beta_initializer = zeros, gamma_initializer = ones. ConfigError for groups that are neither positive
  /// nor -1, an epsilon that is not positive, or an unknown key.
  explicit GroupNormalizationLayer(const Config& config);
  std::int64_t groups() const { return groups_; }  ///< -1 until built for instance normalization
  std::int64_t axis() const { return axis_; }      ///< the channel axis as given (negative from the end)
  double epsilon() const { return epsilon_; }      ///< added to the variance before its square root
  Config get_config() const override;

 protected:
  /// Creates gamma and beta for the input's channel axis. ShapeError naming the layer when the axis does not
  /// exist, is the batch axis, is unknown, or has a channel count that `groups` does not divide.
  void build(const Shape& input_shape) override;
  /// Normalizes `input`, keeping its shape; ShapeError for another rank or channel count than at build.
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  int channel_axis(const Shape& shape) const;
  void check_input(const Shape& input_shape) const;

  std::int64_t groups_ = 32, axis_ = -1;
  double epsilon_ = 1e-3;
  bool center_ = true, scale_ = true;
  Initializer beta_initializer_, gamma_initializer_;
  WeightRegularization beta_regularization_, gamma_regularization_;
  WeightId gamma_ = 0, beta_ = 0;
};

/// The layer behind kiln::RMSNormalization. Its one weight, "scale", has the shape of the normalized axes
/// and starts at ones.
class RMSNormalizationLayer : public Layer {
 public:
  /// Arguments (Keras's): axis = -1 (an int or a list of ints: the normalized axes, which kiln needs to be
  /// the trailing ones, as the scale's broadcast implies), epsilon = 1e-6. As in Keras, a built layer's
  /// config holds the axes as a sorted list. ConfigError for an epsilon that is not positive, an empty list
  /// or an unknown key.
  explicit RMSNormalizationLayer(const Config& config);
  double epsilon() const { return epsilon_; }  ///< added to the mean square before its square root
  Config get_config() const override;

 protected:
  /// Creates "scale" of the normalized axes' shape. ShapeError naming the layer when an axis does not exist,
  /// the axes are not the trailing ones, or one of them is unknown.
  void build(const Shape& input_shape) override;
  /// Normalizes `input`, keeping its shape; ShapeError for another shape of the normalized axes.
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  int trailing_axes(const Shape& input_shape) const;

  std::vector<std::int64_t> axis_;
  bool axis_is_list_ = false;
  double epsilon_ = 1e-6;
  WeightId scale_ = 0;
};

/// Normalizes each sample's channel groups: Keras's layers.GroupNormalization, the batch-size-independent
/// alternative to BatchNormalization in small-batch vision models.
///
///   kiln::Tensor h = kiln::GroupNormalization(8)(kiln::Conv2D(32, 3)(images));  // 8 groups of 4 channels
class GroupNormalization : public LayerHandle<GroupNormalizationLayer> {
 public:
  /// `groups` groups of channels on the last axis, and further config keys in `options` (see
  /// GroupNormalizationLayer(const Config&)).
  explicit GroupNormalization(std::int64_t groups = 32, const Config& options = {});
  /// From a whole config, with the keys of GroupNormalizationLayer(const Config&).
  explicit GroupNormalization(const Config& config) : LayerHandle(std::make_shared<GroupNormalizationLayer>(config)) {}
};

/// Scales each sample to unit root mean square over its last axis, then by a learned scale: Keras's
/// layers.RMSNormalization, as LLaMA-style Transformer blocks use it.
///
///   kiln::Tensor h = kiln::RMSNormalization()(tokens);  // (None, T, 64): 64 scales
class RMSNormalization : public LayerHandle<RMSNormalizationLayer> {
 public:
  /// `epsilon` keeps the division finite for zero rows; further config keys (axis, name, ...) in `options`.
  explicit RMSNormalization(double epsilon = 1e-6, const Config& options = {});
  /// From a whole config, with the keys of RMSNormalizationLayer(const Config&).
  explicit RMSNormalization(const Config& config) : LayerHandle(std::make_shared<RMSNormalizationLayer>(config)) {}
};

}  // namespace kiln
