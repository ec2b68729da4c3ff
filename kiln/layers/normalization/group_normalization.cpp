#include <kiln/layers/normalization/group_normalization.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/error.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

// ---- GroupNormalization ---------------------------------------------------------------------------------

GroupNormalizationLayer::GroupNormalizationLayer(const Config& config) : Layer(config, "GroupNormalization") {
  ConfigReader args = config_reader(config);
  groups_ = args.integer("groups", 32);
  axis_ = args.integer("axis", -1);
  epsilon_ = args.number("epsilon", 1e-3);
  center_ = args.boolean("center", true);
  scale_ = args.boolean("scale", true);
  beta_initializer_ = Initializer::from_argument(args, "beta_initializer", "zeros");
  gamma_initializer_ = Initializer::from_argument(args, "gamma_initializer", "ones");
  beta_regularization_ = WeightRegularization::from_arguments(args, "beta");
  gamma_regularization_ = WeightRegularization::from_arguments(args, "gamma");
  args.finish();
  if (groups_ <= 0 && groups_ != -1)
    args.fail("groups must be a positive integer (or -1 for instance normalization), got " + std::to_string(groups_));
  if (!(epsilon_ > 0)) args.fail("epsilon must be positive, got " + std::to_string(epsilon_));
}

Config GroupNormalizationLayer::get_config() const {
  Config config = base_config();
  config.set("groups", groups_);
  config.set("axis", axis_);
  config.set("epsilon", epsilon_);
  config.set("center", center_);
  config.set("scale", scale_);
  config.set("beta_initializer", beta_initializer_.get_config());
  config.set("gamma_initializer", gamma_initializer_.get_config());
  WeightRegularization::write(config, "beta", beta_regularization_, "gamma", gamma_regularization_);
  return config;
}

int GroupNormalizationLayer::channel_axis(const Shape& shape) const {
  return static_cast<int>(axis_ < 0 ? axis_ + shape.rank() : axis_);
}

void GroupNormalizationLayer::check_input(const Shape& input_shape) const {
  if (axis_ >= input_shape.rank() || axis_ < -input_shape.rank())
    shape_error(
        "axis " + std::to_string(axis_) + " does not exist in inputs of rank " + std::to_string(input_shape.rank()),
        {{"input", input_shape}});
  if (channel_axis(input_shape) == 0)
    shape_error("axis 0 is the batch axis, not a channel axis", {{"input", input_shape}});
  const std::int64_t channels = input_shape[channel_axis(input_shape)];
  if (channels == Shape::unknown)
    shape_error("needs inputs whose channel axis " + std::to_string(axis_) + " is known", {{"input", input_shape}});
  const std::int64_t groups = groups_ == -1 ? channels : groups_;
  if (channels < groups || channels % groups != 0)
    shape_error(
        "the " + std::to_string(channels) + " channels do not split into " + std::to_string(groups) + " equal groups",
        {{"input", input_shape}});
}

void GroupNormalizationLayer::build(const Shape& input_shape) {
  check_input(input_shape);
  const Shape channels{input_shape[channel_axis(input_shape)]};
  if (groups_ == -1) groups_ = channels[0];  // as Keras does: the config then holds the count
  if (scale_) {
    gamma_ = add_weight("gamma", channels, gamma_initializer_);
    regularize(gamma_, gamma_regularization_);
  }
  if (center_) {
    beta_ = add_weight("beta", channels, beta_initializer_);
    regularize(beta_, beta_regularization_);
  }
}

Tensor GroupNormalizationLayer::call(const Tensor& input, const CallArgs&) {
  const Shape& built = build_shapes().at(0);
  check_input(input.shape());
  const int axis = channel_axis(input.shape());
  const std::int64_t channels = input.shape()[axis];
  if (input.rank() != built.rank() || channels != built[channel_axis(built)])
    shape_error("was built for inputs of rank " + std::to_string(built.rank()) + " with " +
                    std::to_string(built[channel_axis(built)]) + " channels on axis " + std::to_string(axis_),
                {{"built for", built}, {"input", input.shape()}});
  // A switched-off gamma or beta is a constant, so one fused op serves every combination.
  const Tensor gamma = scale_ ? variable(gamma_, input)
                              : ops::constant(input.graph(), Array::full({channels}, 1.0, input.dtype()), "gamma");
  const Tensor beta = center_ ? variable(beta_, input)
                              : ops::constant(input.graph(), Array::full({channels}, 0.0, input.dtype()), "beta");
  return ops::group_norm(input, gamma, beta, groups_, axis, epsilon_);
}

GroupNormalization::GroupNormalization(std::int64_t groups, const Config& options)
    : LayerHandle(std::make_shared<GroupNormalizationLayer>(options.with("groups", groups))) {}

// ---- RMSNormalization -----------------------------------------------------------------------------------

RMSNormalizationLayer::RMSNormalizationLayer(const Config& config) : Layer(config, "RMSNormalization") {
  ConfigReader args = config_reader(config);
  axis_ = args.int_or_ints("axis", -1, axis_is_list_);
  epsilon_ = args.number("epsilon", 1e-6);
  args.finish();
  if (axis_.empty()) args.fail("axis must name at least one axis");
  if (!(epsilon_ > 0)) args.fail("epsilon must be positive, got " + std::to_string(epsilon_));
}

Config RMSNormalizationLayer::get_config() const {
  Config config = base_config();
  // Keras's build turns axis into a sorted list, so a built layer's config (every saved one) holds a list.
  std::vector<std::int64_t> sorted = axis_;
  std::sort(sorted.begin(), sorted.end());
  config.set("axis", axis_is_list_ || built() ? Config::from_ints(sorted) : Config(axis_[0]));
  config.set("epsilon", epsilon_);
  return config;
}

// How many trailing axes the layer normalizes; ShapeError when its axes are not the last ones of `input_shape`.
int RMSNormalizationLayer::trailing_axes(const Shape& input_shape) const {
  std::vector<std::int64_t> axes;
  for (const std::int64_t axis : axis_) {
    if (axis >= input_shape.rank() || axis < -input_shape.rank())
      shape_error(
          "axis " + std::to_string(axis) + " does not exist in inputs of rank " + std::to_string(input_shape.rank()),
          {{"input", input_shape}});
    axes.push_back(axis < 0 ? axis + input_shape.rank() : axis);
  }
  std::sort(axes.begin(), axes.end());
  const auto count = static_cast<int>(axes.size());
  for (int i = 0; i < count; ++i)
    if (axes[static_cast<std::size_t>(i)] != input_shape.rank() - count + i)
      shape_error("normalizes the trailing axes only (the scale broadcasts against them), got axis " +
                      Config::from_ints(axis_).to_string(),
                  {{"input", input_shape}});
  for (int axis = input_shape.rank() - count; axis < input_shape.rank(); ++axis)
    if (input_shape[axis] == Shape::unknown)
      shape_error("needs inputs whose normalized axes are known", {{"input", input_shape}});
  return count;
}

void RMSNormalizationLayer::build(const Shape& input_shape) {
  const int trailing = trailing_axes(input_shape);
  scale_ = add_weight("scale",
                      Shape(std::vector<std::int64_t>(input_shape.dims().end() - trailing, input_shape.dims().end())),
                      Initializer::get("ones"));
}

Tensor RMSNormalizationLayer::call(const Tensor& input, const CallArgs&) {
  const Shape& built = build_shapes().at(0);
  const int trailing = trailing_axes(input.shape());
  if (!std::equal(built.dims().end() - trailing, built.dims().end(), input.shape().dims().end() - trailing))
    shape_error("was built for other sizes of the normalized axes", {{"built for", built}, {"input", input.shape()}});
  return ops::rms_norm(input, variable(scale_, input), epsilon_, trailing);
}

RMSNormalization::RMSNormalization(double epsilon, const Config& options)
    : LayerHandle(std::make_shared<RMSNormalizationLayer>(options.with("epsilon", epsilon))) {}

KILN_REGISTER_LAYER("kiln>GroupNormalization", GroupNormalizationLayer);
KILN_REGISTER_LAYER("kiln>RMSNormalization", RMSNormalizationLayer);

}  // namespace kiln
