#pragma once
// Normalization, Keras's preprocessing layer: shifts and scales inputs to zero mean and unit variance
// with statistics computed once from data (adapt) or given in the config, and, with invert, maps
// normalized values back (a regression target's scale):
//   y = (x − mean) / max(sqrt(variance), 1e-7)        invert: y = mean + x · max(sqrt(variance), 1e-7)
#include <cstdint>
#include <vector>

#include <kiln/layers/layer.hpp>

namespace kiln {

/// The layer behind kiln::Normalization. Adapted (no mean and variance in the config), its weights are
/// Keras's: "mean" and "variance" of the kept axes' shape and "count" (a scalar Keras creates and never
/// updates), none of them trainable. Given a mean and variance, it has no weights.
class NormalizationLayer : public Layer {
 public:
  bool supports_masking() const override { return true; }  ///< passes the mask on, as Keras's does
  /// Arguments (Keras names and defaults): axis = -1 (an int, a list of ints, or null for one mean over
  /// everything: the axes that keep their own statistics), mean = null and variance = null (both or neither:
  /// a number or nested lists of the kept axes' trailing sizes), invert = false. ConfigError when only one
  /// of mean and variance is given, their shapes differ, or a key is unknown.
  explicit NormalizationLayer(const Config& config);
  bool invert() const { return invert_; }  ///< whether the layer maps normalized values back
  /// Computes the mean and the (biased) variance of `data` over every axis but the kept ones, builds the
  /// layer for its shape if needed, and stores them in the weights. ShapeError naming the layer when the
  /// data does not fit the layer's build shape; ConfigError when the config gave the statistics.
  void adapt(const Array& data);
  /// The same over batches too large to hold at once, combined as Keras combines its dataset's batches.
  void adapt(const std::vector<Array>& batches);
  Config get_config() const override;

 protected:
  /// Creates mean, variance and count for the kept axes. ShapeError when an axis does not exist or a kept
  /// axis is unknown.
  void build(const Shape& input_shape) override;
  /// Normalizes (or, with invert, denormalizes) `input`; ShapeError for another size of a kept axis.
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  std::vector<int> kept_axes(const Shape& input_shape) const;
  Shape kept_shape(const Shape& input_shape) const;
  Array given_statistic(const Config& value, const Shape& kept) const;

  std::vector<std::int64_t> axis_;
  Config mean_config_, variance_config_;  ///< as given (null when adapted)
  bool invert_ = false;
  WeightId mean_ = 0, variance_ = 0, count_ = 0;
};

/// Standardizes features with statistics computed from the training data: Keras's layers.Normalization.
///
///   kiln::Normalization norm;
///   norm.adapt(x_train);                       // per-feature mean and variance of the last axis
///   kiln::Tensor h = norm(kiln::Input({kiln::Shape::unknown, 8}));
class Normalization : public LayerHandle<NormalizationLayer> {
 public:
  /// Statistics per position of `axis` (-1: the last axis); further config keys (mean, variance, invert,
  /// name, ...) in `options`.
  explicit Normalization(std::int64_t axis = -1, const Config& options = {});
  /// From a whole config, with the keys of NormalizationLayer(const Config&).
  explicit Normalization(const Config& config) : LayerHandle(std::make_shared<NormalizationLayer>(config)) {}
  /// NormalizationLayer::adapt() on `data`.
  void adapt(const Array& data) const { layer_->adapt(data); }
  /// NormalizationLayer::adapt() over batches.
  void adapt(const std::vector<Array>& batches) const { layer_->adapt(batches); }
};

}  // namespace kiln
