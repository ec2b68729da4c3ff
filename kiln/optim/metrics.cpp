#include <kiln/optim/metrics.hpp>

#include <algorithm>

#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/warnings.hpp>
#include <kiln/core/names.hpp>
#include <kiln/ops/ops.hpp>
#include <kiln/optim/detail/targets.hpp>

namespace kiln {

namespace {

// Not classes: Keras's compile resolves these strings from the shapes (compile_utils.get_metric).
bool is_accuracy(const std::string& name) { return name == "accuracy" || name == "acc"; }

// 1 where the prediction's class (strictly above the threshold, as Keras: a prediction exactly at the
// threshold is class 0) is the target's.
Tensor binary_hits(const Tensor& y_true, const Tensor& y_pred, const Config& args) {
  const Tensor predicted = ops::greater(y_pred, ops::scalar_like(y_pred, args.get_double("threshold")));
  return ops::equal(detail::match_rank(y_true, y_pred), predicted);
}

// 1 where the class `true_class` (y_pred's shape without its last axis) is among the k highest scores, as
// Keras's in_top_k: its score is at least the k-th highest, i.e. fewer than k classes score above it (a tie
// at the boundary counts as in).
Tensor in_top_k(const Tensor& true_class, const Tensor& y_pred, std::int64_t k) {
  const Tensor is_true = ops::equal(ops::expand_dims(true_class, -1), ops::positions(y_pred, -1));
  const Tensor true_score = ops::sum(ops::masked_fill(y_pred, is_true, 0.0), {-1}, /*keepdims=*/true);
  const Tensor above = ops::sum(ops::greater(y_pred, true_score), {-1});
  const Tensor in_top = ops::less(above, ops::scalar_like(above, static_cast<double>(k)));
  // A row holding a NaN, or a label that is no class, is a miss (as argmax_last makes it for the accuracies).
  const Tensor row_is_number = ops::min(ops::equal(y_pred, y_pred), {-1});
  const Tensor label_is_class = ops::max(is_true, {-1});
  return in_top * row_is_number * label_is_class;
}

std::int64_t k_argument(const Config& args) {
  const std::int64_t k = args.get_int("k");
  if (k < 1) throw ConfigError("a top-k accuracy needs k >= 1, got " + std::to_string(k));
  return k;
}

// Keras's l2_normalize along `axis`: x / sqrt(max(sum(x²), 1e-12)).
Tensor l2_normalized(const Tensor& x, int axis) {
  const Tensor squares = ops::sum(x * x, {axis}, /*keepdims=*/true);
  return x * ops::rsqrt(ops::maximum(squares, ops::scalar_like(squares, 1e-12)));
}

bool register_builtin_metrics(Registry<MetricClass>& registry) {
  registry.add("kiln>BinaryAccuracy", {"binary_accuracy",
                                       {{"threshold", 0.5}},
                                       TargetForm::elementwise,
                                       [](const Tensor& y_true, const Tensor& y_pred, const Config& args) {
                                         return ops::mean(binary_hits(y_true, y_pred, args));
                                       },
                                       [](const Tensor& y_true, const Tensor& y_pred, const Config& args) {
                                         return ops::mean(binary_hits(y_true, y_pred, args), {-1});
                                       }});
  // The batch mean of the accuracies below is the mean of their per-sample form (Metric::operator()).
  registry.add("kiln>CategoricalAccuracy",
               {"categorical_accuracy", Config::map(), TargetForm::one_hot, MetricClass::Compute(),
                [](const Tensor& y_true, const Tensor& y_pred, const Config&) {
                  return ops::equal(detail::argmax_last(y_true), detail::argmax_last(y_pred));
                }});
  registry.add("kiln>SparseCategoricalAccuracy",
               {"sparse_categorical_accuracy", Config::map(), TargetForm::class_indices, MetricClass::Compute(),
                [](const Tensor& y_true, const Tensor& y_pred, const Config&) {
                  return ops::equal(detail::sparse_labels(y_true, y_pred), detail::argmax_last(y_pred));
                }});
  registry.add("kiln>MeanAbsoluteError",
               {"mean_absolute_error", Config::map(), TargetForm::elementwise,
                [](const Tensor& y_true, const Tensor& y_pred, const Config&) {
                  return ops::mean_absolute_error(detail::match_rank(y_true, y_pred), y_pred);
                },
                [](const Tensor& y_true, const Tensor& y_pred, const Config&) {
                  return ops::mean(ops::abs(detail::match_rank(y_true, y_pred) - y_pred), {-1});
                }},
               {"mae", "MAE"});
  registry.add("kiln>MeanSquaredError",
               {"mean_squared_error", Config::map(), TargetForm::elementwise,
                [](const Tensor& y_true, const Tensor& y_pred, const Config&) {
                  return ops::mean_squared_error(detail::match_rank(y_true, y_pred), y_pred);
                },
                [](const Tensor& y_true, const Tensor& y_pred, const Config&) {
                  const Tensor error = detail::match_rank(y_true, y_pred) - y_pred;
                  return ops::mean(error * error, {-1});
                }},
               {"mse", "MSE"});
  // Keras's epsilon (1e-7) keeps a zero target from dividing by zero.
  registry.add("kiln>MeanAbsolutePercentageError",
               {"mean_absolute_percentage_error", Config::map(), TargetForm::elementwise, MetricClass::Compute(),
                [](const Tensor& y_true, const Tensor& y_pred, const Config&) {
                  const Tensor target = detail::match_rank(y_true, y_pred);
                  const Tensor scale = ops::maximum(ops::abs(target), ops::scalar_like(target, 1e-7));
                  return ops::mean(ops::abs((target - y_pred) / scale), {-1}) * 100.0;
                }},
               {"mape", "MAPE"});
  registry.add("kiln>CosineSimilarity",
               {"cosine_similarity", {{"axis", -1}}, TargetForm::elementwise, MetricClass::Compute(),
                [](const Tensor& y_true, const Tensor& y_pred, const Config& args) {
                  const int axis = static_cast<int>(args.get_int("axis"));
                  return ops::sum(l2_normalized(detail::match_rank(y_true, y_pred), axis) * l2_normalized(y_pred, axis),
                                  {axis});
                }});
  registry.add("kiln>TopKCategoricalAccuracy",
               {"top_k_categorical_accuracy", {{"k", 5}}, TargetForm::one_hot, MetricClass::Compute(),
                [](const Tensor& y_true, const Tensor& y_pred, const Config& args) {
                  return in_top_k(detail::argmax_last(y_true), y_pred, k_argument(args));
                }});
  registry.add("kiln>SparseTopKCategoricalAccuracy",
               {"sparse_top_k_categorical_accuracy", {{"k", 5}}, TargetForm::class_indices, MetricClass::Compute(),
                [](const Tensor& y_true, const Tensor& y_pred, const Config& args) {
                  return in_top_k(detail::sparse_labels(y_true, y_pred), y_pred, k_argument(args));
                }});
  return true;
}

}  // namespace

// The built-ins register with the registry's first use (a static Metric elsewhere may come first).
Registry<MetricClass>& metric_registry() {
  static Registry<MetricClass> registry("metric", [](const std::string& key, const MetricClass& metric) -> std::string {
    return metric.compute || metric.per_sample ? "" : "metric " + key + " has no function";
  });
  [[maybe_unused]] static const bool builtins = register_builtin_metrics(registry);
  return registry;
}

std::vector<std::string> Metric::names() {
  std::vector<std::string> result = {"accuracy", "acc"};
  const std::vector<std::string>& keys = metric_registry().keys();
  result.insert(result.end(), keys.begin(), keys.end());
  return result;
}

Metric::Metric(const std::string& key, std::string name)
    : metric_class_(&metric_registry().get(key)),
      key_(key),
      class_name_(class_part(key)),
      name_(std::move(name)),
      arguments_(metric_class_->arguments.is_null() ? Config::map() : metric_class_->arguments) {}

Metric::Metric(const char* name) : Metric(std::string(name)) {}

Metric::Metric(const std::string& name) : name_(name) {
  if (is_accuracy(name)) return;
  if (metric_registry().find(name) == nullptr) {
    std::vector<std::string> candidates = metric_registry().spellings();
    candidates.insert(candidates.end(), {"accuracy", "acc"});
    throw ConfigError("unknown metric '" + name + "'" + did_you_mean(nearest_names(name, candidates)));
  }
  *this = Metric(metric_registry().key_of(name), name);
}

Metric Metric::from_config(const Config& identifier) {
  if (identifier.type() == Config::Type::string) return Metric(identifier.as_string());
  if (!identifier.is_map())
    throw ConfigError("a metric is a name or {\"class_name\": ..., \"config\": {...}}, got " + identifier.to_string());
  std::string class_name = identifier.get_string("class_name");
  if (const Config* registered = identifier.find("registered_name"); registered != nullptr && !registered->is_null())
    class_name = registered->as_string("key 'registered_name'");
  const std::string key = metric_registry().key_of(class_name);
  const MetricClass& metric_class = metric_registry().get(key);
  const Config* found = identifier.find("config");
  ConfigReader args(found != nullptr ? *found : Config(), class_part(key));
  Metric metric(key, args.text("name", metric_class.default_name));
  args.value("dtype");  // kiln computes a metric in the predictions' dtype
  for (const Config::Entry& entry : metric_class.arguments.items())
    if (const Config& given = args.value(entry.first); !given.is_null())
      metric.arguments_.set(entry.first, entry.second.type() == Config::Type::number
                                             ? Config(given.as_double(args.who() + " argument '" + entry.first + "'"))
                                             : given);
  args.finish();
  return metric;
}

std::string Metric::describe() const {
  return (class_name_.empty() ? std::string("accuracy") : class_name_) + " metric '" + name_ + "'";
}

double Metric::threshold() const { return arguments_.get_double("threshold", 0.5); }

Config Metric::get_config() const {
  if (!resolved()) throw ValueError(describe() + ": resolve() it from the target and prediction shapes first");
  Config config = {{"name", name_}, {"dtype", Config()}};
  for (const Config::Entry& entry : arguments_.items()) config.set(entry.first, entry.second);
  return config;
}

Config Metric::serialize() const {
  if (!resolved()) return Config(name_);
  Config serialized = {{"class_name", class_name_}, {"config", get_config()}};
  if (key_.rfind("kiln>", 0) != 0) serialized.set("registered_name", key_);
  return serialized;
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
  return Metric(binary   ? "kiln>BinaryAccuracy"
                : sparse ? "kiln>SparseCategoricalAccuracy"
                         : "kiln>CategoricalAccuracy",
                name_);
}

void Metric::check(const Shape& y_true, const Shape& y_pred) const {
  if (!resolved()) return resolve(y_true, y_pred).check(y_true, y_pred);
  detail::check_targets(describe(), metric_class_->targets, y_true, y_pred);
}

Tensor Metric::operator()(const Tensor& y_true, const Tensor& y_pred) const {
  if (!resolved()) return resolve(y_true.shape(), y_pred.shape())(y_true, y_pred);
  check(y_true.shape(), y_pred.shape());
  const Tensor value = metric_class_->compute ? metric_class_->compute(y_true, y_pred, arguments_)
                                             : ops::mean(metric_class_->per_sample(y_true, y_pred, arguments_));
  if (!value.valid() || value.rank() != 0)
    throw ShapeError(describe() + ": a metric function must return a scalar" +
                     (value.valid() ? ", got shape " + value.shape().to_string() : std::string(", got nothing")));
  return value;
}

std::pair<Tensor, Tensor> Metric::accumulated(const Tensor& y_true, const Tensor& y_pred) const {
  if (!resolved()) return resolve(y_true.shape(), y_pred.shape()).accumulated(y_true, y_pred);
  const Tensor mask = y_pred.graph().mask_of(y_pred);
  if (!mask.valid()) return {(*this)(y_true, y_pred), Tensor()};
  if (!metric_class_->per_sample) {
    warn(describe() + " cannot leave out the masked steps of its predictions (it has no per-sample form): it "
                      "averages over every step");
    return {(*this)(y_true, y_pred), Tensor()};
  }
  check(y_true.shape(), y_pred.shape());
  const Tensor values = metric_class_->per_sample(y_true, y_pred, arguments_);
  if (!values.valid() || values.shape().rank() != mask.rank())
    throw ShapeError(describe(), "the predictions' mask does not match the metric of each sample",
                     {{"mask", mask.shape()}, {"per sample", values.valid() ? values.shape() : Shape()}});
  // Keras's Mean with the mask as sample weight: total += sum(values · mask), count += sum(mask).
  return {ops::sum(values * mask), ops::sum(mask)};
}

}  // namespace kiln
