#include <kiln/layers/normalization/layer_normalization.hpp>

#include <algorithm>
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
  // Keras's build turns axis into the sorted list of the axes it normalizes: a built layer writes that.
  if (built())
    config.set("axis", Config::from_ints(axes_));
  else
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

// The axes normalized, non-negative and sorted, as Keras's build makes them; each must exist, appear once
// and have a known size.
std::vector<std::int64_t> LayerNormalizationLayer::normalized_axes(const Shape& input_shape) const {
  std::vector<std::int64_t> axes;
  for (const std::int64_t axis : axis_) {
    if (axis >= input_shape.rank() || axis < -input_shape.rank())
      shape_error(
          "axis " + std::to_string(axis) + " does not exist in inputs of rank " + std::to_string(input_shape.rank()),
          {{"input", input_shape}});
    axes.push_back(axis < 0 ? axis + input_shape.rank() : axis);
  }
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end())
    config_error("axis " + Config::from_ints(axis_).to_string() + " names an axis twice");
  for (const std::int64_t axis : axes)
    if (input_shape[static_cast<int>(axis)] == Shape::unknown)
      shape_error("needs inputs whose normalized axes are known", {{"input", input_shape}});
  return axes;
}

void LayerNormalizationLayer::build(const Shape& input_shape) {
  axes_ = normalized_axes(input_shape);
  std::vector<std::int64_t> dims;
  for (const std::int64_t axis : axes_) dims.push_back(input_shape[static_cast<int>(axis)]);
  const Shape features(dims);
  if (scale_) {  // Keras's order: gamma, then beta
    gamma_ = add_weight("gamma", features, gamma_initializer_);
    regularize(gamma_, gamma_regularization_);
  }
  if (center_) {
    beta_ = add_weight("beta", features, beta_initializer_);
    regularize(beta_, beta_regularization_);
  }
}

Tensor LayerNormalizationLayer::gamma_for(const Tensor& input, std::int64_t features) const {
  if (scale_) return ops::reshape(variable(gamma_, input), {features});
  return constant_features(input, features, 1.0, dtype(), "gamma");
}

Tensor LayerNormalizationLayer::beta_for(const Tensor& input, std::int64_t features) const {
  if (center_) return ops::reshape(variable(beta_, input), {features});
  return constant_features(input, features, 0.0, dtype(), "beta");
}

// The fused op normalizes the last axis. Other axes, or several, are moved to the end (a transpose when
// they are not the trailing ones) and flattened into one, so the same kernel serves Keras's every axis.
Tensor LayerNormalizationLayer::call(const Tensor& input, const CallArgs&) {
  const Shape& built = build_shapes().at(0);
  if (input.rank() != built.rank() || normalized_axes(input.shape()) != axes_)
    shape_error("was built for inputs of another rank", {{"built for", built}, {"input", input.shape()}});
  std::int64_t features = 1;
  for (const std::int64_t axis : axes_) {
    if (input.shape()[static_cast<int>(axis)] != built[static_cast<int>(axis)])
      shape_error("was built for other sizes of the normalized axes", {{"built for", built}, {"input", input.shape()}});
    features *= built[static_cast<int>(axis)];
  }
  const int rank = input.rank();
  const auto count = static_cast<int>(axes_.size());
  std::vector<std::int64_t> perm;
  for (int axis = 0; axis < rank; ++axis)
    if (!std::binary_search(axes_.begin(), axes_.end(), axis)) perm.push_back(axis);
  perm.insert(perm.end(), axes_.begin(), axes_.end());
  const bool trailing = axes_.front() == rank - count;
  const Tensor moved = trailing ? input : ops::transpose(input, perm);
  if (count == 1 && trailing)
    return ops::layer_norm(input, gamma_for(input, features), beta_for(input, features), epsilon_);
  const Tensor flat = ops::reshape(moved, {-1, features});
  const Tensor normalized =
      ops::reshape_like(ops::layer_norm(flat, gamma_for(input, features), beta_for(input, features), epsilon_), moved);
  if (trailing) return normalized;
  std::vector<std::int64_t> inverse(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i)
    inverse[static_cast<std::size_t>(perm[i])] = static_cast<std::int64_t>(i);
  return ops::transpose(normalized, inverse);
}

LayerNormalization::LayerNormalization(double epsilon, const Config& options)
    : LayerHandle(std::make_shared<LayerNormalizationLayer>(options.with("epsilon", epsilon))) {}

KILN_REGISTER_LAYER("kiln>LayerNormalization", LayerNormalizationLayer);

}  // namespace kiln
