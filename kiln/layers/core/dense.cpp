#include <kiln/layers/core/dense.hpp>

#include <kiln/core/error.hpp>
#include <kiln/layers/detail/quantization.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

DenseLayer::DenseLayer(const Config& config) : Layer(config, "Dense", {"int8"}) {
  ConfigReader args = config_reader(config);
  units_ = args.integer("units");
  activation_ = args.text("activation", "linear");
  if (activation_.empty()) activation_ = "linear";
  use_bias_ = args.boolean("use_bias", true);
  kernel_initializer_ = Initializer::from_argument(args, "kernel_initializer", "glorot_uniform");
  bias_initializer_ = Initializer::from_argument(args, "bias_initializer", "zeros");
  kernel_regularization_ = WeightRegularization::from_arguments(args, "kernel");
  bias_regularization_ = WeightRegularization::from_arguments(args, "bias");
  for (const char* key : {"lora_rank", "lora_alpha"}) args.unsupported(key);
  read_quantization_config(args);
  args.finish();
  if (units_ <= 0) args.fail("units must be positive, got " + std::to_string(units_));
  ops::check_activation(activation_, describe());
}

// Keras's Int8QuantizationConfig (keras/src/quantizers/quantization_config.py): its activation quantizer says
// whether the inputs are quantized (Keras's default, AbsMaxQuantizer()) or multiply the int8 kernel as floats (null);
// its weight quantizer mattered only when the kernel was quantized. A config for a float layer, or another class,
// or quantizers kiln does not compute, are refused by name.
void DenseLayer::read_quantization_config(ConfigReader& args) {
  const Config& given = args.value("quantization_config");
  const Config activation =
      detail::int8_activation_quantizer(args, given, !quantization_mode().empty(), dtype_name(dtype()));
  if (quantization_mode().empty()) return;
  if (!activation.is_null() && !detail::is_default_abs_max(activation))
    args.fail("kiln quantizes int8 activations as Keras's AbsMaxQuantizer() does (value_range [-127, 127], epsilon "
              "1e-07, the last axis); got activation_quantizer " + activation.to_string());
  quantize_inputs_ = !activation.is_null();
  quantization_config_ = given.is_null() ? detail::default_int8_quantization_config() : given;
}

Config DenseLayer::get_config() const {
  Config config = base_config();
  config.set("units", units_);
  config.set("activation", activation_);
  config.set("use_bias", use_bias_);
  config.set("kernel_initializer", kernel_initializer_.get_config());
  config.set("bias_initializer", bias_initializer_.get_config());
  WeightRegularization::write(config, "kernel", kernel_regularization_, "bias", bias_regularization_);
  config.set("quantization_config", quantization_config_);  // Keras 3.16 writes it, null for a float model
  return config;
}

std::vector<std::string> DenseLayer::keras_weight_paths() const {
  if (quantization_mode().empty()) return Layer::keras_weight_paths();
  // Keras's variable_serialization_spec for int8: kernel, bias (when used), kernel_scale, numbered in that order.
  std::vector<std::string> paths;
  int next = 0;
  paths.push_back("vars/" + std::to_string(next++));  // kernel (weight 0)
  if (use_bias_) paths.push_back("vars/" + std::to_string(next++));
  paths.push_back("vars/" + std::to_string(next++));  // kernel_scale
  return paths;
}

void DenseLayer::build(const Shape& input_shape) {
  if (input_shape.rank() < 1 || input_shape.dim(-1) == Shape::unknown)
    shape_error("needs inputs whose last dimension is known", {{"input", input_shape}});
  if (quantization_mode() == "int8") {
    // As Keras's _int8_build: the int8 kernel and its per-unit scale, neither trained.
    kernel_ = add_int8_weight("kernel", {input_shape.dim(-1), units_});
  } else {
    kernel_ = add_weight("kernel", {input_shape.dim(-1), units_}, kernel_initializer_);
    regularize(kernel_, kernel_regularization_);
  }
  if (use_bias_) {
    bias_ = add_weight("bias", {units_}, bias_initializer_);
    regularize(bias_, bias_regularization_);
  }
  if (quantization_mode() == "int8") kernel_scale_ = add_weight("kernel_scale", {units_}, Initializer::get("ones"), false);
}

Tensor DenseLayer::call(const Tensor& input, const CallArgs&) {
  const Shape& expected = build_shapes().at(0);
  if (input.rank() < 1 || input.shape().dim(-1) != expected.dim(-1))
    shape_error("was built for inputs with last dimension " + std::to_string(expected.dim(-1)),
                {{"built for", expected}, {"input", input.shape()}});
  Tensor output = quantization_mode() == "int8"
                      ? ops::quantized_matmul(input, variable(kernel_, input), variable(kernel_scale_, input), quantize_inputs_)
                      : ops::matmul(input, variable(kernel_, input));
  if (use_bias_) output = output + variable(bias_, input);  // broadcast; autodiff sums the bias gradient
  return ops::activation(output, activation_);
}

Dense::Dense(std::int64_t units, const std::string& activation, const Config& options)
    : LayerHandle(std::make_shared<DenseLayer>(
          options.with("units", units).with("activation", activation.empty() ? "linear" : activation))) {}

KILN_REGISTER_LAYER("kiln>Dense", DenseLayer);

}  // namespace kiln
