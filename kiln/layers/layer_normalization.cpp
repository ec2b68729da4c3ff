#include <kiln/layers/layer_normalization.hpp>

#include <string>

#include <kiln/core/array.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

namespace {

// Stands in for a weight that center/scale switched off, so one fused op serves every combination.
Tensor constant_features(const Tensor& input, std::int64_t features, double value, DType dtype,
                         const std::string& name) {
  return ops::constant(input.graph(), Array::full(Shape{features}, value, dtype), name);
}

}  // namespace

LayerNormalizationLayer::LayerNormalizationLayer(const Config& config) : Layer(config, "LayerNormalization") {
  ConfigReader args = config_reader(config);
  axis_ = args.int_or_ints("axis", -1, axis_is_list_);
  epsilon_ = args.number("epsilon", 1e-3);
  center_ = args.boolean("center", true);
  scale_ = args.boolean("scale", true);
  if (args.boolean("rms_scaling", false)) args.fail("rms_scaling = true is not supported by kiln");
  beta_initializer_ = Initializer::from_argument(args, "beta_initializer", "zeros");
  gamma_initializer_ = Initializer::from_argument(args, "gamma_initializer", "ones");
  beta_regularization_ = WeightRegularization::from_arguments(args, "beta");
  gamma_regularization_ = WeightRegularization::from_arguments(args, "gamma");
  args.finish();
  if (axis_.empty()) args.fail("axis must name at least one axis");
  if (!(epsilon_ > 0.0)) args.fail("epsilon must be positive, got " + std::to_string(epsilon_));
}

Config LayerNormalizationLayer::get_config() const {
  Config config = base_config();
  config.set("axis", axis_is_list_ ? Config::from_ints(axis_) : Config(axis_.front()));
  config.set("epsilon", epsilon_);
  config.set("center", center_);
  config.set("scale", scale_);
  config.set("rms_scaling", false);
  config.set("beta_initializer", beta_initializer_.get_config());
  config.set("gamma_initializer", gamma_initializer_.get_config());
  WeightRegularization::write(config, "beta", beta_regularization_, "gamma", gamma_regularization_);
  return config;
}

// The fused op normalizes the last axis only; Keras's other axes (or several) would need another kernel.
void LayerNormalizationLayer::check_axis(const Shape& input_shape) const {
  const std::int64_t last = input_shape.rank() - 1;
  if (axis_.size() == 1 && (axis_[0] == -1 || axis_[0] == last)) return;
  config_error("only the last axis can be normalized (axis -1 or " + std::to_string(last) + " for input shape " +
               input_shape.to_string() + "), got axis " + Config::from_ints(axis_).to_string());
}

void LayerNormalizationLayer::build(const Shape& input_shape) {
  if (input_shape.rank() < 1 || input_shape.dim(-1) == Shape::unknown)
    shape_error("needs inputs whose last dimension is known", {{"input", input_shape}});
  check_axis(input_shape);
  const Shape features{input_shape.dim(-1)};
  if (scale_) {  // Keras's order: gamma, then beta
    gamma_ = add_weight("gamma", features, gamma_initializer_);
    regularize(gamma_, gamma_regularization_);
  }
  if (center_) {
    beta_ = add_weight("beta", features, beta_initializer_);
    regularize(beta_, beta_regularization_);
  }
}

Tensor LayerNormalizationLayer::gamma_for(const Tensor& input) const {
  if (scale_) return variable(gamma_, input);
  return constant_features(input, build_shapes().at(0).dim(-1), 1.0, dtype(), "gamma");
}

Tensor LayerNormalizationLayer::beta_for(const Tensor& input) const {
  if (center_) return variable(beta_, input);
  return constant_features(input, build_shapes().at(0).dim(-1), 0.0, dtype(), "beta");
}

Tensor LayerNormalizationLayer::call(const Tensor& input, const CallArgs&) {
  const Shape& expected = build_shapes().at(0);
  if (input.rank() < 1 || input.shape().dim(-1) != expected.dim(-1))
    shape_error("was built for inputs with last dimension " + std::to_string(expected.dim(-1)),
                {{"built for", expected}, {"input", input.shape()}});
  check_axis(input.shape());
  return ops::layer_norm(input, gamma_for(input), beta_for(input), epsilon_);
}

LayerNormalization::LayerNormalization(double epsilon, const Config& options)
    : LayerHandle(std::make_shared<LayerNormalizationLayer>(options.with("epsilon", epsilon))) {}

KILN_REGISTER_LAYER("kiln>LayerNormalization", LayerNormalizationLayer);

}  // namespace kiln
