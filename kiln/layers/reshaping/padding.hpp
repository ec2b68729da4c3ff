#pragma once
// Layers that change the spatial size of images and sequences without weights, Keras's of the same names:
// ZeroPadding1D/2D (zeros around), Cropping1D/2D (rows and columns cut off) and UpSampling1D/2D (each
// position repeated, or bilinear in 2-D).
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <kiln/layers/layer.hpp>

namespace kiln {

/// What ZeroPadding and Cropping share: an amount before and after each spatial axis.
class SpatialMarginLayer : public Layer {
 public:
  /// `key` is "padding" or "cropping". Its value: an int (the same before and after every axis), a list of
  /// two ints (1-D: before and after; 2-D: symmetric height and width), or in 2-D a list of two pairs
  /// ((top, bottom), (left, right)). data_format = "channels_last" ("channels_first"; Keras's Cropping1D
  /// has none). ConfigError for negative amounts or another form.
  SpatialMarginLayer(const Config& config, const std::string& class_name, int rank, const char* key, bool pad,
                     bool has_data_format);
  int rank() const { return rank_; }  ///< spatial axes: 1 or 2
  /// (before, after) for each spatial axis.
  const std::vector<std::array<std::int64_t, 2>>& margins() const { return margins_; }
  const std::string& data_format() const { return data_format_; }  ///< "channels_last" or "channels_first"
  Config get_config() const override;

 protected:
  /// Checks the rank and, for cropping, that something is left of each known axis (ShapeError naming the
  /// layer).
  void build(const Shape& input_shape) override;
  /// The padded or cropped input.
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  void check_input(const Shape& input_shape) const;
  int first_spatial_axis() const { return data_format_ == "channels_last" ? 1 : 2; }

  int rank_ = 1;
  std::string key_;
  bool pad_ = true, has_data_format_ = true;
  std::vector<std::array<std::int64_t, 2>> margins_;
  std::string data_format_ = "channels_last";
};

/// Keras's ZeroPadding1D: zeros before and after the steps.
class ZeroPadding1DLayer : public SpatialMarginLayer {
 public:
  /// padding = 1, data_format (see SpatialMarginLayer).
  explicit ZeroPadding1DLayer(const Config& config)
      : SpatialMarginLayer(config, "ZeroPadding1D", 1, "padding", true, true) {}
};
/// Keras's ZeroPadding2D: zeros around the height and width.
class ZeroPadding2DLayer : public SpatialMarginLayer {
 public:
  /// padding = 1, data_format (see SpatialMarginLayer).
  explicit ZeroPadding2DLayer(const Config& config)
      : SpatialMarginLayer(config, "ZeroPadding2D", 2, "padding", true, true) {}
};
/// Keras's Cropping1D: steps cut off the start and the end of (batch, steps, features).
class Cropping1DLayer : public SpatialMarginLayer {
 public:
  /// cropping = 1 (see SpatialMarginLayer); no data_format, as in Keras.
  explicit Cropping1DLayer(const Config& config)
      : SpatialMarginLayer(config, "Cropping1D", 1, "cropping", false, false) {}
};
/// Keras's Cropping2D: rows and columns cut off an image.
class Cropping2DLayer : public SpatialMarginLayer {
 public:
  /// cropping = 0, data_format (see SpatialMarginLayer).
  explicit Cropping2DLayer(const Config& config)
      : SpatialMarginLayer(config, "Cropping2D", 2, "cropping", false, true) {}
};

/// What UpSampling1D and UpSampling2D share: each spatial axis made `size` times longer.
class UpSamplingLayer : public Layer {
 public:
  /// Arguments (Keras's): size = 2 (1-D: an int; 2-D: an int or (height, width)), data_format (2-D only) =
  /// "channels_last", interpolation (2-D only) = "nearest" or "bilinear" (half-pixel centers, edges
  /// clamped, as Keras's image resize). ConfigError for sizes that are not positive or another value.
  UpSamplingLayer(const Config& config, const std::string& class_name, int rank);
  /// The factor per spatial axis.
  const std::vector<std::int64_t>& size() const { return size_; }
  const std::string& interpolation() const { return interpolation_; }  ///< "nearest" or "bilinear"
  Config get_config() const override;

 protected:
  /// Checks the rank and that the spatial axes are known (ShapeError naming the layer).
  void build(const Shape& input_shape) override;
  /// The input with every spatial axis `size` times longer.
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  void check_input(const Shape& input_shape) const;
  Tensor nearest(const Tensor& input) const;
  Tensor bilinear(const Tensor& input) const;

  int rank_ = 1;
  std::vector<std::int64_t> size_;
  std::string data_format_ = "channels_last", interpolation_ = "nearest";
};

/// Keras's UpSampling1D: each step repeated `size` times.
class UpSampling1DLayer : public UpSamplingLayer {
 public:
  /// size = 2 (see UpSamplingLayer).
  explicit UpSampling1DLayer(const Config& config) : UpSamplingLayer(config, "UpSampling1D", 1) {}
};
/// Keras's UpSampling2D: images made larger, by repetition or bilinear interpolation.
class UpSampling2DLayer : public UpSamplingLayer {
 public:
  /// size = (2, 2), data_format, interpolation (see UpSamplingLayer).
  explicit UpSampling2DLayer(const Config& config) : UpSamplingLayer(config, "UpSampling2D", 2) {}
};

/// Zeros before and after the steps: Keras's layers.ZeroPadding1D.
class ZeroPadding1D : public LayerHandle<ZeroPadding1DLayer> {
 public:
  /// `padding` zeros on each side; further keys (data_format, name) in `options`.
  explicit ZeroPadding1D(std::int64_t padding = 1, const Config& options = {});
  /// `before` zeros before the steps and `after` after them (Keras's padding=(before, after)).
  ZeroPadding1D(std::int64_t before, std::int64_t after, const Config& options = {});
  /// From a whole config: padding may be (before, after).
  explicit ZeroPadding1D(const Config& config) : LayerHandle(std::make_shared<ZeroPadding1DLayer>(config)) {}
};
/// Zeros around images: Keras's layers.ZeroPadding2D.
class ZeroPadding2D : public LayerHandle<ZeroPadding2DLayer> {
 public:
  /// `padding` zeros on every side; further keys in `options`.
  explicit ZeroPadding2D(std::int64_t padding = 1, const Config& options = {});
  /// `height` rows above and below, `width` columns left and right (Keras's padding=(height, width)).
  ZeroPadding2D(std::int64_t height, std::int64_t width, const Config& options = {});
  /// {top, bottom} rows and {left, right} columns (Keras's padding=((top, bottom), (left, right))).
  ZeroPadding2D(std::array<std::int64_t, 2> height, std::array<std::int64_t, 2> width, const Config& options = {});
  /// From a whole config: padding may be (height, width) or ((top, bottom), (left, right)).
  explicit ZeroPadding2D(const Config& config) : LayerHandle(std::make_shared<ZeroPadding2DLayer>(config)) {}
};
/// Steps cut off both ends: Keras's layers.Cropping1D.
class Cropping1D : public LayerHandle<Cropping1DLayer> {
 public:
  /// `cropping` steps off each end; further keys in `options`.
  explicit Cropping1D(std::int64_t cropping = 1, const Config& options = {});
  /// `start` steps off the start and `end` off the end (Keras's cropping=(start, end)): Cropping1D(23, 0).
  Cropping1D(std::int64_t start, std::int64_t end, const Config& options = {});
  /// From a whole config: cropping may be (start, end).
  explicit Cropping1D(const Config& config) : LayerHandle(std::make_shared<Cropping1DLayer>(config)) {}
};
/// Rows and columns cut off images: Keras's layers.Cropping2D.
class Cropping2D : public LayerHandle<Cropping2DLayer> {
 public:
  /// `cropping` off every side; further keys in `options`.
  explicit Cropping2D(std::int64_t cropping = 0, const Config& options = {});
  /// `height` rows off the top and the bottom, `width` columns off each side (Keras's cropping=(height, width)).
  Cropping2D(std::int64_t height, std::int64_t width, const Config& options = {});
  /// {top, bottom} rows and {left, right} columns off (Keras's cropping=((top, bottom), (left, right))).
  Cropping2D(std::array<std::int64_t, 2> height, std::array<std::int64_t, 2> width, const Config& options = {});
  /// From a whole config: cropping may be (height, width) or ((top, bottom), (left, right)).
  explicit Cropping2D(const Config& config) : LayerHandle(std::make_shared<Cropping2DLayer>(config)) {}
};
/// Each step repeated: Keras's layers.UpSampling1D.
class UpSampling1D : public LayerHandle<UpSampling1DLayer> {
 public:
  /// `size` copies of each step; further keys in `options`.
  explicit UpSampling1D(std::int64_t size = 2, const Config& options = {});
  /// From a whole config, with the keys of UpSamplingLayer(const Config&).
  explicit UpSampling1D(const Config& config) : LayerHandle(std::make_shared<UpSampling1DLayer>(config)) {}
};
/// Larger images: Keras's layers.UpSampling2D.
///
///   kiln::Tensor big = kiln::UpSampling2D(2, {{"interpolation", "bilinear"}})(x);  // (None, 8, 8, 3) -> (None, 16,
///   16, 3)
class UpSampling2D : public LayerHandle<UpSampling2DLayer> {
 public:
  /// `size` times the height and width; further keys (data_format, interpolation) in `options`.
  explicit UpSampling2D(std::int64_t size = 2, const Config& options = {});
  /// `height` times the rows and `width` times the columns (Keras's size=(height, width)).
  UpSampling2D(std::int64_t height, std::int64_t width, const Config& options = {});
  /// From a whole config, with the keys of UpSamplingLayer(const Config&).
  explicit UpSampling2D(const Config& config) : LayerHandle(std::make_shared<UpSampling2DLayer>(config)) {}
};

}  // namespace kiln
