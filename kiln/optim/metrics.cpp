#include <kiln/optim/metrics.hpp>

#include <algorithm>

#include <kiln/core/error.hpp>
#include <kiln/core/op.hpp>
#include <kiln/ops/ops.hpp>
#include <kiln/optim/detail/targets.hpp>

namespace kiln {

struct Metric::Definition {
  Kind kind;
  std::string class_name;            // "" for the shape-resolved "accuracy"
  std::vector<std::string> aliases;  // the first is Keras's default name
};

const std::vector<Metric::Definition>& Metric::definitions() {
  static const std::vector<Definition> table = {
      {Kind::accuracy, "", {"accuracy", "acc"}},
      {Kind::binary_accuracy, "BinaryAccuracy", {"binary_accuracy"}},
      {Kind::categorical_accuracy, "CategoricalAccuracy", {"categorical_accuracy"}},
      {Kind::sparse_categorical_accuracy, "SparseCategoricalAccuracy", {"sparse_categorical_accuracy"}},
      {Kind::mean_absolute_error, "MeanAbsoluteError", {"mean_absolute_error", "mae", "MAE"}},
      {Kind::mean_squared_error, "MeanSquaredError", {"mean_squared_error", "mse", "MSE"}},
  };
  return table;
}

std::vector<std::string> Metric::names() {
  std::vector<std::string> result;
  for (const Definition& definition : definitions()) {
    if (!definition.class_name.empty()) result.push_back(definition.class_name);
    result.insert(result.end(), definition.aliases.begin(), definition.aliases.end());
  }
  return result;
}

const Metric::Definition& Metric::find(const std::string& name) {
  for (const Definition& definition : definitions())
    if ((!name.empty() && definition.class_name == name) ||
        std::find(definition.aliases.begin(), definition.aliases.end(), name) != definition.aliases.end())
      return definition;
  std::string message = "unknown metric '" + name + "'";
  message += did_you_mean(nearest_names(name, names()));
  throw ConfigError(message);
}

const Metric::Definition& Metric::definition_of(Kind kind) {
  for (const Definition& definition : definitions())
    if (definition.kind == kind) return definition;
  throw Error("Metric: no definition for a kind");  // unreachable: the table lists every kind
}

Metric::Metric(const Definition& definition, std::string name)
    : kind_(definition.kind), class_name_(definition.class_name), name_(std::move(name)) {}

Metric::Metric(const char* name) : Metric(std::string(name)) {}
Metric::Metric(const std::string& name) : Metric(find(name), name) {}

Metric Metric::from_config(const Config& identifier) {
  if (identifier.type() == Config::Type::string) return Metric(identifier.as_string());
  if (!identifier.is_map())
    throw ConfigError("a metric is a name or {\"class_name\": ..., \"config\": {...}}, got " + identifier.to_string());
  const Definition& definition = find(identifier.get_string("class_name"));
  const Config* found = identifier.find("config");
  const Config config = found != nullptr ? *found : Config();
  ConfigReader args(config, definition.class_name.empty() ? "accuracy" : definition.class_name);
  Metric metric(definition, args.text("name", definition.aliases.front()));
  args.value("dtype");  // kiln computes a metric in the predictions' dtype
  if (metric.kind_ == Kind::binary_accuracy) metric.threshold_ = args.number("threshold", 0.5);
  args.finish();
  return metric;
}

std::string Metric::describe() const {
  return (class_name_.empty() ? std::string("accuracy") : class_name_) + " metric '" + name_ + "'";
}

Config Metric::get_config() const {
  if (!resolved()) throw ValueError(describe() + ": resolve() it from the target and prediction shapes first");
  Config config = {{"name", name_}, {"dtype", Config()}};
  if (kind_ == Kind::binary_accuracy) config.set("threshold", threshold_);
  return config;
}

// Keras's compile_utils.get_metric: the same test, on the same shapes.
Metric Metric::resolve(const Shape& y_true, const Shape& y_pred) const {
  if (resolved()) return *this;
  if (y_pred.rank() < 1 || y_true.rank() < 1)
    throw ShapeError(describe(), "targets and predictions need at least one axis",
                     {{"y_true", y_true}, {"y_pred", y_pred}});
  const std::int64_t true_last = y_true.dim(-1), pred_last = y_pred.dim(-1);
  const bool binary = pred_last == 1;
  const bool sparse = y_true.rank() < y_pred.rank() || (true_last == 1 && pred_last > 1);
  const Kind kind = binary   ? Kind::binary_accuracy
                    : sparse ? Kind::sparse_categorical_accuracy
                             : Kind::categorical_accuracy;
  Metric metric(definition_of(kind), name_);
  metric.threshold_ = threshold_;
  return metric;
}

void Metric::check(const Shape& y_true, const Shape& y_pred) const {
  if (!resolved()) return resolve(y_true, y_pred).check(y_true, y_pred);
  const detail::TargetForm form = kind_ == Kind::categorical_accuracy          ? detail::TargetForm::one_hot
                                  : kind_ == Kind::sparse_categorical_accuracy ? detail::TargetForm::class_indices
                                                                               : detail::TargetForm::elementwise;
  detail::check_targets(describe(), form, y_true, y_pred);
}

Tensor Metric::operator()(const Tensor& y_true, const Tensor& y_pred) const {
  if (!resolved()) return resolve(y_true.shape(), y_pred.shape())(y_true, y_pred);
  check(y_true.shape(), y_pred.shape());
  switch (kind_) {
    case Kind::binary_accuracy: {
      // Strictly greater, as Keras: a prediction exactly at the threshold is class 0.
      const Tensor predicted = ops::greater(y_pred, ops::scalar_like(y_pred, threshold_));
      return ops::mean(ops::equal(detail::match_rank(y_true, y_pred), predicted));
    }
    case Kind::categorical_accuracy:
      return ops::mean(ops::equal(detail::argmax_last(y_true), detail::argmax_last(y_pred)));
    case Kind::sparse_categorical_accuracy:
      return ops::mean(ops::equal(detail::sparse_labels(y_true, y_pred), detail::argmax_last(y_pred)));
    case Kind::mean_absolute_error:
      return ops::mean_absolute_error(detail::match_rank(y_true, y_pred), y_pred);
    case Kind::mean_squared_error:
      return ops::mean_squared_error(detail::match_rank(y_true, y_pred), y_pred);
    case Kind::accuracy:
      break;
  }
  throw Error(describe() + ": unresolved");  // unreachable: resolved above
}

}  // namespace kiln
