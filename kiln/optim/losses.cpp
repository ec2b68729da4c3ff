#include <kiln/optim/losses.hpp>

#include <algorithm>
#include <cmath>

#include <kiln/core/array.hpp>
#include <kiln/core/detail/python_float.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/op.hpp>
#include <kiln/core/warnings.hpp>
#include <kiln/ops/ops.hpp>
#include <kiln/optim/detail/targets.hpp>

namespace kiln {

// ---- targets against predictions (optim/detail/targets.hpp) ------------------------------------------------------

namespace detail {

namespace {
Shape without_last_axis(const Shape& shape) {
  std::vector<std::int64_t> dims = shape.dims();
  if (!dims.empty()) dims.pop_back();
  return Shape(std::move(dims));
}
bool last_axis_is_one(const Shape& shape) { return shape.rank() >= 1 && shape[shape.rank() - 1] == 1; }
}  // namespace

bool shapes_compatible(const Shape& a, const Shape& b) {
  if (a.rank() != b.rank()) return false;
  for (int axis = 0; axis < a.rank(); ++axis)
    if (a[axis] != b[axis] && a[axis] != Shape::unknown && b[axis] != Shape::unknown) return false;
  return true;
}

bool elementwise_fits(const Shape& y_true, const Shape& y_pred) {
  if (shapes_compatible(y_true, y_pred)) return true;
  if (y_true.rank() + 1 == y_pred.rank() && last_axis_is_one(y_pred))
    return shapes_compatible(y_true, without_last_axis(y_pred));
  if (y_true.rank() == y_pred.rank() + 1 && last_axis_is_one(y_true))
    return shapes_compatible(without_last_axis(y_true), y_pred);
  return false;
}

Tensor match_rank(const Tensor& y_true, const Tensor& y_pred) {
  if (y_true.rank() + 1 == y_pred.rank()) return ops::expand_dims(y_true, -1);
  if (y_true.rank() == y_pred.rank() + 1) return ops::squeeze(y_true, {-1});
  return y_true;
}

bool sparse_fits(const Shape& y_true, const Shape& y_pred) {
  if (y_pred.rank() < 1) return false;
  const Shape rows = without_last_axis(y_pred);
  if (shapes_compatible(y_true, rows)) return true;
  return y_true.rank() == y_pred.rank() && last_axis_is_one(y_true) &&
         shapes_compatible(without_last_axis(y_true), rows);
}

Tensor sparse_labels(const Tensor& y_true, const Tensor& y_pred) {
  if (y_true.rank() == y_pred.rank()) return ops::squeeze(y_true, {-1});
  return y_true;
}

// Among the maxima, the smallest index wins: replace every other entry by the class count, then take the
// minimum. Exact for up to 2^24 classes in float32. A row holding a NaN has a NaN maximum that no entry
// equals; it is sent to the class count explicitly, so a broken prediction never counts as correct.
Tensor argmax_last(const Tensor& x) {
  const std::int64_t classes = x.shape().dim(-1);
  if (classes == Shape::unknown)
    throw ShapeError("argmax", "the class axis (the last) must be known", {{"x", x.shape()}});
  Array indices(Shape{classes}, x.dtype());
  for (std::int64_t i = 0; i < classes; ++i) indices.set_flat(static_cast<std::size_t>(i), static_cast<double>(i));
  const Tensor index = x.graph().constant(indices, "class_index");
  const Tensor is_max = ops::equal(x, ops::max(x, {-1}, /*keepdims=*/true));
  const Tensor no_class = ops::scalar_like(x, static_cast<double>(classes));
  const Tensor first_max = ops::min(ops::where(is_max, index, no_class), {-1});
  const Tensor row_is_number = ops::min(ops::equal(x, x), {-1});  // NaN != NaN
  return ops::where(row_is_number, first_max, no_class);
}

}  // namespace detail

// ---- the built-in losses ------------------------------------------------------------------------------------------

namespace {

std::string delta_positive(const Config& arguments) {
  const double delta = arguments.get_double("delta");
  return delta > 0.0 ? "" : "delta must be > 0, got " + std::to_string(delta);
}

// Keras's crossentropy arguments kiln does not implement: accepted at their defaults only.
std::string plain_crossentropy(const Config& arguments) {
  if (arguments.get_double("label_smoothing") != 0.0) return "label_smoothing is not supported by kiln; leave it 0";
  if (arguments.get_int("axis") != -1) return "only axis -1 is supported";
  return "";
}

// ---- per step, for masked predictions: the losses composed of ops, reduced over the last axis only ------------

constexpr double keras_epsilon = 1e-7;

Tensor clipped(const Tensor& p) {
  return ops::minimum(ops::maximum(p, ops::scalar_like(p, keras_epsilon)), ops::scalar_like(p, 1.0 - keras_epsilon));
}

Tensor step_squared_error(const Tensor& y_true, const Tensor& y_pred, const Config&) {
  return ops::mean(ops::square(y_pred - detail::match_rank(y_true, y_pred)), {-1});
}

Tensor step_absolute_error(const Tensor& y_true, const Tensor& y_pred, const Config&) {
  return ops::mean(ops::abs(y_pred - detail::match_rank(y_true, y_pred)), {-1});
}

Tensor step_huber(const Tensor& y_true, const Tensor& y_pred, const Config& args) {
  const double delta = args.get_double("delta");
  const Tensor error = y_pred - detail::match_rank(y_true, y_pred);
  const Tensor size = ops::abs(error);
  const Tensor quadratic = ops::scale(ops::square(error), 0.5);
  const Tensor linear = ops::add_scalar(ops::scale(size, delta), -0.5 * delta * delta);
  return ops::mean(ops::where(ops::less_equal(size, ops::scalar_like(size, delta)), quadratic, linear), {-1});
}

Tensor step_binary_crossentropy(const Tensor& y_true, const Tensor& y_pred, const Config& args) {
  const Tensor t = detail::match_rank(y_true, y_pred);
  if (args.get_bool("from_logits")) return ops::mean(ops::softplus(y_pred) - y_pred * t, {-1});
  const Tensor p = clipped(y_pred);
  const Tensor one = ops::scalar_like(p, 1.0);
  return ops::neg(ops::mean(t * ops::log(p) + (one - t) * ops::log(one - p), {-1}));
}

// −Σ t·log p over the classes; probabilities are normalized to sum to 1 and clipped first, as Keras does.
Tensor step_crossentropy(const Tensor& one_hot, const Tensor& y_pred, bool from_logits) {
  if (from_logits) return ops::neg(ops::sum(one_hot * ops::log_softmax(y_pred, -1), {-1}));
  const Tensor p = clipped(y_pred / ops::sum(y_pred, {-1}, /*keepdims=*/true));
  return ops::neg(ops::sum(one_hot * ops::log(p), {-1}));
}

Tensor step_categorical_crossentropy(const Tensor& y_true, const Tensor& y_pred, const Config& args) {
  return step_crossentropy(y_true, y_pred, args.get_bool("from_logits"));
}

// The class indices as one-hot rows: each index compared with 0, 1, ..., classes − 1.
Tensor step_sparse_categorical_crossentropy(const Tensor& y_true, const Tensor& y_pred, const Config& args) {
  const std::int64_t classes = y_pred.shape().dim(-1);
  Array indices(Shape{classes}, y_pred.dtype());
  for (std::int64_t i = 0; i < classes; ++i) indices.set_flat(static_cast<std::size_t>(i), static_cast<double>(i));
  const Tensor index = y_pred.graph().constant(indices, "class_index");
  const Tensor t = y_true.rank() == y_pred.rank() ? y_true : ops::expand_dims(y_true, -1);
  return step_crossentropy(ops::equal(t, index), y_pred, args.get_bool("from_logits"));
}

LossClass with_per_step(LossClass loss, LossClass::Compute per_step) {
  loss.per_step = std::move(per_step);
  return loss;
}

bool register_builtin_losses(Registry<LossClass>& registry) {
  auto elementwise = [](auto loss) {
    return [loss](const Tensor& y_true, const Tensor& y_pred, const Config&) {
      return loss(detail::match_rank(y_true, y_pred), y_pred);
    };
  };
  const Config crossentropy = {{"from_logits", false}, {"label_smoothing", 0.0}, {"axis", -1}};
  registry.add(
      "kiln>MeanSquaredError",
      with_per_step({"mean_squared_error",
                     Config::map(),
                     TargetForm::elementwise,
                     elementwise([](const Tensor& t, const Tensor& p) { return ops::mean_squared_error(t, p); }),
                     {}},
                    step_squared_error),
      {"mse", "MSE"});
  registry.add(
      "kiln>MeanAbsoluteError",
      with_per_step({"mean_absolute_error",
                     Config::map(),
                     TargetForm::elementwise,
                     elementwise([](const Tensor& t, const Tensor& p) { return ops::mean_absolute_error(t, p); }),
                     {}},
                    step_absolute_error),
      {"mae", "MAE"});
  registry.add("kiln>Huber",
               with_per_step({"huber_loss",
                              {{"delta", 1.0}},
                              TargetForm::elementwise,
                              [](const Tensor& y_true, const Tensor& y_pred, const Config& args) {
                                return ops::huber(detail::match_rank(y_true, y_pred), y_pred, args.get_double("delta"));
                              },
                              delta_positive},
                             step_huber),
               {"huber_loss"});
  registry.add("kiln>BinaryCrossentropy",
               with_per_step({"binary_crossentropy", crossentropy, TargetForm::elementwise,
                              [](const Tensor& y_true, const Tensor& y_pred, const Config& args) {
                                return ops::binary_crossentropy(detail::match_rank(y_true, y_pred), y_pred,
                                                                args.get_bool("from_logits"));
                              },
                              plain_crossentropy},
                             step_binary_crossentropy));
  registry.add("kiln>CategoricalCrossentropy",
               with_per_step({"categorical_crossentropy", crossentropy, TargetForm::one_hot,
                              [](const Tensor& y_true, const Tensor& y_pred, const Config& args) {
                                return ops::categorical_crossentropy(y_true, y_pred, args.get_bool("from_logits"));
                              },
                              plain_crossentropy},
                             step_categorical_crossentropy));
  registry.add("kiln>SparseCategoricalCrossentropy",
               with_per_step({"sparse_categorical_crossentropy",
                              {{"from_logits", false}, {"ignore_class", Config()}, {"axis", std::int64_t{-1}}},
                              TargetForm::class_indices,
                              [](const Tensor& y_true, const Tensor& y_pred, const Config& args) {
                                return ops::sparse_categorical_crossentropy(y_true, y_pred,
                                                                            args.get_bool("from_logits"));
                              },
                              [](const Config& args) -> std::string {
                                if (args.at("axis").as_int() != -1)
                                  return "axis must be -1 (the classes on the last axis), got " +
                                         args.at("axis").to_string();
                                return args.at("ignore_class").is_null() ? "" : "ignore_class is not supported by kiln";
                              }},
                             step_sparse_categorical_crossentropy));
  return true;
}

// A given argument against its default: the same kind of value (any number for a number), or null where
// the default is null.
Config typed_argument(const Config& given, const Config& fallback, ConfigReader& args, const std::string& key) {
  if (given.is_null()) return fallback;
  const std::string what = args.who() + " argument '" + key + "'";
  switch (fallback.type()) {
    case Config::Type::integer:
      return Config(given.as_int(what));
    case Config::Type::number:
      return Config(given.as_double(what));
    case Config::Type::boolean:
      return Config(given.as_bool(what));
    case Config::Type::string:
      return Config(given.as_string(what));
    default:
      return given;
  }
}

}  // namespace

// The built-ins register with the registry's first use, not during static initialization: a static
// Loss elsewhere ("mse") may come first.
Registry<LossClass>& loss_registry() {
  static Registry<LossClass> registry("loss", [](const std::string& key, const LossClass& loss) -> std::string {
    return loss.compute ? "" : "loss " + key + " has no function";
  });
  [[maybe_unused]] static const bool builtins = register_builtin_losses(registry);
  return registry;
}

// ---- Loss ---------------------------------------------------------------------------------------------------------

Loss::Loss(const std::string& key, const LossClass& loss_class)
    : loss_class_(&loss_class),
      key_(key),
      class_name_(class_part(key)),
      name_(loss_class.default_name),
      arguments_(loss_class.arguments.is_null() ? Config::map() : loss_class.arguments) {}

Loss::Loss(const char* name) : Loss(std::string(name)) {}
Loss::Loss(const std::string& name) : Loss(loss_registry().key_of(name), loss_registry().get(name)) {}

Loss::Loss(std::string name, Function function)
    : class_name_(name), name_(std::move(name)), function_(std::move(function)) {
  if (!function_) throw ConfigError("loss '" + name_ + "': the function is empty");
}

std::vector<std::string> Loss::names() { return loss_registry().keys(); }

Loss Loss::from_config(const Config& identifier) {
  if (identifier.type() == Config::Type::string) return Loss(identifier.as_string());
  if (!identifier.is_map())
    throw ConfigError("a loss is a name or {\"class_name\": ..., \"config\": {...}}, got " + identifier.to_string());
  std::string name = identifier.get_string("class_name");
  if (const Config* registered = identifier.find("registered_name"); registered != nullptr && !registered->is_null())
    name = registered->as_string("key 'registered_name'");
  Loss loss(name);
  const Config* config = identifier.find("config");
  loss.read_config(config != nullptr ? *config : Config());
  return loss;
}

void Loss::read_config(const Config& config) {
  ConfigReader args(config, class_name_);
  name_ = args.text("name", name_);
  const std::string reduction = args.text("reduction", "sum_over_batch_size");
  if (reduction != "sum_over_batch_size")
    args.fail("reduction '" + reduction + "' is not supported by kiln; losses are batch means (sum_over_batch_size)");
  args.value("dtype");  // kiln computes a loss in the predictions' dtype
  for (const Config::Entry& entry : loss_class_->arguments.items())
    arguments_.set(entry.first, typed_argument(args.value(entry.first), entry.second, args, entry.first));
  args.finish();
  if (loss_class_->validate)
    if (const std::string problem = loss_class_->validate(arguments_); !problem.empty()) args.fail(problem);
}

bool Loss::from_logits() const { return arguments_.get_bool("from_logits", false); }
double Loss::delta() const { return arguments_.get_double("delta", 1.0); }

Config Loss::get_config() const {
  if (custom()) return Config{{"name", name_}};
  Config config = {{"name", name_}, {"reduction", "sum_over_batch_size"}};
  for (const Config::Entry& entry : arguments_.items()) config.set(entry.first, entry.second);
  return config;
}

Config Loss::serialize() const {
  const bool kilns = key_.rfind("kiln>", 0) == 0;
  return Config{{"module", kilns ? Config("keras.losses") : Config()},
                {"class_name", class_name_},
                {"config", get_config()},
                {"registered_name", kilns || custom() ? Config() : Config(key_)}};
}

std::string Loss::describe() const { return class_name_ + " '" + name_ + "'"; }

void Loss::check(const Shape& y_true, const Shape& y_pred) const {
  if (custom()) return;
  detail::check_targets(describe(), loss_class_->targets, y_true, y_pred);
}

void Loss::check_values(const Array& y_true, const Shape& y_pred, const std::string& where) const {
  if (custom() || loss_class_->targets != TargetForm::class_indices) return;
  const std::int64_t classes = y_pred.dim(-1);
  for (std::size_t j = 0; j < y_true.size(); ++j) {
    const double label = y_true.flat(j);
    if (label >= 0 && label < static_cast<double>(classes) && std::floor(label) == label) continue;
    const std::string what = std::isfinite(label) && std::floor(label) != label
                                 ? "is not an integer; sparse labels are class ids, integers in [0, "
                                 : "is not a class in [0, ";
    throw ValueError(where + ": sparse label " + detail::python_float(label) + " at index " + std::to_string(j) + " " +
                     what + std::to_string(classes) + ") (" + describe() + ")");
  }
}

Tensor Loss::operator()(const Tensor& y_true, const Tensor& y_pred) const {
  check(y_true.shape(), y_pred.shape());
  if (const Tensor mask = y_pred.graph().mask_of(y_pred); mask.valid()) {
    if (!custom() && loss_class_->per_step) {
      // Keras's masked mean: each kept step weighs 1 / (kept steps), padding 0.
      const Tensor steps = loss_class_->per_step(y_true, y_pred, arguments_);
      if (steps.shape().rank() != mask.rank())
        throw ShapeError(describe(), "the predictions' mask does not match the loss of each step",
                         {{"mask", mask.shape()}, {"loss per step", steps.shape()}});
      return ops::sum(steps * mask) / ops::add_scalar(ops::sum(mask), keras_epsilon);
    }
    warn(describe() +
         " cannot leave out the masked steps of its predictions (it has no per-step form): it "
         "averages over every step");
  }
  const Tensor value = custom() ? function_(y_true, y_pred) : loss_class_->compute(y_true, y_pred, arguments_);
  if (!value.valid() || value.rank() != 0)
    throw ShapeError(describe() + ": a loss function must return a scalar" +
                     (value.valid() ? ", got shape " + value.shape().to_string() : std::string(", got nothing")));
  return value;
}

Tensor Loss::operator()(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) const {
  if (!sample_weight.valid()) return (*this)(y_true, y_pred);
  check(y_true.shape(), y_pred.shape());
  if (!weighable())
    throw ValueError(describe() +
                     " cannot weigh samples: it has no per-sample form (register a LossClass with "
                     "per_step)");
  const Tensor steps = loss_class_->per_step(y_true, y_pred, arguments_);
  Tensor weights = sample_weight;
  if (weights.rank() > steps.rank() ||
      (weights.rank() == steps.rank() && !detail::shapes_compatible(weights.shape(), steps.shape())))
    throw ShapeError(describe(), "sample weights must have the shape of the loss of each sample (or fewer axes)",
                     {{"sample_weight", weights.shape()}, {"loss per sample", steps.shape()}});
  while (weights.rank() < steps.rank()) weights = ops::expand_dims(weights, -1);
  const Tensor weighted = steps * weights;
  if (const Tensor mask = y_pred.graph().mask_of(y_pred); mask.valid()) {
    if (mask.rank() != steps.rank())
      throw ShapeError(describe(), "the predictions' mask does not match the loss of each step",
                       {{"mask", mask.shape()}, {"loss per step", steps.shape()}});
    return ops::sum(weighted * mask) / ops::add_scalar(ops::sum(mask), keras_epsilon);
  }
  // Keras's sum_over_batch_size: the weights scale the losses, and the sum is over the losses' number.
  return ops::mean(weighted);
}

bool Loss::classification() const {
  if (custom()) return false;
  if (loss_class_->targets == TargetForm::one_hot || loss_class_->targets == TargetForm::class_indices) return true;
  for (const char* binary : {"BinaryCrossentropy", "BinaryFocalCrossentropy", "Hinge", "SquaredHinge"})
    if (class_name_ == binary) return true;
  return false;
}

namespace detail {

void check_targets(const std::string& who, TargetForm form, const Shape& y_true, const Shape& y_pred) {
  if (form == TargetForm::any) return;
  const std::vector<std::pair<std::string, Shape>> shapes = {{"y_true", y_true}, {"y_pred", y_pred}};
  if (y_pred.rank() < 1) throw ShapeError(who, "predictions need at least one axis", shapes);
  switch (form) {
    case TargetForm::one_hot:
      if (!shapes_compatible(y_true, y_pred))
        throw ShapeError(who, "y_true must be one-hot (or probabilities) of y_pred's shape", shapes);
      return;
    case TargetForm::class_indices:
      if (!sparse_fits(y_true, y_pred))
        throw ShapeError(
            who, "y_true must hold class indices: y_pred's shape without its last axis (or with a last axis of 1)",
            shapes);
      return;
    case TargetForm::elementwise:
      if (!elementwise_fits(y_true, y_pred))
        throw ShapeError(who, "y_true must have y_pred's shape (or differ from it by a last axis of 1)", shapes);
      return;
    case TargetForm::any:
      return;
  }
}

}  // namespace detail

}  // namespace kiln
