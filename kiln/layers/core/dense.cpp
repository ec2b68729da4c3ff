#include <kiln/layers/core/dense.hpp>

#include <kiln/core/error.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

DenseLayer::DenseLayer(const Config& config) : Layer(config, "Dense") {
  ConfigReader args = config_reader(config);
  units_ = args.integer("units");
  activation_ = args.text("activation", "linear");
  if (activation_.empty()) activation_ = "linear";
  use_bias_ = args.boolean("use_bias", true);
  kernel_initializer_ = Initializer::from_argument(args, "kernel_initializer", "glorot_uniform");
  bias_initializer_ = Initializer::from_argument(args, "bias_initializer", "zeros");
  kernel_regularization_ = WeightRegularization::from_arguments(args, "kernel");
  bias_regularization_ = WeightRegularization::from_arguments(args, "bias");
  for (const char* key : {"lora_rank", "lora_alpha", "quantization_config"}) args.unsupported(key);
  args.finish();
  if (units_ <= 0) args.fail("units must be positive, got " + std::to_string(units_));
  ops::check_activation(activation_, describe());
}

Config DenseLayer::get_config() const {
  Config config = base_config();
  config.set("units", units_);
  config.set("activation", activation_);
  config.set("use_bias", use_bias_);
  config.set("kernel_initializer", kernel_initializer_.get_config());
  config.set("bias_initializer", bias_initializer_.get_config());
  WeightRegularization::write(config, "kernel", kernel_regularization_, "bias", bias_regularization_);
  config.set("quantization_config", Config());  // Keras 3.16 writes it, null for a float model
  return config;
}

void DenseLayer::build(const Shape& input_shape) {
  if (input_shape.rank() < 1 || input_shape.dim(-1) == Shape::unknown)
    shape_error("needs inputs whose last dimension is known", {{"input", input_shape}});
  kernel_ = add_weight("kernel", {input_shape.dim(-1), units_}, kernel_initializer_);
  regularize(kernel_, kernel_regularization_);
  if (use_bias_) {
    bias_ = add_weight("bias", {units_}, bias_initializer_);
    regularize(bias_, bias_regularization_);
  }
}

Tensor DenseLayer::call(const Tensor& input, const CallArgs&) {
  const Shape& expected = build_shapes().at(0);
  if (input.rank() < 1 || input.shape().dim(-1) != expected.dim(-1))
    shape_error("was built for inputs with last dimension " + std::to_string(expected.dim(-1)),
                {{"built for", expected}, {"input", input.shape()}});
  Tensor output = ops::matmul(input, variable(kernel_, input));
  if (use_bias_) output = output + variable(bias_, input);  // broadcast; autodiff sums the bias gradient
  return ops::activation(output, activation_);
}

Dense::Dense(std::int64_t units, const std::string& activation, const Config& options)
    : LayerHandle(std::make_shared<DenseLayer>(
          options.with("units", units).with("activation", activation.empty() ? "linear" : activation))) {}

KILN_REGISTER_LAYER("kiln>Dense", DenseLayer);

}  // namespace kiln
