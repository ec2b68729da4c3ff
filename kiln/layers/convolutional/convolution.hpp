#pragma once
// Convolution layers: Conv1D and Conv2D, Keras's layers of those names (its BaseConv): outputs =
// activation(conv(inputs, kernel) + bias), with kernel (*kernel_size, channels / groups, filters); and
// Conv1DTranspose and Conv2DTranspose (its BaseConvTranspose), the gradients of those with respect to
// their inputs, with kernel (*kernel_size, filters, channels); DepthwiseConv2D and SeparableConv1D/2D
// (its BaseDepthwiseConv and BaseSeparableConv), grouped convolutions with a channel per group.
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
  void check_window(const Shape& input_shape, const Shape& kernel) const;
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
  WeightRegularization kernel_regularization_, bias_regularization_;
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

namespace detail {
/// The arguments depthwise and separable convolutions share, as DepthwiseConvLayer documents them.
struct DepthwiseArgs {
  int rank = 2;                                   ///< spatial axes
  std::int64_t depth_multiplier = 1;              ///< filters per input channel
  std::vector<std::int64_t> kernel_size;          ///< the window, one size per spatial axis
  std::vector<std::int64_t> strides;              ///< the step between windows, per spatial axis
  std::vector<std::int64_t> dilation_rate;        ///< the spacing of kernel taps, per spatial axis
  std::string padding;                            ///< "valid" or "same"
  std::string data_format;                        ///< "channels_last" or "channels_first"
  std::string activation;                         ///< the activation's name, "linear" for none
  bool use_bias = true;                           ///< whether a bias is added
  Initializer depthwise_initializer;              ///< of the depthwise kernel
  Initializer bias_initializer;                   ///< of the bias
  WeightRegularization depthwise_regularization;  ///< depthwise_regularizer, depthwise_constraint
  WeightRegularization bias_regularization;       ///< bias_regularizer, bias_constraint
};
}  // namespace detail

/// Keras's depthwise convolution (BaseDepthwiseConv): each input channel convolved with its own
/// depth_multiplier filters, none mixed; weights "kernel" (*kernel_size, channels, depth_multiplier) and,
/// with use_bias, "bias" (channels · depth_multiplier,). Output channel c·depth_multiplier + m is channel
/// c's filter m.
class DepthwiseConvLayer : public Layer {
 public:
  /// Arguments (Keras names and defaults): kernel_size (required), strides = 1, padding = "valid"
  /// ("same"), depth_multiplier = 1, data_format = "channels_last", dilation_rate = 1, activation = null,
  /// use_bias = true, depthwise_initializer = glorot_uniform, bias_initializer = zeros. Regularizers and
  /// constraints must stay null. ConfigError for any other value or key.
  DepthwiseConvLayer(const Config& config, const std::string& class_name, int rank);
  /// The window, one size per spatial axis.
  const std::vector<std::int64_t>& kernel_size() const { return args_.kernel_size; }
  std::int64_t depth_multiplier() const { return args_.depth_multiplier; }  ///< filters per input channel
  Config get_config() const override;

 protected:
  /// Creates the kernel and the bias; ShapeError naming the layer for another rank, an unknown channel
  /// axis or a window that does not fit.
  void build(const Shape& input_shape) override;
  /// activation(depthwise_conv(input) + bias): (batch, *out, channels · depth_multiplier).
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  detail::DepthwiseArgs args_;
  WeightId kernel_ = 0, bias_ = 0;
};

/// Keras's separable convolution (BaseSeparableConv): a depthwise convolution, then a 1×1 convolution
/// that mixes its channels into `filters`; weights "depthwise_kernel" (*kernel_size, channels,
/// depth_multiplier), "pointwise_kernel" (1[, 1], channels · depth_multiplier, filters) and "bias" (filters,).
class SeparableConvLayer : public Layer {
 public:
  /// DepthwiseConvLayer's arguments, plus filters (required) and pointwise_initializer = glorot_uniform.
  SeparableConvLayer(const Config& config, const std::string& class_name, int rank);
  std::int64_t filters() const { return filters_; }                         ///< output channels
  std::int64_t depth_multiplier() const { return args_.depth_multiplier; }  ///< filters per input channel
  Config get_config() const override;

 protected:
  /// Creates the three weights; ShapeError as DepthwiseConvLayer.
  void build(const Shape& input_shape) override;
  /// activation(pointwise(depthwise(input)) + bias): (batch, *out, filters).
  Tensor call(const Tensor& input, const CallArgs& args) override;

 private:
  detail::DepthwiseArgs args_;
  std::int64_t filters_ = 1;
  Initializer pointwise_initializer_;
  WeightRegularization pointwise_regularization_;
  WeightId depthwise_kernel_ = 0, pointwise_kernel_ = 0, bias_ = 0;
};

/// The layer behind kiln::DepthwiseConv2D.
class DepthwiseConv2DLayer : public DepthwiseConvLayer {
 public:
  /// The keys of DepthwiseConvLayer(const Config&).
  explicit DepthwiseConv2DLayer(const Config& config) : DepthwiseConvLayer(config, "DepthwiseConv2D", 2) {}
};
/// The layer behind kiln::SeparableConv1D.
class SeparableConv1DLayer : public SeparableConvLayer {
 public:
  /// The keys of SeparableConvLayer(const Config&).
  explicit SeparableConv1DLayer(const Config& config) : SeparableConvLayer(config, "SeparableConv1D", 1) {}
};
/// The layer behind kiln::SeparableConv2D.
class SeparableConv2DLayer : public SeparableConvLayer {
 public:
  /// The keys of SeparableConvLayer(const Config&).
  explicit SeparableConv2DLayer(const Config& config) : SeparableConvLayer(config, "SeparableConv2D", 2) {}
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

/// A depthwise 2-D convolution (MobileNet's): Keras's layers.DepthwiseConv2D.
class DepthwiseConv2D : public LayerHandle<DepthwiseConv2DLayer> {
 public:
  /// Square windows of `kernel_size`, an optional activation and further config keys (depth_multiplier,
  /// strides, padding, ...).
  explicit DepthwiseConv2D(std::int64_t kernel_size, const std::string& activation = "", const Config& options = {});
  /// From a whole config.
  explicit DepthwiseConv2D(const Config& config) : LayerHandle(std::make_shared<DepthwiseConv2DLayer>(config)) {}
};
/// A separable 1-D convolution: Keras's layers.SeparableConv1D.
class SeparableConv1D : public LayerHandle<SeparableConv1DLayer> {
 public:
  /// `filters` outputs of windows of `kernel_size`, an optional activation and further config keys.
  SeparableConv1D(std::int64_t filters, std::int64_t kernel_size, const std::string& activation = "",
                  const Config& options = {});
  /// From a whole config.
  explicit SeparableConv1D(const Config& config) : LayerHandle(std::make_shared<SeparableConv1DLayer>(config)) {}
};
/// A separable 2-D convolution (Xception's): Keras's layers.SeparableConv2D.
class SeparableConv2D : public LayerHandle<SeparableConv2DLayer> {
 public:
  /// `filters` outputs of square windows of `kernel_size`, an optional activation and further config keys.
  SeparableConv2D(std::int64_t filters, std::int64_t kernel_size, const std::string& activation = "",
                  const Config& options = {});
  /// From a whole config.
  explicit SeparableConv2D(const Config& config) : LayerHandle(std::make_shared<SeparableConv2DLayer>(config)) {}
};

}  // namespace kiln
