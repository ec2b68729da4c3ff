#include <kiln/layers/activations/activation.hpp>

#include <algorithm>

#include <kiln/core/array.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

ActivationLayer::ActivationLayer(const Config& config) : Layer(config, "Activation") {
  ConfigReader args = config_reader(config);
  // Required, as in Keras; null (Keras's None) is the identity.
  if (config.find("activation") == nullptr) args.fail("the argument 'activation' is required");
  activation_ = args.text("activation", "linear");
  args.finish();
  if (activation_.empty()) activation_ = "linear";
  ops::check_activation(activation_, describe());
}

Config ActivationLayer::get_config() const {
  Config config = base_config();
  config.set("activation", activation_);
  return config;
}

Tensor ActivationLayer::call(const Tensor& input, const CallArgs&) { return ops::activation(input, activation_); }

Activation::Activation(const std::string& activation, const Config& options)
    : LayerHandle(
          std::make_shared<ActivationLayer>(options.with("activation", activation.empty() ? "linear" : activation))) {}

namespace {

Tensor scalar_like(const Tensor& x, double value) {
  return ops::constant(x.graph(), Array::full(Shape{}, value, x.dtype()), "scalar");
}

double non_negative(ConfigReader& args, const char* key, double fallback) {
  const double value = args.number(key, fallback);
  if (!(value >= 0.0)) args.fail(std::string(key) + " must be >= 0, got " + std::to_string(value));
  return value;
}

}  // namespace

// ---- ReLU ----------------------------------------------------------------------------------------------------

ReLULayer::ReLULayer(const Config& config) : Layer(config, "ReLU") {
  ConfigReader args = config_reader(config);
  max_value_ = args.value("max_value");
  if (!max_value_.is_null() && !(max_value_.as_double("ReLU argument 'max_value'") >= 0.0))
    args.fail("max_value must be >= 0 or null, got " + max_value_.to_string());
  negative_slope_ = non_negative(args, "negative_slope", 0.0);
  threshold_ = non_negative(args, "threshold", 0.0);
  args.finish();
}

Config ReLULayer::get_config() const {
  Config config = base_config();
  config.set("max_value", max_value_);
  config.set("negative_slope", negative_slope_);
  config.set("threshold", threshold_);
  return config;
}

// Keras's activations.relu, in its order: the part below the threshold, the rectified (and capped) part,
// then the leak subtracted.
Tensor ReLULayer::call(const Tensor& x, const CallArgs&) {
  if (negative_slope_ != 0.0 && max_value_.is_null() && threshold_ == 0.0) return ops::leaky_relu(x, negative_slope_);
  Tensor y = threshold_ != 0.0 ? x * ops::greater(x, scalar_like(x, threshold_)) : ops::relu(x);
  if (!max_value_.is_null()) y = ops::minimum(y, scalar_like(x, max_value_.as_double()));
  if (negative_slope_ != 0.0) {
    const Tensor below = ops::relu(threshold_ != 0.0 ? ops::add_scalar(ops::neg(x), threshold_) : ops::neg(x));
    y = y - ops::scale(below, negative_slope_);
  }
  return y;
}

// ---- LeakyReLU, ELU ----------------------------------------------------------------------------------------

LeakyReLULayer::LeakyReLULayer(const Config& config) : Layer(config, "LeakyReLU") {
  ConfigReader args = config_reader(config);
  const bool keras2 = args.has("alpha");  // Keras 2's name, which Keras 3 still reads
  negative_slope_ = non_negative(args, keras2 ? "alpha" : "negative_slope", 0.3);
  args.value(keras2 ? "negative_slope" : "alpha");
  args.finish();
}

Config LeakyReLULayer::get_config() const { return base_config().with("negative_slope", negative_slope_); }

Tensor LeakyReLULayer::call(const Tensor& x, const CallArgs&) { return ops::leaky_relu(x, negative_slope_); }

ELULayer::ELULayer(const Config& config) : Layer(config, "ELU") {
  ConfigReader args = config_reader(config);
  alpha_ = args.number("alpha", 1.0);
  args.finish();
}

Config ELULayer::get_config() const { return base_config().with("alpha", alpha_); }

Tensor ELULayer::call(const Tensor& x, const CallArgs&) { return ops::elu(x, alpha_); }

// ---- Softmax -----------------------------------------------------------------------------------------------

SoftmaxLayer::SoftmaxLayer(const Config& config) : Layer(config, "Softmax") {
  ConfigReader args = config_reader(config);
  axis_ = args.int_or_ints("axis", -1, axis_is_list_);
  args.finish();
  if (axis_.empty()) args.fail("axis must name at least one axis");
}

Config SoftmaxLayer::get_config() const {
  return base_config().with("axis", axis_is_list_ ? Config::from_ints(axis_) : Config(axis_.front()));
}

// Over several axes, as Keras computes it: exp(x − logsumexp(x)), the max subtracted first for range.
Tensor SoftmaxLayer::call(const Tensor& x, const CallArgs&) {
  ops::Axes axes;
  for (const std::int64_t axis : axis_) {
    if (axis >= x.rank() || axis < -x.rank())
      shape_error("axis " + std::to_string(axis) + " does not exist in inputs of rank " + std::to_string(x.rank()),
                  {{"input", x.shape()}});
    axes.push_back(axis < 0 ? axis + x.rank() : axis);
  }
  if (axes.size() == 1) return ops::softmax(x, static_cast<int>(axes.front()));
  const Tensor shifted = x - ops::max(x, axes, true);
  const Tensor e = ops::exp(shifted);
  return e / ops::sum(e, axes, true);
}

// ---- PReLU -------------------------------------------------------------------------------------------------

PReLULayer::PReLULayer(const Config& config) : Layer(config, "PReLU") {
  ConfigReader args = config_reader(config);
  alpha_initializer_ = Initializer::from_argument(args, "alpha_initializer", "zeros");
  alpha_regularization_ = WeightRegularization::from_arguments(args, "alpha");
  shared_axes_given_ = args.has("shared_axes");
  if (shared_axes_given_) shared_axes_ = args.int_or_ints("shared_axes", 0, shared_axes_is_list_);
  args.value("shared_axes");
  args.finish();
}

Config PReLULayer::get_config() const {
  Config config = base_config();
  config.set("alpha_initializer", alpha_initializer_.get_config());
  config.set("alpha_regularizer", alpha_regularization_.regularizer.get_config());
  config.set("alpha_constraint", alpha_regularization_.constraint.get_config());
  // Keras keeps shared_axes as a list once set.
  config.set("shared_axes", shared_axes_given_ ? Config::from_ints(shared_axes_) : Config());
  return config;
}

void PReLULayer::build(const Shape& input_shape) {
  if (input_shape.rank() < 2)
    shape_error("needs inputs with a batch axis and at least one more", {{"input", input_shape}});
  std::vector<std::int64_t> dims(input_shape.dims().begin() + 1, input_shape.dims().end());
  for (const std::int64_t axis : shared_axes_) {
    if (axis < 1 || axis >= input_shape.rank())
      shape_error("shared axis " + std::to_string(axis) + " does not exist (axes 1 to " +
                      std::to_string(input_shape.rank() - 1) + ")",
                  {{"input", input_shape}});
    dims[static_cast<std::size_t>(axis - 1)] = 1;
  }
  for (const std::int64_t dim : dims)
    if (dim == Shape::unknown) shape_error("needs the sizes of the axes alpha spans", {{"input", input_shape}});
  alpha_ = add_weight("alpha", Shape(dims), alpha_initializer_);
  regularize(alpha_, alpha_regularization_);
}

Tensor PReLULayer::call(const Tensor& x, const CallArgs&) {
  const Shape& built = build_shapes().at(0);
  bool fits = x.rank() == built.rank();
  for (int axis = 1; fits && axis < built.rank(); ++axis)
    fits = x.shape()[axis] == built[axis] ||
           std::find(shared_axes_.begin(), shared_axes_.end(), axis) != shared_axes_.end();
  if (!fits) shape_error("was built for another input shape", {{"built for", built}, {"input", x.shape()}});
  return ops::relu(x) - variable(alpha_, x) * ops::relu(ops::neg(x));
}

KILN_REGISTER_LAYER("kiln>Activation", ActivationLayer);
KILN_REGISTER_LAYER("kiln>ReLU", ReLULayer);
KILN_REGISTER_LAYER("kiln>LeakyReLU", LeakyReLULayer);
KILN_REGISTER_LAYER("kiln>ELU", ELULayer);
KILN_REGISTER_LAYER("kiln>Softmax", SoftmaxLayer);
KILN_REGISTER_LAYER("kiln>PReLU", PReLULayer);

}  // namespace kiln
