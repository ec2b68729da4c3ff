#include <kiln/layers/normalization/batch_normalization.hpp>

#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

BatchNormalizationLayer::BatchNormalizationLayer(const Config& config) : Layer(config, "BatchNormalization") {
  ConfigReader args = config_reader(config);
  axis_ = args.integer("axis", -1);
  momentum_ = args.number("momentum", 0.99);
  epsilon_ = args.number("epsilon", 1e-3);
  center_ = args.boolean("center", true);
  scale_ = args.boolean("scale", true);
  beta_initializer_ = Initializer::from_argument(args, "beta_initializer", "zeros");
  gamma_initializer_ = Initializer::from_argument(args, "gamma_initializer", "ones");
  moving_mean_initializer_ = Initializer::from_argument(args, "moving_mean_initializer", "zeros");
  moving_variance_initializer_ = Initializer::from_argument(args, "moving_variance_initializer", "ones");
  const bool synchronized = args.boolean("synchronized", false);
  const bool renorm = args.boolean("renorm", false);
  renorm_momentum_ = args.number("renorm_momentum", 0.99);
  beta_regularization_ = WeightRegularization::from_arguments(args, "beta");
  gamma_regularization_ = WeightRegularization::from_arguments(args, "gamma");
  args.unsupported("renorm_clipping");
  args.finish();
  if (synchronized) args.fail("synchronized=true is not supported (it needs several devices)");
  if (renorm) args.fail("renorm=true is not supported");
  if (!(epsilon_ > 0)) args.fail("epsilon must be positive, got " + std::to_string(epsilon_));
  if (!(momentum_ >= 0 && momentum_ <= 1)) args.fail("momentum must be in [0, 1], got " + std::to_string(momentum_));
}

Config BatchNormalizationLayer::get_config() const {
  Config config = base_config();
  config.set("axis", axis_);
  config.set("momentum", momentum_);
  config.set("epsilon", epsilon_);
  config.set("center", center_);
  config.set("scale", scale_);
  config.set("beta_initializer", beta_initializer_.get_config());
  config.set("gamma_initializer", gamma_initializer_.get_config());
  WeightRegularization::write(config, "beta", beta_regularization_, "gamma", gamma_regularization_);
  config.set("moving_mean_initializer", moving_mean_initializer_.get_config());
  config.set("moving_variance_initializer", moving_variance_initializer_.get_config());
  config.set("synchronized", false);
  config.set("renorm", false);
  config.set("renorm_clipping", Config());
  config.set("renorm_momentum", renorm_momentum_);
  return config;
}

int BatchNormalizationLayer::feature_axis(const Shape& shape) const {
  return static_cast<int>(axis_ < 0 ? axis_ + shape.rank() : axis_);
}

void BatchNormalizationLayer::check_input(const Shape& input_shape) const {
  if (axis_ >= input_shape.rank() || axis_ < -input_shape.rank())
    shape_error(
        "axis " + std::to_string(axis_) + " does not exist in inputs of rank " + std::to_string(input_shape.rank()),
        {{"input", input_shape}});
  if (input_shape[feature_axis(input_shape)] == Shape::unknown)
    shape_error("needs inputs whose feature axis " + std::to_string(axis_) + " is known", {{"input", input_shape}});
}

void BatchNormalizationLayer::build(const Shape& input_shape) {
  check_input(input_shape);
  const Shape features{input_shape[feature_axis(input_shape)]};
  if (scale_) {
    gamma_ = add_weight("gamma", features, gamma_initializer_);
    regularize(gamma_, gamma_regularization_);
  }
  if (center_) {
    beta_ = add_weight("beta", features, beta_initializer_);
    regularize(beta_, beta_regularization_);
  }
  moving_mean_ = add_weight("moving_mean", features, moving_mean_initializer_, /*trainable=*/false);
  moving_variance_ = add_weight("moving_variance", features, moving_variance_initializer_, /*trainable=*/false);
}

Tensor BatchNormalizationLayer::call(const Tensor& input, const CallArgs& args) {
  const Shape& built = build_shapes().at(0);
  check_input(input.shape());
  const int axis = feature_axis(input.shape());
  if (input.rank() != built.rank() || input.shape()[axis] != built[feature_axis(built)])
    shape_error("was built for inputs of rank " + std::to_string(built.rank()) + " with " +
                    std::to_string(built[feature_axis(built)]) + " features on axis " + std::to_string(axis_),
                {{"built for", built}, {"input", input.shape()}});
  const std::int64_t features = input.shape()[axis];
  Graph& graph = input.graph();
  const Tensor gamma =
      scale_ ? variable(gamma_, input) : ops::constant(graph, Array::full({features}, 1.0, input.dtype()), "gamma");
  const Tensor beta =
      center_ ? variable(beta_, input) : ops::constant(graph, Array::full({features}, 0.0, input.dtype()), "beta");
  const Tensor moving_mean = variable(moving_mean_, input);
  const Tensor moving_variance = variable(moving_variance_, input);
  // Keras 3: a layer that is not trainable normalizes with its moving statistics even in training, so a
  // frozen network fine-tunes without its statistics drifting.
  if (args.training() && trainable()) {
    const ops::BatchNormTraining batch = ops::batch_norm_train(input, gamma, beta, epsilon_, axis);
    add_update(moving_mean_, moving_mean * momentum_ + batch.mean * (1.0 - momentum_));
    add_update(moving_variance_, moving_variance * momentum_ + batch.variance * (1.0 - momentum_));
    return batch.output;
  }
  // x·scale + shift, with scale = gamma·rsqrt(variance + epsilon) and shift = beta − mean·scale per feature,
  // shaped to broadcast along the feature axis.
  const Tensor scale = gamma * ops::rsqrt(moving_variance + epsilon_);
  const Tensor shift = beta - moving_mean * scale;
  std::vector<std::int64_t> broadcast(static_cast<std::size_t>(input.rank() - axis), 1);
  broadcast[0] = features;
  return input * ops::reshape(scale, broadcast) + ops::reshape(shift, broadcast);
}

BatchNormalization::BatchNormalization(std::int64_t axis, const Config& options)
    : LayerHandle(std::make_shared<BatchNormalizationLayer>(options.with("axis", axis))) {}

KILN_REGISTER_LAYER("kiln>BatchNormalization", BatchNormalizationLayer);

}  // namespace kiln
