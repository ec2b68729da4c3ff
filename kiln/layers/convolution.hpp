#pragma once
// Convolution layers: Conv1D and Conv2D, Keras's layers of those names (its BaseConv): outputs =
// activation(conv(inputs, kernel) + bias), with kernel (*kernel_size, channels / groups, filters); and
// Conv1DTranspose and Conv2DTranspose (its BaseConvTranspose), the gradients of those with respect to
// their inputs, with kernel (*kernel_size, filters, channels).
#include <cstdint>
#include <string>
#include <vector>

#include <kiln/layers/layer.hpp>

namespace kiln {

/// What Conv1D and Conv2D share (Keras's BaseConv): weights "kernel" (*kernel_size, input channels /
/// groups, filters) and, with use_bias, "bias" (filters,).
class ConvLayer : public Layer {
 public:
  /// Arguments (Keras names and defaults): filters (required, positive), kernel_size (required: an int or
  /// one positive int per spatial axis), strides = 1, padding = "valid" ("same"; "causal" in 1-D),
  /// data_format = "channels_last" ("channels_first"), dilation_rate = 1, groups = 1 (must divide filters
  /// and, at build, the input channels), activation = null (linear), use_bias = true, kernel_initializer =
  /// glorot_uniform, bias_initializer = zeros. As in Keras, strides and dilations above 1 cannot be
  /// combined. Regularizers, constraints and LoRA must stay null. ConfigError for any other value or key.
  ConvLayer(const Config& config, const std::string& class_name, int rank)
      : ConvLayer(config, class_name, rank, false) {}

  /// With `transpose`, Keras's BaseConvTranspose instead: the same keys without groups, with output_padding
  /// = null (an int or one per spatial axis, each below its stride), and padding "valid" or "same". The
  /// kernel is (*kernel_size, filters, input channels) and the output length Keras's deconv_output_length:
  /// input·stride (+ max(kernel − stride, 0) for "valid"), or with output_padding
  /// (input − 1)·stride + kernel − 2·(kernel / 2 for "same", else 0) + output_padding.
  ConvLayer(const Config& config, const std::string& class_name, int rank, bool transpose);

  int rank() const { return rank_; }                 ///< spatial axes: 1 or 2
  std::int64_t filters() const { return filters_; }  ///< output channels
  /// The window, one size per spatial axis.
  const std::vector<std::int64_t>& kernel_size() const { return kernel_size_; }
  /// The step between windows, per spatial axis.
  const std::vector<std::int64_t>& strides() const { return strides_; }
  /// The spacing of kernel taps, per spatial axis.
  const std::vector<std::int64_t>& dilation_rate() const { return dilation_rate_; }
  const std::string& padding() const { return padding_; }          ///< "valid", "same" or "causal"
  const std::string& data_format() const { return data_format_; }  ///< "channels_last" or "channels_first"
  std::int64_t groups() const { return groups_; }                  ///< groups of channels convolved apart
  bool transpose() const { return transpose_; }                    ///< a transposed convolution
  /// The transposed convolutions' extra output length per axis; empty when not given (Keras's None).
  const std::vector<std::int64_t>& output_padding() const { return output_padding_; }
  /// The activation's name; "linear" when none was given.
  const std::string& activation() const { return activation_; }
  bool use_bias() const { return use_bias_; }  ///< whether the layer adds a bias
  Config get_config() const override;

 protected:
  /// Creates the kernel and the bias. ShapeError naming the layer for an input of another rank than
  /// rank() + 2, an unknown channel axis, channels the groups do not divide, or a window that does not fit
  /// the input.
  void build(const Shape& input_shape) override;
  /// activation(conv(input, kernel) + bias): (batch, *out, filters), or (batch, filters, *out) for
  /// channels_first. The input may have other spatial sizes than the one the layer was built on, but not
  /// another rank or channel count (ShapeError).
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  std::int64_t channel_axis(const Shape& shape) const;
  void check_input(const Shape& input_shape) const;
  Shape kernel_shape(std::int64_t channels) const;
  std::vector<std::int64_t> transposed_length(const Shape& input_shape) const;
  std::vector<std::int64_t> transposed_pad_before() const;
  Tensor convolve(const Tensor& input, const Tensor& kernel) const;

  int rank_ = 1;
  bool transpose_ = false;
  std::vector<std::int64_t> output_padding_;
  std::int64_t filters_ = 0, groups_ = 1;
  std::vector<std::int64_t> kernel_size_, strides_, dilation_rate_;
  std::string padding_, data_format_, activation_;
  bool use_bias_ = true;
  Initializer kernel_initializer_, bias_initializer_;
  WeightId kernel_ = 0, bias_ = 0;
};

/// The layer behind kiln::Conv1D: inputs (batch, steps, channels).
class Conv1DLayer : public ConvLayer {
 public:
  /// The keys of ConvLayer(const Config&), each size a single int or a list of one.
  explicit Conv1DLayer(const Config& config) : ConvLayer(config, "Conv1D", 1) {}
};

/// The layer behind kiln::Conv2D: inputs (batch, height, width, channels).
class Conv2DLayer : public ConvLayer {
 public:
  /// The keys of ConvLayer(const Config&), each size an int or a list of two.
  explicit Conv2DLayer(const Config& config) : ConvLayer(config, "Conv2D", 2) {}
};

/// The layer behind kiln::Conv1DTranspose: inputs (batch, steps, channels).
class Conv1DTransposeLayer : public ConvLayer {
 public:
  /// The keys of ConvLayer(const Config&, ..., true).
  explicit Conv1DTransposeLayer(const Config& config) : ConvLayer(config, "Conv1DTranspose", 1, true) {}
};

/// The layer behind kiln::Conv2DTranspose: inputs (batch, height, width, channels).
class Conv2DTransposeLayer : public ConvLayer {
 public:
  /// The keys of ConvLayer(const Config&, ..., true).
  explicit Conv2DTransposeLayer(const Config& config) : ConvLayer(config, "Conv2DTranspose", 2, true) {}
};

/// A 1-D convolution over the steps of a sequence: Keras's layers.Conv1D.
///
///   kiln::Tensor h = kiln::Conv1D(64, 5, "relu", {{"padding", "causal"}, {"dilation_rate", 2}})(x);
class Conv1D : public LayerHandle<Conv1DLayer> {
 public:
  /// `filters` outputs of windows of `kernel_size` steps, an optional activation ("" is linear) and
  /// further config keys in `options` (see ConvLayer(const Config&)).
  Conv1D(std::int64_t filters, std::int64_t kernel_size, const std::string& activation = "",
         const Config& options = {});
  /// From a whole config, with the keys of ConvLayer(const Config&).
  explicit Conv1D(const Config& config) : LayerHandle(std::make_shared<Conv1DLayer>(config)) {}
};

/// A 2-D convolution over images: Keras's layers.Conv2D.
///
///   kiln::Tensor h = kiln::Conv2D(32, 3, "relu")(images);                     // 3×3 windows
///   kiln::Tensor g = kiln::Conv2D(64, {3, 5}, "", {{"padding", "same"}})(h);  // 3×5 windows
class Conv2D : public LayerHandle<Conv2DLayer> {
 public:
  /// `filters` outputs of square windows of `kernel_size`, an optional activation and further config keys.
  Conv2D(std::int64_t filters, std::int64_t kernel_size, const std::string& activation = "",
         const Config& options = {});
  /// `filters` outputs of (height, width) windows.
  Conv2D(std::int64_t filters, const std::vector<std::int64_t>& kernel_size, const std::string& activation = "",
         const Config& options = {});
  /// From a whole config, with the keys of ConvLayer(const Config&).
  explicit Conv2D(const Config& config) : LayerHandle(std::make_shared<Conv2DLayer>(config)) {}
};

/// The transposed 1-D convolution (the gradient of Conv1D with respect to its input), which lengthens a
/// sequence by its stride: Keras's layers.Conv1DTranspose.
class Conv1DTranspose : public LayerHandle<Conv1DTransposeLayer> {
 public:
  /// `filters` outputs, windows of `kernel_size`, an optional activation and further config keys (strides,
  /// padding, output_padding, ...).
  Conv1DTranspose(std::int64_t filters, std::int64_t kernel_size, const std::string& activation = "",
                  const Config& options = {});
  /// From a whole config.
  explicit Conv1DTranspose(const Config& config) : LayerHandle(std::make_shared<Conv1DTransposeLayer>(config)) {}
};

/// The transposed 2-D convolution, which enlarges images by its strides (decoders, segmentation):
/// Keras's layers.Conv2DTranspose.
///
///   kiln::Tensor up = kiln::Conv2DTranspose(16, 3, "relu", {{"strides", 2}, {"padding", "same"}})(x);  // 2× larger
class Conv2DTranspose : public LayerHandle<Conv2DTransposeLayer> {
 public:
  /// `filters` outputs of square windows of `kernel_size`, an optional activation and further config keys.
  Conv2DTranspose(std::int64_t filters, std::int64_t kernel_size, const std::string& activation = "",
                  const Config& options = {});
  /// From a whole config.
  explicit Conv2DTranspose(const Config& config) : LayerHandle(std::make_shared<Conv2DTransposeLayer>(config)) {}
};

}  // namespace kiln
