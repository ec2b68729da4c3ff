#include <kiln/layers/applications/application_layers.hpp>

#include <string>

#include <kiln/core/error.hpp>
#include <kiln/layers/detail/seed.hpp>
#include <kiln/layers/initializers.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

// ---- LayerScale ---------------------------------------------------------------------------------------------

LayerScaleLayer::LayerScaleLayer(const Config& config) : Layer(config, "LayerScale") {
  ConfigReader args = config_reader(config);
  if (!args.has("init_values")) args.fail("argument 'init_values' is required");
  init_values_ = args.number("init_values", 0.0);
  projection_dim_ = args.integer("projection_dim");
  args.finish();
  if (projection_dim_ < 1) args.fail("projection_dim must be at least 1, got " + std::to_string(projection_dim_));
}

Config LayerScaleLayer::get_config() const {
  Config config = base_config();
  config.set("init_values", init_values_);
  config.set("projection_dim", projection_dim_);
  return config;
}

void LayerScaleLayer::check_input(const Shape& input_shape) const {
  const std::int64_t channels = input_shape.rank() == 0 ? Shape::unknown : input_shape[input_shape.rank() - 1];
  if (input_shape.rank() < 1 || (projection_dim_ != 1 && channels != projection_dim_))
    shape_error("scales the last axis by projection_dim = " + std::to_string(projection_dim_) +
                    " values, which the input's last axis must match",
                {{"input", input_shape}});
}

void LayerScaleLayer::build(const Shape& input_shape) {
  check_input(input_shape);
  gamma_ = add_weight("gamma", Shape{projection_dim_},
                      Initializer::from_config({{"class_name", "Constant"}, {"config", {{"value", init_values_}}}}));
}

Tensor LayerScaleLayer::call(const Tensor& input, const CallArgs&) {
  check_input(input.shape());
  return input * variable(gamma_, input);
}

// ---- StochasticDepth ----------------------------------------------------------------------------------------

StochasticDepthLayer::StochasticDepthLayer(const Config& config) : Layer(config, "StochasticDepth") {
  ConfigReader args = config_reader(config);
  if (!args.has("drop_path_rate")) args.fail("argument 'drop_path_rate' is required");
  rate_ = args.number("drop_path_rate", 0.0);
  args.finish();
  // Keras takes 1, then divides by 0 when it trains.
  if (!(rate_ >= 0.0 && rate_ < 1.0)) args.fail("drop_path_rate must be in [0, 1), got " + std::to_string(rate_));
}

Config StochasticDepthLayer::get_config() const {
  Config config = base_config();
  config.set("drop_path_rate", rate_);
  return config;
}

Tensor StochasticDepthLayer::call(const Tensor& input, const CallArgs& args) {
  if (!args.training() || rate_ == 0.0) return input;
  if (input.rank() < 1) shape_error("needs a batch axis", {{"input", input.shape()}});
  // One draw per sample: the mask spans the batch axis and broadcasts over the rest.
  std::vector<int> broadcast;
  for (int axis = 1; axis < input.rank(); ++axis) broadcast.push_back(axis);
  const std::uint64_t seed = detail::call_seed(Config(), name(), input);
  return input * ops::dropout_mask(input, rate_, seed, broadcast);
}

// ---- CustomScaleLayer ---------------------------------------------------------------------------------------

CustomScaleLayerLayer::CustomScaleLayerLayer(const Config& config) : Layer(config, "CustomScaleLayer") {
  ConfigReader args = config_reader(config);
  if (!args.has("scale")) args.fail("argument 'scale' is required");
  scale_ = args.number("scale", 1.0);
  args.finish();
}

Config CustomScaleLayerLayer::get_config() const {
  Config config = base_config();
  config.set("scale", scale_);
  return config;
}

void CustomScaleLayerLayer::check_shapes(const Shape& x, const Shape& residual) const {
  bool same = x.rank() == residual.rank();
  for (int axis = 0; same && axis < x.rank(); ++axis)
    same = x[axis] == residual[axis] || x[axis] == Shape::unknown || residual[axis] == Shape::unknown;
  if (!same)
    shape_error("adds its second input, scaled, to its first: they must have one shape",
                {{"inputs[0]", x}, {"inputs[1]", residual}});
}

void CustomScaleLayerLayer::build(const std::vector<Shape>& input_shapes) { check_shapes(input_shapes[0], input_shapes[1]); }

std::vector<Tensor> CustomScaleLayerLayer::call(const std::vector<Tensor>& inputs, const CallArgs&) {
  check_shapes(inputs[0].shape(), inputs[1].shape());
  return {inputs[0] + inputs[1] * scale_};
}

LayerScale::LayerScale(double init_values, std::int64_t projection_dim, const Config& options)
    : LayerHandle(std::make_shared<LayerScaleLayer>(
          options.with("init_values", init_values).with("projection_dim", projection_dim))) {}
StochasticDepth::StochasticDepth(double drop_path_rate, const Config& options)
    : LayerHandle(std::make_shared<StochasticDepthLayer>(options.with("drop_path_rate", drop_path_rate))) {}
CustomScaleLayer::CustomScaleLayer(double scale, const Config& options)
    : LayerHandle(std::make_shared<CustomScaleLayerLayer>(options.with("scale", scale))) {}

KILN_REGISTER_LAYER("kiln>LayerScale", LayerScaleLayer);
KILN_REGISTER_LAYER("kiln>StochasticDepth", StochasticDepthLayer);
KILN_REGISTER_LAYER("kiln>CustomScaleLayer", CustomScaleLayerLayer);

}  // namespace kiln
