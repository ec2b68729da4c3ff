#pragma once
// Pooling layers, Keras's of the same names: windowed (MaxPooling1D/2D, AveragePooling1D/2D) and global
// (GlobalAveragePooling1D/2D, GlobalMaxPooling1D/2D: the mean or maximum over every spatial position).
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include <kiln/layers/layer.hpp>

namespace kiln {

/// What the windowed pooling layers share (Keras's BasePooling).
class PoolingLayer : public Layer {
 public:
  /// Arguments (Keras names and defaults): pool_size (an int or one per spatial axis; default 2 on every
  /// axis), strides = null (pool_size), padding = "valid" ("same"), data_format = "channels_last"
  /// ("channels_first"). ConfigError for sizes that are not positive, another padding or data_format, or
  /// an unknown key.
  PoolingLayer(const Config& config, const std::string& class_name, int rank, bool max);

  int rank() const { return rank_; }  ///< spatial axes: 1 or 2
  /// The window, per spatial axis.
  const std::vector<std::int64_t>& pool_size() const { return pool_size_; }
  /// The step between windows, per spatial axis.
  const std::vector<std::int64_t>& strides() const { return strides_; }
  const std::string& padding() const { return padding_; }          ///< "valid" or "same"
  const std::string& data_format() const { return data_format_; }  ///< "channels_last" or "channels_first"
  Config get_config() const override;

 protected:
  /// Checks the input: rank() + 2 axes and windows that fit (ShapeError naming the layer).
  void build(const Shape& input_shape) override;
  /// The maximum or mean of each window: (batch, *out, channels), channels_first (batch, channels, *out).
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  void check_input(const Shape& input_shape) const;

  int rank_ = 1;
  bool max_ = true;
  std::vector<std::int64_t> pool_size_, strides_;
  std::string padding_, data_format_;
};

/// Keras's MaxPooling1D on (batch, steps, channels).
class MaxPooling1DLayer : public PoolingLayer {
 public:
  /// The keys of PoolingLayer(const Config&).
  explicit MaxPooling1DLayer(const Config& config) : PoolingLayer(config, "MaxPooling1D", 1, true) {}
};
/// Keras's MaxPooling2D on (batch, height, width, channels).
class MaxPooling2DLayer : public PoolingLayer {
 public:
  /// The keys of PoolingLayer(const Config&).
  explicit MaxPooling2DLayer(const Config& config) : PoolingLayer(config, "MaxPooling2D", 2, true) {}
};
/// Keras's AveragePooling1D on (batch, steps, channels).
class AveragePooling1DLayer : public PoolingLayer {
 public:
  /// The keys of PoolingLayer(const Config&).
  explicit AveragePooling1DLayer(const Config& config) : PoolingLayer(config, "AveragePooling1D", 1, false) {}
};
/// Keras's AveragePooling2D on (batch, height, width, channels).
class AveragePooling2DLayer : public PoolingLayer {
 public:
  /// The keys of PoolingLayer(const Config&).
  explicit AveragePooling2DLayer(const Config& config) : PoolingLayer(config, "AveragePooling2D", 2, false) {}
};

/// The maximum of windows of `pool_size` steps: Keras's layers.MaxPooling1D.
class MaxPooling1D : public LayerHandle<MaxPooling1DLayer> {
 public:
  /// Windows of `pool_size` steps; further keys (strides, padding, data_format, name) in `options`.
  explicit MaxPooling1D(std::int64_t pool_size = 2, const Config& options = {});
  /// From a whole config, with the keys of PoolingLayer(const Config&).
  explicit MaxPooling1D(const Config& config) : LayerHandle(std::make_shared<MaxPooling1DLayer>(config)) {}
};
/// The maximum of 2-D windows: Keras's layers.MaxPooling2D.
///
///   kiln::Tensor h = kiln::MaxPooling2D()(x);  // 2×2 windows, stride 2: (None, 28, 28, 8) -> (None, 14, 14, 8)
class MaxPooling2D : public LayerHandle<MaxPooling2DLayer> {
 public:
  /// Square windows of `pool_size`; further keys in `options`.
  explicit MaxPooling2D(std::int64_t pool_size = 2, const Config& options = {});
  /// (height, width) windows; further keys in `options`.
  explicit MaxPooling2D(const std::vector<std::int64_t>& pool_size, const Config& options = {});
  /// (height, width) windows from a brace list: MaxPooling2D({2, 3}).
  explicit MaxPooling2D(std::initializer_list<std::int64_t> pool_size, const Config& options = {})
      : MaxPooling2D(std::vector<std::int64_t>(pool_size), options) {}
  /// From a whole config, with the keys of PoolingLayer(const Config&).
  explicit MaxPooling2D(const Config& config) : LayerHandle(std::make_shared<MaxPooling2DLayer>(config)) {}
};
/// The mean of windows of `pool_size` steps: Keras's layers.AveragePooling1D.
class AveragePooling1D : public LayerHandle<AveragePooling1DLayer> {
 public:
  /// Windows of `pool_size` steps; further keys in `options`.
  explicit AveragePooling1D(std::int64_t pool_size = 2, const Config& options = {});
  /// From a whole config, with the keys of PoolingLayer(const Config&).
  explicit AveragePooling1D(const Config& config) : LayerHandle(std::make_shared<AveragePooling1DLayer>(config)) {}
};
/// The mean of 2-D windows (padding does not count): Keras's layers.AveragePooling2D.
class AveragePooling2D : public LayerHandle<AveragePooling2DLayer> {
 public:
  /// Square windows of `pool_size`; further keys in `options`.
  explicit AveragePooling2D(std::int64_t pool_size = 2, const Config& options = {});
  /// (height, width) windows; further keys in `options`.
  explicit AveragePooling2D(const std::vector<std::int64_t>& pool_size, const Config& options = {});
  /// (height, width) windows from a brace list: AveragePooling2D({2, 3}).
  explicit AveragePooling2D(std::initializer_list<std::int64_t> pool_size, const Config& options = {})
      : AveragePooling2D(std::vector<std::int64_t>(pool_size), options) {}
  /// From a whole config, with the keys of PoolingLayer(const Config&).
  explicit AveragePooling2D(const Config& config) : LayerHandle(std::make_shared<AveragePooling2DLayer>(config)) {}
};

/// What the global pooling layers share: the mean or the maximum over every spatial axis.
class GlobalPoolingLayer : public Layer {
 public:
  /// Arguments (Keras names and defaults): data_format = "channels_last" (inputs (batch, *spatial,
  /// features); "channels_first" means (batch, features, *spatial)), keepdims = false (true keeps the
  /// spatial axes, of size 1). ConfigError on another data_format or an unknown key.
  GlobalPoolingLayer(const Config& config, const std::string& class_name, int rank, bool max);
  /// "channels_last" or "channels_first": where the features are.
  const std::string& data_format() const { return data_format_; }
  bool keepdims() const { return keepdims_; }  ///< whether the output keeps the spatial axes, of size 1
  Config get_config() const override;
  /// The 1-D layers take a mask (batch, steps) and pool over the kept steps only; their output has none.
  bool supports_masking() const override { return rank_ == 1; }
  std::vector<Tensor> compute_mask(const std::vector<Tensor>&, const Tensor&) const override { return {}; }

 protected:
  /// Checks that the input has rank 3 (1-D) or 4 (2-D), else ShapeError; there is nothing to create.
  void build(const Shape& input_shape) override;
  /// The mean or maximum over the spatial axes: (batch, features), or with keepdims the input's rank. With a
  /// mask (1-D only), over the kept steps: the mean as Keras's (the sum over kept steps over their number,
  /// NaN for a row with none), the maximum over kept steps (0 for a row with none).
  Tensor call(const Tensor& input, const CallArgs& args) override;
  std::vector<std::string> call_argument_names() const override {
    return rank_ == 1 ? std::vector<std::string>{"mask"} : std::vector<std::string>{};
  }

 private:
  void check_rank(const Shape& input_shape) const;

  int rank_ = 1;
  bool max_ = false;
  std::string data_format_;
  bool keepdims_ = false;
};

/// Keras's GlobalAveragePooling1D: the mean over the steps of (batch, steps, features).
class GlobalAveragePooling1DLayer : public GlobalPoolingLayer {
 public:
  /// The keys of GlobalPoolingLayer(const Config&).
  explicit GlobalAveragePooling1DLayer(const Config& config)
      : GlobalPoolingLayer(config, "GlobalAveragePooling1D", 1, false) {}
};
/// Keras's GlobalAveragePooling2D: the mean over the height and width of images.
class GlobalAveragePooling2DLayer : public GlobalPoolingLayer {
 public:
  /// The keys of GlobalPoolingLayer(const Config&).
  explicit GlobalAveragePooling2DLayer(const Config& config)
      : GlobalPoolingLayer(config, "GlobalAveragePooling2D", 2, false) {}
};
/// Keras's GlobalMaxPooling1D: the maximum over the steps.
class GlobalMaxPooling1DLayer : public GlobalPoolingLayer {
 public:
  /// The keys of GlobalPoolingLayer(const Config&).
  explicit GlobalMaxPooling1DLayer(const Config& config) : GlobalPoolingLayer(config, "GlobalMaxPooling1D", 1, true) {}
};
/// Keras's GlobalMaxPooling2D: the maximum over the height and width.
class GlobalMaxPooling2DLayer : public GlobalPoolingLayer {
 public:
  /// The keys of GlobalPoolingLayer(const Config&).
  explicit GlobalMaxPooling2DLayer(const Config& config) : GlobalPoolingLayer(config, "GlobalMaxPooling2D", 2, true) {}
};

/// The mean over the steps: Keras's layers.GlobalAveragePooling1D.
class GlobalAveragePooling1D : public LayerHandle<GlobalAveragePooling1DLayer> {
 public:
  /// `data_format` says where the steps are: "channels_last", (batch, steps, features), or "channels_first",
  /// (batch, features, steps). `options` holds further config keys: keepdims, name, trainable, dtype.
  explicit GlobalAveragePooling1D(const std::string& data_format = "channels_last", const Config& options = {});
  /// GlobalAveragePooling1D("channels_first"): a string literal would otherwise be ambiguous with the Config form.
  explicit GlobalAveragePooling1D(const char* data_format, const Config& options = {})
      : GlobalAveragePooling1D(std::string(data_format), options) {}
  /// From a whole config, with the keys of GlobalPoolingLayer(const Config&).
  explicit GlobalAveragePooling1D(const Config& config)
      : LayerHandle(std::make_shared<GlobalAveragePooling1DLayer>(config)) {}
};
/// The mean over height and width: Keras's layers.GlobalAveragePooling2D.
class GlobalAveragePooling2D : public LayerHandle<GlobalAveragePooling2DLayer> {
 public:
  /// `data_format` and further keys as GlobalAveragePooling1D's.
  explicit GlobalAveragePooling2D(const std::string& data_format = "channels_last", const Config& options = {});
  /// For a string literal, as GlobalAveragePooling1D's.
  explicit GlobalAveragePooling2D(const char* data_format, const Config& options = {})
      : GlobalAveragePooling2D(std::string(data_format), options) {}
  /// From a whole config, with the keys of GlobalPoolingLayer(const Config&).
  explicit GlobalAveragePooling2D(const Config& config)
      : LayerHandle(std::make_shared<GlobalAveragePooling2DLayer>(config)) {}
};
/// The maximum over the steps: Keras's layers.GlobalMaxPooling1D.
class GlobalMaxPooling1D : public LayerHandle<GlobalMaxPooling1DLayer> {
 public:
  /// `data_format` and further keys as GlobalAveragePooling1D's.
  explicit GlobalMaxPooling1D(const std::string& data_format = "channels_last", const Config& options = {});
  /// For a string literal, as GlobalAveragePooling1D's.
  explicit GlobalMaxPooling1D(const char* data_format, const Config& options = {})
      : GlobalMaxPooling1D(std::string(data_format), options) {}
  /// From a whole config, with the keys of GlobalPoolingLayer(const Config&).
  explicit GlobalMaxPooling1D(const Config& config) : LayerHandle(std::make_shared<GlobalMaxPooling1DLayer>(config)) {}
};
/// The maximum over height and width: Keras's layers.GlobalMaxPooling2D.
class GlobalMaxPooling2D : public LayerHandle<GlobalMaxPooling2DLayer> {
 public:
  /// `data_format` and further keys as GlobalAveragePooling1D's.
  explicit GlobalMaxPooling2D(const std::string& data_format = "channels_last", const Config& options = {});
  /// For a string literal, as GlobalAveragePooling1D's.
  explicit GlobalMaxPooling2D(const char* data_format, const Config& options = {})
      : GlobalMaxPooling2D(std::string(data_format), options) {}
  /// From a whole config, with the keys of GlobalPoolingLayer(const Config&).
  explicit GlobalMaxPooling2D(const Config& config) : LayerHandle(std::make_shared<GlobalMaxPooling2DLayer>(config)) {}
};

}  // namespace kiln
