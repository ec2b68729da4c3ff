#include <kiln/optim/losses.hpp>

#include <algorithm>

#include <kiln/core/array.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/op.hpp>
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
// minimum. Exact for up to 2^24 classes in float32. ops::max skips NaN, so a row holding a NaN is sent to
// the class count explicitly: a broken prediction never counts as correct.
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

// ---- Loss ---------------------------------------------------------------------------------------------------------

struct Loss::Definition {
  Kind kind;
  std::string class_name;
  std::string default_name;          // Keras's default `name` for the class
  std::vector<std::string> aliases;  // the strings keras.losses.get accepts
};

const std::vector<Loss::Definition>& Loss::definitions() {
  static const std::vector<Definition> table = {
      {Kind::mean_squared_error, "MeanSquaredError", "mean_squared_error", {"mean_squared_error", "mse", "MSE"}},
      {Kind::mean_absolute_error, "MeanAbsoluteError", "mean_absolute_error", {"mean_absolute_error", "mae", "MAE"}},
      {Kind::huber, "Huber", "huber_loss", {"huber", "huber_loss"}},
      {Kind::binary_crossentropy, "BinaryCrossentropy", "binary_crossentropy", {"binary_crossentropy"}},
      {Kind::categorical_crossentropy,
       "CategoricalCrossentropy",
       "categorical_crossentropy",
       {"categorical_crossentropy"}},
      {Kind::sparse_categorical_crossentropy,
       "SparseCategoricalCrossentropy",
       "sparse_categorical_crossentropy",
       {"sparse_categorical_crossentropy"}},
  };
  return table;
}

std::vector<std::string> Loss::names() {
  std::vector<std::string> result;
  for (const Definition& definition : definitions()) {
    result.push_back(definition.class_name);
    result.insert(result.end(), definition.aliases.begin(), definition.aliases.end());
  }
  return result;
}

const Loss::Definition& Loss::find(const std::string& name) {
  for (const Definition& definition : definitions())
    if (definition.class_name == name ||
        std::find(definition.aliases.begin(), definition.aliases.end(), name) != definition.aliases.end())
      return definition;
  std::string message = "unknown loss '" + name + "'";
  message += did_you_mean(nearest_names(name, names()));
  throw ConfigError(message);
}

Loss::Loss(const Definition& definition)
    : kind_(definition.kind), class_name_(definition.class_name), name_(definition.default_name) {}

Loss::Loss(const char* name) : Loss(find(name)) {}
Loss::Loss(const std::string& name) : Loss(find(name)) {}

Loss::Loss(std::string name, Function function)
    : kind_(Kind::custom), class_name_(name), name_(std::move(name)), function_(std::move(function)) {
  if (!function_) throw ConfigError("loss '" + name_ + "': the function is empty");
}

Loss Loss::from_config(const Config& identifier) {
  if (identifier.type() == Config::Type::string) return Loss(identifier.as_string());
  if (!identifier.is_map())
    throw ConfigError("a loss is a name or {\"class_name\": ..., \"config\": {...}}, got " + identifier.to_string());
  Loss loss(find(identifier.get_string("class_name")));
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
  if (kind_ == Kind::huber) {
    delta_ = args.number("delta", 1.0);
    if (!(delta_ > 0.0)) args.fail("delta must be > 0, got " + std::to_string(delta_));
  }
  if (kind_ == Kind::binary_crossentropy || kind_ == Kind::categorical_crossentropy) {
    if (args.number("label_smoothing", 0.0) != 0.0) args.fail("label_smoothing is not supported by kiln; leave it 0");
    if (args.integer("axis", -1) != -1) args.fail("only axis -1 is supported");
  }
  if (kind_ != Kind::mean_squared_error && kind_ != Kind::mean_absolute_error && kind_ != Kind::huber)
    from_logits_ = args.boolean("from_logits", false);
  if (kind_ == Kind::sparse_categorical_crossentropy) args.unsupported("ignore_class");
  args.finish();
}

Config Loss::get_config() const {
  if (kind_ == Kind::custom) return Config{{"name", name_}};
  Config config = {{"name", name_}, {"reduction", "sum_over_batch_size"}};
  switch (kind_) {
    case Kind::huber:
      config.set("delta", delta_);
      break;
    case Kind::binary_crossentropy:
    case Kind::categorical_crossentropy:
      config.set("from_logits", from_logits_).set("label_smoothing", 0.0).set("axis", -1);
      break;
    case Kind::sparse_categorical_crossentropy:
      config.set("from_logits", from_logits_).set("ignore_class", Config());
      break;
    default:
      break;
  }
  return config;
}

Config Loss::serialize() const {
  return Config{{"module", kind_ == Kind::custom ? Config() : Config("keras.losses")},
                {"class_name", class_name_},
                {"config", get_config()},
                {"registered_name", Config()}};
}

std::string Loss::describe() const { return class_name_ + " '" + name_ + "'"; }

void Loss::check(const Shape& y_true, const Shape& y_pred) const {
  if (kind_ == Kind::custom) return;
  const detail::TargetForm form = kind_ == Kind::categorical_crossentropy          ? detail::TargetForm::one_hot
                                  : kind_ == Kind::sparse_categorical_crossentropy ? detail::TargetForm::class_indices
                                                                                   : detail::TargetForm::elementwise;
  detail::check_targets(describe(), form, y_true, y_pred);
}

Tensor Loss::operator()(const Tensor& y_true, const Tensor& y_pred) const {
  check(y_true.shape(), y_pred.shape());
  switch (kind_) {
    case Kind::mean_squared_error:
      return ops::mean_squared_error(detail::match_rank(y_true, y_pred), y_pred);
    case Kind::mean_absolute_error:
      return ops::mean_absolute_error(detail::match_rank(y_true, y_pred), y_pred);
    case Kind::huber:
      return ops::huber(detail::match_rank(y_true, y_pred), y_pred, delta_);
    case Kind::binary_crossentropy:
      return ops::binary_crossentropy(detail::match_rank(y_true, y_pred), y_pred, from_logits_);
    case Kind::categorical_crossentropy:
      return ops::categorical_crossentropy(y_true, y_pred, from_logits_);
    case Kind::sparse_categorical_crossentropy:
      return ops::sparse_categorical_crossentropy(y_true, y_pred, from_logits_);
    case Kind::custom:
      break;
  }
  const Tensor value = function_(y_true, y_pred);
  if (!value.valid() || value.rank() != 0)
    throw ShapeError(describe() + ": a loss function must return a scalar" +
                     (value.valid() ? ", got shape " + value.shape().to_string() : std::string(", got nothing")));
  return value;
}

namespace detail {

void check_targets(const std::string& who, TargetForm form, const Shape& y_true, const Shape& y_pred) {
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
  }
}

}  // namespace detail

}  // namespace kiln
