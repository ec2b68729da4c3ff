#include <kiln/layers/convolutional/convolution.hpp>

#include <algorithm>
#include <utility>

#include <kiln/core/error.hpp>
#include <kiln/core/names.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

namespace {

std::string list_text(const std::vector<std::int64_t>& values) { return Config::from_ints(values).to_string(); }

}  // namespace

ConvLayer::ConvLayer(const Config& config, const std::string& class_name, int rank, bool transpose)
    : Layer(config, class_name), rank_(rank), transpose_(transpose) {
  ConfigReader args = config_reader(config);
  filters_ = args.integer("filters");
  if (!args.has("kernel_size")) args.fail("argument 'kernel_size' is required");
  kernel_size_ = args.tuple("kernel_size", rank, 1);
  strides_ = args.tuple("strides", rank, 1);
  padding_ = to_lower_case(args.text("padding", "valid"));
  data_format_ = args.data_format();
  dilation_rate_ = args.tuple("dilation_rate", rank, 1);
  if (transpose) {
    args.value("output_padding");  // read even when null (Keras's None), so finish() knows the key
    if (args.has("output_padding")) output_padding_ = args.tuple("output_padding", rank, 0);
  } else {
    groups_ = args.integer("groups", 1);
  }
  activation_ = args.text("activation", "linear");
  if (activation_.empty()) activation_ = "linear";
  use_bias_ = args.boolean("use_bias", true);
  kernel_initializer_ = Initializer::from_argument(args, "kernel_initializer", "glorot_uniform");
  bias_initializer_ = Initializer::from_argument(args, "bias_initializer", "zeros");
  kernel_regularization_ = WeightRegularization::from_arguments(args, "kernel");
  bias_regularization_ = WeightRegularization::from_arguments(args, "bias");
  for (const char* key : {"lora_rank", "lora_alpha"}) args.unsupported(key);
  args.finish();
  // Keras's BaseConv checks, in its order and with its meaning.
  if (filters_ <= 0) args.fail("filters must be positive, got " + std::to_string(filters_));
  if (groups_ <= 0) args.fail("groups must be positive, got " + std::to_string(groups_));
  if (filters_ % groups_ != 0)
    args.fail("filters (" + std::to_string(filters_) + ") must be divisible by groups (" + std::to_string(groups_) +
              ")");
  auto positive = [&](const std::vector<std::int64_t>& values, const char* key) {
    for (const std::int64_t value : values)
      if (value <= 0) args.fail(std::string(key) + " must be positive, got " + list_text(values));
  };
  positive(kernel_size_, "kernel_size");
  positive(strides_, "strides");
  positive(dilation_rate_, "dilation_rate");
  if (*std::max_element(strides_.begin(), strides_.end()) > 1 &&
      *std::max_element(dilation_rate_.begin(), dilation_rate_.end()) > 1)
    args.fail("strides > 1 cannot be combined with dilation_rate > 1, got strides=" + list_text(strides_) +
              " and dilation_rate=" + list_text(dilation_rate_));
  for (std::size_t axis = 0; axis < output_padding_.size(); ++axis)
    if (output_padding_[axis] < 0 || output_padding_[axis] >= strides_[axis])
      args.fail("output_padding must be at least 0 and strictly less than strides, got output_padding=" +
                list_text(output_padding_) + " and strides=" + list_text(strides_));
  if (transpose && padding_ != "valid" && padding_ != "same")
    args.fail("padding must be 'valid' or 'same', got '" + padding_ + "'");
  if (padding_ != "valid" && padding_ != "same" && !(padding_ == "causal" && rank == 1))
    args.fail("padding must be " + std::string(rank == 1 ? "'valid', 'same' or 'causal'" : "'valid' or 'same'") +
              ", got '" + padding_ + "'");
  ops::check_activation(activation_, describe());
}

Config ConvLayer::get_config() const {
  Config config = base_config();
  config.set("filters", filters_);
  config.set("kernel_size", Config::from_ints(kernel_size_));
  config.set("strides", Config::from_ints(strides_));
  config.set("padding", padding_);
  config.set("data_format", data_format_);
  config.set("dilation_rate", Config::from_ints(dilation_rate_));
  if (transpose_)
    config.set("output_padding", output_padding_.empty() ? Config() : Config::from_ints(output_padding_));
  else
    config.set("groups", groups_);
  config.set("activation", activation_);
  config.set("use_bias", use_bias_);
  config.set("kernel_initializer", kernel_initializer_.get_config());
  config.set("bias_initializer", bias_initializer_.get_config());
  WeightRegularization::write(config, "kernel", kernel_regularization_, "bias", bias_regularization_);
  return with_activity_regularizer(config);
}

std::int64_t ConvLayer::channel_axis(const Shape& shape) const {
  return data_format_ == "channels_last" ? shape.rank() - 1 : 1;
}

void ConvLayer::check_input(const Shape& input_shape) const {
  if (input_shape.rank() != rank_ + 2)
    shape_error("expects inputs of rank " + std::to_string(rank_ + 2) + " (batch, " +
                    (rank_ == 1 ? "steps" : "height, width") + " and channels), got rank " +
                    std::to_string(input_shape.rank()),
                {{"input", input_shape}});
  const std::int64_t channels = input_shape[static_cast<int>(channel_axis(input_shape))];
  if (channels == Shape::unknown) shape_error("needs inputs whose channel axis is known", {{"input", input_shape}});
  if (channels % groups_ != 0)
    shape_error(
        "the input's " + std::to_string(channels) + " channels are not divisible by groups=" + std::to_string(groups_),
        {{"input", input_shape}});
}

Shape ConvLayer::kernel_shape(std::int64_t channels) const {
  std::vector<std::int64_t> dims = kernel_size_;
  // A transposed convolution's kernel is the forward convolution's that it is the gradient of.
  dims.push_back(transpose_ ? filters_ : channels / groups_);
  dims.push_back(transpose_ ? channels : filters_);
  return Shape(std::move(dims));
}

// Keras's deconv_output_length, per spatial axis.
std::vector<std::int64_t> ConvLayer::transposed_length(const Shape& input_shape) const {
  const int first = data_format_ == "channels_last" ? 1 : 2;
  std::vector<std::int64_t> lengths;
  for (int axis = 0; axis < rank_; ++axis) {
    const auto a = static_cast<std::size_t>(axis);
    const std::int64_t in = input_shape[first + axis];
    if (in == Shape::unknown) {
      lengths.push_back(Shape::unknown);
      continue;
    }
    // Every step overflow-checked: the sizes, strides and dilations may come from a file.
    std::int64_t span = 0, length = 0;
    const std::int64_t stride = strides_[a];
    bool overflow = __builtin_mul_overflow(dilation_rate_[a], kernel_size_[a] - 1, &span) ||
                    __builtin_add_overflow(span, 1, &span);
    if (!overflow && output_padding_.empty()) {
      overflow = __builtin_mul_overflow(in, stride, &length) ||
                 (padding_ == "valid" && __builtin_add_overflow(length, std::max<std::int64_t>(span - stride, 0), &length));
    } else if (!overflow) {
      overflow = __builtin_mul_overflow(in - 1, stride, &length) || __builtin_add_overflow(length, span, &length) ||
                 __builtin_add_overflow(length, output_padding_[a], &length);
      length -= 2 * (padding_ == "same" ? span / 2 : 0);
    }
    if (overflow)
      shape_error("the transposed output's length overflows 64 bits (kernel_size " +
                      std::to_string(kernel_size_[a]) + ", strides " + std::to_string(stride) + ", dilation_rate " +
                      std::to_string(dilation_rate_[a]) + ")",
                  {{"input", input_shape}});
    lengths.push_back(length);
  }
  return lengths;
}

// The zeros Keras's transposed convolution puts before the stride-dilated input are
// _convert_conv_transpose_padding_args_from_keras_to_jax's left_pad; as the gradient of a convolution,
// that is a padding of span − 1 − left_pad before that convolution's input.
std::vector<std::int64_t> ConvLayer::transposed_pad_before() const {
  std::vector<std::int64_t> before;
  for (int axis = 0; axis < rank_; ++axis) {
    const auto a = static_cast<std::size_t>(axis);
    const std::int64_t span = dilation_rate_[a] * (kernel_size_[a] - 1) + 1;
    std::int64_t left = span - 1;
    if (padding_ == "same") {
      const std::int64_t pad_length =
          output_padding_.empty() ? strides_[a] + span - 2 : span + span % 2 - 2 + output_padding_[a];
      left = std::min(pad_length / 2 + pad_length % 2, span - 1);
    }
    before.push_back(span - 1 - left);
  }
  return before;
}

Tensor ConvLayer::convolve(const Tensor& input, const Tensor& kernel) const {
  const ops::ConvOptions options{strides_, dilation_rate_, padding_, data_format_};
  if (!transpose_) return ops::conv(input, kernel, options);
  for (int axis = 0; axis < rank_; ++axis)
    if (input.shape()[(data_format_ == "channels_last" ? 1 : 2) + axis] == Shape::unknown)
      shape_error("needs the spatial axes of its input to be known", {{"input", input.shape()}});
  return ops::conv_transpose(input, kernel, transposed_length(input.shape()), options, transposed_pad_before());
}

// A forward convolution's window must fit its input (a transposed one's output grows to fit).
void ConvLayer::check_window(const Shape& input_shape, const Shape& kernel) const {
  if (transpose_) return;
  try {
    ops::conv_output_shape(input_shape, kernel, {strides_, dilation_rate_, padding_, data_format_});
  } catch (const ShapeError& error) {
    shape_error(std::string("cannot convolve its input: ") + error.what(), {{"input", input_shape}});
  }
}

void ConvLayer::build(const Shape& input_shape) {
  check_input(input_shape);
  const std::int64_t channels = input_shape[static_cast<int>(channel_axis(input_shape))];
  const Shape kernel = kernel_shape(channels);
  check_window(input_shape, kernel);  // the window must fit, as in Keras's build
  kernel_ = add_weight("kernel", kernel, kernel_initializer_);
  regularize(kernel_, kernel_regularization_);
  if (use_bias_) {
    bias_ = add_weight("bias", {filters_}, bias_initializer_);
    regularize(bias_, bias_regularization_);
  }
}

Tensor ConvLayer::call(const Tensor& input, const CallArgs&) {
  check_input(input.shape());
  const Shape& built = build_shapes().at(0);
  const int axis = static_cast<int>(channel_axis(built));
  if (input.shape()[axis] != built[axis])
    shape_error("was built for " + std::to_string(built[axis]) + " input channels",
                {{"built for", built}, {"input", input.shape()}});
  const Tensor kernel = variable(kernel_, input);
  check_window(input.shape(), kernel.shape());
  if (use_bias_ && !transpose_)  // the bias and a ReLU in the convolution's own pass
    return ops::conv_bias_activation(input, kernel, variable(bias_, input), activation_,
                                     {strides_, dilation_rate_, padding_, data_format_});
  Tensor output = convolve(input, kernel);
  if (use_bias_) {
    Tensor bias = variable(bias_, input);
    // channels_first: (filters, 1[, 1]) broadcasts over the spatial axes after the channels.
    if (data_format_ == "channels_first") {
      std::vector<std::int64_t> dims(static_cast<std::size_t>(rank_ + 1), 1);
      dims[0] = filters_;
      bias = ops::reshape(bias, dims);
    }
    output = output + bias;  // autodiff sums the bias gradient over the broadcast axes
  }
  return ops::activation(output, activation_);
}

// ---- depthwise and separable convolutions ---------------------------------------------------------------

namespace {

detail::DepthwiseArgs read_depthwise_args(ConfigReader& args, int rank) {
  detail::DepthwiseArgs a;
  a.rank = rank;
  a.depth_multiplier = args.integer("depth_multiplier", 1);
  if (!args.has("kernel_size")) args.fail("argument 'kernel_size' is required");
  a.kernel_size = args.tuple("kernel_size", rank, 1);
  a.strides = args.tuple("strides", rank, 1);
  a.padding = to_lower_case(args.text("padding", "valid"));
  a.data_format = args.data_format();
  a.dilation_rate = args.tuple("dilation_rate", rank, 1);
  a.activation = args.text("activation", "linear");
  if (a.activation.empty()) a.activation = "linear";
  a.use_bias = args.boolean("use_bias", true);
  a.depthwise_initializer = Initializer::from_argument(args, "depthwise_initializer", "glorot_uniform");
  a.bias_initializer = Initializer::from_argument(args, "bias_initializer", "zeros");
  a.depthwise_regularization = WeightRegularization::from_arguments(args, "depthwise");
  a.bias_regularization = WeightRegularization::from_arguments(args, "bias");
  return a;
}

// Keras's checks, after ConfigReader::finish.
void check_depthwise_args(const ConfigReader& args, const detail::DepthwiseArgs& a, const std::string& who) {
  if (a.depth_multiplier <= 0)
    args.fail("depth_multiplier must be positive, got " + std::to_string(a.depth_multiplier));
  for (const auto& [values, key] : {std::pair{&a.kernel_size, "kernel_size"}, std::pair{&a.strides, "strides"},
                                    std::pair{&a.dilation_rate, "dilation_rate"}})
    for (const std::int64_t value : *values)
      if (value <= 0) args.fail(std::string(key) + " must be positive, got " + list_text(*values));
  if (a.padding != "valid" && a.padding != "same")
    args.fail("padding must be 'valid' or 'same', got '" + a.padding + "'");
  ops::check_activation(a.activation, who);
}

void write_depthwise_args(Config& config, const detail::DepthwiseArgs& a) {
  config.set("depth_multiplier", a.depth_multiplier);
  config.set("kernel_size", Config::from_ints(a.kernel_size));
  config.set("strides", Config::from_ints(a.strides));
  config.set("padding", a.padding);
  config.set("data_format", a.data_format);
  config.set("dilation_rate", Config::from_ints(a.dilation_rate));
  config.set("activation", a.activation);
  config.set("use_bias", a.use_bias);
  config.set("depthwise_initializer", a.depthwise_initializer.get_config());
  config.set("bias_initializer", a.bias_initializer.get_config());
  WeightRegularization::write(config, "depthwise", a.depthwise_regularization, "bias", a.bias_regularization);
}

ops::ConvOptions options_of(const detail::DepthwiseArgs& a) {
  return {a.strides, a.dilation_rate, a.padding, a.data_format};
}

int channel_axis_of(const detail::DepthwiseArgs& a, const Shape& shape) {
  return a.data_format == "channels_last" ? shape.rank() - 1 : 1;
}

// The depthwise kernel (*k, C, m) as a grouped convolution's (*k, 1, C·m): one group per input channel,
// filter c·m + j of group c being channel c's filter j.
Tensor depthwise_conv(const Tensor& input, const Tensor& kernel, const detail::DepthwiseArgs& a) {
  std::vector<std::int64_t> dims = a.kernel_size;
  const std::int64_t channels = kernel.shape().dim(-2);
  dims.push_back(1);
  dims.push_back(channels * a.depth_multiplier);
  return ops::conv(input, ops::reshape(kernel, dims), options_of(a));
}

// The bias over the channel axis, reshaped for channels_first.
Tensor add_bias(const Tensor& output, const Tensor& bias, const detail::DepthwiseArgs& a) {
  if (a.data_format == "channels_last") return output + bias;
  std::vector<std::int64_t> dims(static_cast<std::size_t>(a.rank + 1), 1);
  dims[0] = bias.shape()[0];
  return output + ops::reshape(bias, dims);
}

}  // namespace

DepthwiseConvLayer::DepthwiseConvLayer(const Config& config, const std::string& class_name, int rank)
    : Layer(config, class_name) {
  ConfigReader args = config_reader(config);
  args_ = read_depthwise_args(args, rank);
  args.finish();
  check_depthwise_args(args, args_, describe());
}

Config DepthwiseConvLayer::get_config() const {
  Config config = base_config();
  write_depthwise_args(config, args_);
  return with_activity_regularizer(config);
}

namespace {
// Rank, channels and the window, checked at build and at each call (then with the shape `built` for, whose
// channel count the input must have). ShapeError naming `layer`.
void check_depthwise_input(const Layer& layer, const Shape& input_shape, const detail::DepthwiseArgs& a,
                           const Shape* built = nullptr) {
  auto fail = [&](const std::string& what) { throw ShapeError(layer.describe(), what, {{"input", input_shape}}); };
  if (input_shape.rank() != a.rank + 2)
    fail("expects inputs of rank " + std::to_string(a.rank + 2) + ", got rank " + std::to_string(input_shape.rank()));
  const std::int64_t channels = input_shape[channel_axis_of(a, input_shape)];
  if (channels == Shape::unknown) fail("needs inputs whose channel axis is known");
  if (built != nullptr && channels != (*built)[channel_axis_of(a, *built)])
    throw ShapeError(layer.describe(),
                     "was built for " + std::to_string((*built)[channel_axis_of(a, *built)]) + " input channels",
                     {{"built for", *built}, {"input", input_shape}});
  std::vector<std::int64_t> kernel = a.kernel_size;
  kernel.push_back(1);
  kernel.push_back(channels * a.depth_multiplier);
  try {
    ops::conv_output_shape(input_shape, Shape(kernel), options_of(a));
  } catch (const ShapeError& error) {
    fail(std::string("cannot convolve its input: ") + error.what());
  }
}
}  // namespace

void DepthwiseConvLayer::build(const Shape& input_shape) {
  check_depthwise_input(*this, input_shape, args_);
  const std::int64_t channels = input_shape[channel_axis_of(args_, input_shape)];
  std::vector<std::int64_t> dims = args_.kernel_size;
  dims.push_back(channels);
  dims.push_back(args_.depth_multiplier);
  kernel_ = add_weight("kernel", Shape(dims), args_.depthwise_initializer);
  regularize(kernel_, args_.depthwise_regularization);
  if (args_.use_bias) {
    bias_ = add_weight("bias", {channels * args_.depth_multiplier}, args_.bias_initializer);
    regularize(bias_, args_.bias_regularization);
  }
}

Tensor DepthwiseConvLayer::call(const Tensor& input, const CallArgs&) {
  check_depthwise_input(*this, input.shape(), args_, &build_shapes().at(0));
  Tensor output = depthwise_conv(input, variable(kernel_, input), args_);
  if (args_.use_bias) output = add_bias(output, variable(bias_, input), args_);
  return ops::activation(output, args_.activation);
}

SeparableConvLayer::SeparableConvLayer(const Config& config, const std::string& class_name, int rank)
    : Layer(config, class_name) {
  ConfigReader args = config_reader(config);
  filters_ = args.integer("filters");
  args_ = read_depthwise_args(args, rank);
  pointwise_initializer_ = Initializer::from_argument(args, "pointwise_initializer", "glorot_uniform");
  pointwise_regularization_ = WeightRegularization::from_arguments(args, "pointwise");
  args.finish();
  if (filters_ <= 0) args.fail("filters must be positive, got " + std::to_string(filters_));
  check_depthwise_args(args, args_, describe());
}

Config SeparableConvLayer::get_config() const {
  Config config = base_config();
  config.set("filters", filters_);
  write_depthwise_args(config, args_);
  config.set("pointwise_initializer", pointwise_initializer_.get_config());
  pointwise_regularization_.write(config, "pointwise");
  return with_activity_regularizer(config);
}

void SeparableConvLayer::build(const Shape& input_shape) {
  check_depthwise_input(*this, input_shape, args_);
  const std::int64_t channels = input_shape[channel_axis_of(args_, input_shape)];
  std::vector<std::int64_t> depthwise = args_.kernel_size;
  depthwise.push_back(channels);
  depthwise.push_back(args_.depth_multiplier);
  std::vector<std::int64_t> pointwise(static_cast<std::size_t>(args_.rank), 1);
  pointwise.push_back(channels * args_.depth_multiplier);
  pointwise.push_back(filters_);
  depthwise_kernel_ = add_weight("depthwise_kernel", Shape(depthwise), args_.depthwise_initializer);
  regularize(depthwise_kernel_, args_.depthwise_regularization);
  pointwise_kernel_ = add_weight("pointwise_kernel", Shape(pointwise), pointwise_initializer_);
  regularize(pointwise_kernel_, pointwise_regularization_);
  if (args_.use_bias) {
    bias_ = add_weight("bias", {filters_}, args_.bias_initializer);
    regularize(bias_, args_.bias_regularization);
  }
}

Tensor SeparableConvLayer::call(const Tensor& input, const CallArgs&) {
  check_depthwise_input(*this, input.shape(), args_, &build_shapes().at(0));
  const Tensor depthwise = depthwise_conv(input, variable(depthwise_kernel_, input), args_);
  ops::ConvOptions pointwise;
  pointwise.data_format = args_.data_format;
  Tensor output = ops::conv(depthwise, variable(pointwise_kernel_, input), pointwise);
  if (args_.use_bias) output = add_bias(output, variable(bias_, input), args_);
  return ops::activation(output, args_.activation);
}

DepthwiseConv2D::DepthwiseConv2D(std::int64_t kernel_size, const std::string& activation, const Config& options)
    : LayerHandle(std::make_shared<DepthwiseConv2DLayer>(
          options.with("kernel_size", kernel_size).with("activation", activation.empty() ? "linear" : activation))) {}

namespace {
Config conv_config(std::int64_t filters, Config kernel_size, const std::string& activation, const Config& options) {
  return options.with("filters", filters)
      .with("kernel_size", std::move(kernel_size))
      .with("activation", activation.empty() ? "linear" : activation);
}
}  // namespace

Conv1D::Conv1D(std::int64_t filters, std::int64_t kernel_size, const std::string& activation, const Config& options)
    : LayerHandle(std::make_shared<Conv1DLayer>(conv_config(filters, kernel_size, activation, options))) {}

Conv2D::Conv2D(std::int64_t filters, std::int64_t kernel_size, const std::string& activation, const Config& options)
    : LayerHandle(std::make_shared<Conv2DLayer>(conv_config(filters, kernel_size, activation, options))) {}

Conv2D::Conv2D(std::int64_t filters, const std::vector<std::int64_t>& kernel_size, const std::string& activation,
               const Config& options)
    : LayerHandle(
          std::make_shared<Conv2DLayer>(conv_config(filters, Config::from_ints(kernel_size), activation, options))) {}

Conv1DTranspose::Conv1DTranspose(std::int64_t filters, std::int64_t kernel_size, const std::string& activation,
                                 const Config& options)
    : LayerHandle(std::make_shared<Conv1DTransposeLayer>(conv_config(filters, kernel_size, activation, options))) {}

Conv2DTranspose::Conv2DTranspose(std::int64_t filters, std::int64_t kernel_size, const std::string& activation,
                                 const Config& options)
    : LayerHandle(std::make_shared<Conv2DTransposeLayer>(conv_config(filters, kernel_size, activation, options))) {}

SeparableConv1D::SeparableConv1D(std::int64_t filters, std::int64_t kernel_size, const std::string& activation,
                                 const Config& options)
    : LayerHandle(std::make_shared<SeparableConv1DLayer>(conv_config(filters, kernel_size, activation, options))) {}

SeparableConv2D::SeparableConv2D(std::int64_t filters, std::int64_t kernel_size, const std::string& activation,
                                 const Config& options)
    : LayerHandle(std::make_shared<SeparableConv2DLayer>(conv_config(filters, kernel_size, activation, options))) {}

KILN_REGISTER_LAYER("kiln>Conv1D", Conv1DLayer);
KILN_REGISTER_LAYER("kiln>Conv2D", Conv2DLayer);
KILN_REGISTER_LAYER("kiln>Conv1DTranspose", Conv1DTransposeLayer);
KILN_REGISTER_LAYER("kiln>Conv2DTranspose", Conv2DTransposeLayer);
KILN_REGISTER_LAYER("kiln>DepthwiseConv2D", DepthwiseConv2DLayer);
KILN_REGISTER_LAYER("kiln>SeparableConv1D", SeparableConv1DLayer);
KILN_REGISTER_LAYER("kiln>SeparableConv2D", SeparableConv2DLayer);

}  // namespace kiln
