#include <kiln/layers/core/dense.hpp>

#include <kiln/core/error.hpp>
#include <kiln/layers/detail/quantization.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

DenseLayer::DenseLayer(const Config& config) : Layer(config, "Dense", {"int8", "int4"}) {
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
  given_quantization_config_ = args.value("quantization_config");
  if (!policy_map_pending()) read_quantization_config(args);  // (else once the map gives the mode)
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
  const std::string& mode = quantization_mode();
  if (mode.rfind("int4", 0) == 0) {
    const detail::Int4Setting setting = detail::read_int4_config(args, given, mode);
    int4_block_size_ = setting.block_size;
    quantize_inputs_ = setting.quantize_inputs;
    quantization_config_ = setting.written;
    return;
  }
  const Config activation = detail::int8_activation_quantizer(args, given, !mode.empty(), dtype_name(dtype()));
  if (mode.empty()) return;
  if (!activation.is_null() && !detail::is_default_abs_max(activation))
    args.fail("kiln quantizes int8 activations as Keras's AbsMaxQuantizer() does (value_range [-127, 127], epsilon "
              "1e-07, the last axis); got activation_quantizer " + activation.to_string());
  quantize_inputs_ = !activation.is_null();
  quantization_config_ = given.is_null() ? detail::default_int8_quantization_config() : given;
}

void DenseLayer::quantization_resolved() {
  quantize_inputs_ = true;
  quantization_config_ = Config();
  int4_block_size_ = 0;
  ConfigReader args(Config{{"quantization_config", given_quantization_config_}}, describe());
  read_quantization_config(args);
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
  // Keras's variable_serialization_spec: int8 kernel, bias (when used), kernel_scale; int4 by blocks the same, then
  // kernel_zero and g_idx; numbered in that order. The weights were made in that order too.
  std::vector<std::string> paths;
  const std::size_t count = use_bias_ ? 3 : 2;
  const std::size_t total = count + (quantization_mode().rfind("int4", 0) == 0 && int4_block_size_ > 0 ? 2 : 0);
  for (std::size_t i = 0; i < total; ++i) paths.push_back("vars/" + std::to_string(i));
  return paths;
}

void DenseLayer::build(const Shape& input_shape) {
  if (input_shape.rank() < 1 || input_shape.dim(-1) == Shape::unknown)
    shape_error("needs inputs whose last dimension is known", {{"input", input_shape}});
  const std::int64_t input_dim = input_shape.dim(-1);
  const bool int4 = quantization_mode().rfind("int4", 0) == 0;
  if (quantization_mode() == "int8") {
    // As Keras's _int8_build: the int8 kernel and its per-unit scale, neither trained.
    kernel_ = add_int8_weight("kernel", {input_dim, units_});
  } else if (int4) {
    // As Keras's _int4_build: two int4 values a byte along the units.
    kernel_ = add_int8_weight("kernel", {input_dim, (units_ + 1) / 2});
  } else {
    kernel_ = add_weight("kernel", {input_shape.dim(-1), units_}, kernel_initializer_);
    regularize(kernel_, kernel_regularization_);
  }
  if (use_bias_) {
    bias_ = add_weight("bias", {units_}, bias_initializer_);
    regularize(bias_, bias_regularization_);
  }
  if (quantization_mode() == "int8") kernel_scale_ = add_weight("kernel_scale", {units_}, Initializer::get("ones"), false);
  if (int4) {  // Keras's int4 variables after the kernel and bias: per unit, or per block of input rows with zero
              // points and g_idx
    ProjectionQuantization scales;
    scales.int4_block = int4_block_size_;
    add_int4_scales("", input_dim, units_, scales);
    kernel_scale_ = scales.scale;
    kernel_zero_ = scales.zero;
    g_idx_ = scales.g_idx;
  }
}

Tensor DenseLayer::call(const Tensor& input, const CallArgs&) {
  const Shape& expected = build_shapes().at(0);
  if (input.rank() < 1 || input.shape().dim(-1) != expected.dim(-1))
    shape_error("was built for inputs with last dimension " + std::to_string(expected.dim(-1)),
                {{"built for", expected}, {"input", input.shape()}});
  Tensor output;
  if (quantization_mode() == "int8") {
    output = ops::quantized_matmul(input, variable(kernel_, input), variable(kernel_scale_, input), quantize_inputs_);
  } else if (quantization_mode().rfind("int4", 0) == 0 && int4_block_size_ < 0) {
    // Keras's per-channel int4: the int4 kernel unpacked, the product as int8's (the inputs quantized only with an
    // activation quantizer), divided by the unit's scale.
    output = ops::quantized_matmul(input, variable(kernel_, input), variable(kernel_scale_, input), quantize_inputs_, 1,
                                   false, units_);
  } else if (quantization_mode().rfind("int4", 0) == 0) {
    // Keras's sub-channel int4: the kernel as floats, then a float product (no input quantization).
    output = detail::int4_groups_product(input, variable(kernel_, input), variable(kernel_scale_, input),
                                         variable(kernel_zero_, input), variable(g_idx_, input), units_);
  } else {
    output = ops::matmul(input, variable(kernel_, input));
  }
  if (use_bias_) output = output + variable(bias_, input);  // broadcast; autodiff sums the bias gradient
  return ops::activation(output, activation_);
}

Dense::Dense(std::int64_t units, const std::string& activation, const Config& options)
    : LayerHandle(std::make_shared<DenseLayer>(
          options.with("units", units).with("activation", activation.empty() ? "linear" : activation))) {}

KILN_REGISTER_LAYER("kiln>Dense", DenseLayer);

}  // namespace kiln
