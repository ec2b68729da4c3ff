#include <kiln/layers/convolution.hpp>

#include <algorithm>

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
  data_format_ = to_lower_case(args.text("data_format", "channels_last"));
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
  kernel_initializer_ = args.has("kernel_initializer") ? Initializer::from_config(args.value("kernel_initializer"))
                                                       : Initializer::get("glorot_uniform");
  bias_initializer_ = args.has("bias_initializer") ? Initializer::from_config(args.value("bias_initializer"))
                                                   : Initializer::get("zeros");
  for (const char* key : {"kernel_regularizer", "bias_regularizer", "activity_regularizer", "kernel_constraint",
                          "bias_constraint", "lora_rank", "lora_alpha"})
    args.unsupported(key);
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
  if (data_format_ != "channels_last" && data_format_ != "channels_first")
    args.fail("data_format must be 'channels_last' or 'channels_first', got '" + data_format_ + "'");
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
  return config;
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
    const std::int64_t span = dilation_rate_[a] * (kernel_size_[a] - 1) + 1, stride = strides_[a];
    if (output_padding_.empty())
      lengths.push_back(padding_ == "valid" ? in * stride + std::max<std::int64_t>(span - stride, 0) : in * stride);
    else
      lengths.push_back((in - 1) * stride + span - 2 * (padding_ == "same" ? span / 2 : 0) + output_padding_[a]);
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

void ConvLayer::build(const Shape& input_shape) {
  check_input(input_shape);
  const std::int64_t channels = input_shape[static_cast<int>(channel_axis(input_shape))];
  const Shape kernel = kernel_shape(channels);
  if (!transpose_) {
    try {
      ops::conv_output_shape(input_shape, kernel, {strides_, dilation_rate_, padding_, data_format_});
    } catch (const ShapeError& error) {  // the window must fit, as in Keras's build
      shape_error(std::string("cannot convolve its input: ") + error.what(), {{"input", input_shape}});
    }
  }
  kernel_ = add_weight("kernel", kernel, kernel_initializer_);
  if (use_bias_) bias_ = add_weight("bias", {filters_}, bias_initializer_);
}

Tensor ConvLayer::call(const Tensor& input, const CallArgs&) {
  check_input(input.shape());
  const Shape& built = build_shapes().at(0);
  const int axis = static_cast<int>(channel_axis(built));
  if (input.shape()[axis] != built[axis])
    shape_error("was built for " + std::to_string(built[axis]) + " input channels",
                {{"built for", built}, {"input", input.shape()}});
  const Tensor kernel = variable(kernel_, input);
  if (!transpose_) {
    try {
      ops::conv_output_shape(input.shape(), kernel.shape(), {strides_, dilation_rate_, padding_, data_format_});
    } catch (const ShapeError& error) {
      shape_error(std::string("cannot convolve its input: ") + error.what(), {{"input", input.shape()}});
    }
  }
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

KILN_REGISTER_LAYER("kiln>Conv1D", Conv1DLayer);
KILN_REGISTER_LAYER("kiln>Conv2D", Conv2DLayer);
KILN_REGISTER_LAYER("kiln>Conv1DTranspose", Conv1DTransposeLayer);
KILN_REGISTER_LAYER("kiln>Conv2DTranspose", Conv2DTransposeLayer);

}  // namespace kiln
