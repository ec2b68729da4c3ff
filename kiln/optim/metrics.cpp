#include <kiln/optim/metrics.hpp>

#include <algorithm>

#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/warnings.hpp>
#include <kiln/core/names.hpp>
#include <kiln/ops/ops.hpp>
#include <kiln/optim/detail/streaming_metrics.hpp>
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
  detail::register_streaming_metrics(registry);
  return true;
}

}  // namespace

// The built-ins register with the registry's first use (a static Metric elsewhere may come first).
Registry<MetricClass>& metric_registry() {
  static Registry<MetricClass> registry("metric", [](const std::string& key, const MetricClass& metric) -> std::string {
    if (metric.statistics && !metric.result) return "metric " + key + " has statistics but no result";
    return metric.compute || metric.per_sample || metric.statistics ? "" : "metric " + key + " has no function";
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
  // An argument given as null is null (R2Score's class_aggregation: one value per output), not the default.
  for (const Config::Entry& entry : metric_class.arguments.items())
    if (const Config& given = args.value(entry.first); !given.is_null())
      metric.arguments_.set(entry.first, entry.second.type() == Config::Type::number
                                             ? Config(given.as_double(args.who() + " argument '" + entry.first + "'"))
                                             : given);
    else if (found != nullptr && found->contains(entry.first))
      metric.arguments_.set(entry.first, Config());
  args.finish();
  if (metric_class.check_arguments) metric_class.check_arguments(metric.arguments_);
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
  const MetricClass& metric = *metric_class_;
  Tensor value;
  if (metric.statistics) {
    value = metric.result(metric.statistics(y_true, y_pred, Tensor(), arguments_), arguments_);
  } else if (metric.per_sample && metric.result) {
    value = metric.result(MetricSums::weighted_mean(metric.per_sample(y_true, y_pred, arguments_), Tensor()).statistics,
                          arguments_);
  } else {
    value = metric.compute ? metric.compute(y_true, y_pred, arguments_)
                           : ops::mean(metric.per_sample(y_true, y_pred, arguments_));
  }
  if (!value.valid() || value.rank() > (metric.statistics ? 1 : 0))
    throw ShapeError(describe() + ": a metric function must return a scalar" +
                     (metric.statistics ? std::string(" or a vector") : std::string()) +
                     (value.valid() ? ", got shape " + value.shape().to_string() : std::string(", got nothing")));
  return value;
}

namespace {

// The weights a batch's values count with: the sample weights given, times the predictions' mask.
Tensor combined_weights(const Tensor& sample_weight, const Tensor& mask) {
  if (!sample_weight.valid()) return mask;
  if (!mask.valid()) return sample_weight;
  Tensor expanded = sample_weight;
  while (expanded.rank() < mask.rank()) expanded = ops::expand_dims(expanded, -1);
  return mask * expanded;
}

// A metric class's result with this metric's arguments bound, as MetricSums::result takes it.
std::function<Tensor(const std::vector<Tensor>&)> with_arguments(const MetricClass::Result& result,
                                                                 const Config& arguments) {
  return [result, arguments](const std::vector<Tensor>& totals) { return result(totals, arguments); };
}

}  // namespace

MetricSums Metric::accumulated(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) const {
  if (!resolved()) return resolve(y_true.shape(), y_pred.shape()).accumulated(y_true, y_pred, sample_weight);
  check(y_true.shape(), y_pred.shape());
  const MetricClass& metric = *metric_class_;
  const Config arguments = arguments_;
  const Tensor weights = combined_weights(sample_weight, y_pred.graph().mask_of(y_pred));
  if (weights.valid() && weights.rank() >= y_pred.rank())
    throw ShapeError(describe(), "sample weights need fewer axes than the predictions",
                     {{"weights", weights.shape()}, {"y_pred", y_pred.shape()}});
  MetricSums sums;
  if (metric.statistics) {
    sums.statistics = metric.statistics(y_true, y_pred, weights, arguments);
    for (const Tensor& statistic : sums.statistics)
      if (!statistic.valid() || !statistic.shape().is_fully_defined())
        throw ShapeError(describe() + ": a statistic must have a shape known before the data" +
                         (statistic.valid() ? ", got " + statistic.shape().to_string() : std::string()));
    sums.result = with_arguments(metric.result, arguments);
    return sums;
  }
  if (!metric.per_sample) {
    if (weights.valid())
      warn(describe() + " cannot weigh its samples or leave out masked steps (it has no per-sample form): it "
                        "averages over every step");
    return MetricSums::batch_mean((*this)(y_true, y_pred), ops::dim_size(y_pred, 0));
  }
  const Tensor values = metric.per_sample(y_true, y_pred, arguments);
  if (!values.valid() || (weights.valid() && values.rank() < weights.rank()))
    throw ShapeError(describe(), "the weights do not match the metric of each sample",
                     {{"weights", weights.valid() ? weights.shape() : Shape()},
                      {"per sample", values.valid() ? values.shape() : Shape()}});
  sums = MetricSums::weighted_mean(values, weights);
  if (metric.result) sums.result = with_arguments(metric.result, arguments);
  return sums;
}

Tensor divide_no_nan(const Tensor& a, const Tensor& b) {
  const Tensor zero = ops::equal(b, ops::scalar_like(b, 0.0));
  return ops::where(zero, ops::scalar_like(a, 0.0), a / ops::where(zero, ops::scalar_like(b, 1.0), b));
}

MetricSums MetricSums::batch_mean(const Tensor& mean, const Tensor& rows) {
  return {{mean * rows, rows}, [](const std::vector<Tensor>& totals) { return divide_no_nan(totals[0], totals[1]); }};
}

MetricSums MetricSums::weighted_mean(const Tensor& values, const Tensor& weights) {
  if (!weights.valid())
    return batch_mean(ops::mean(values), values.rank() > 0 ? ops::dim_size(values, 0) : ops::scalar_like(values, 1.0));
  Tensor reduced = values;
  if (values.rank() > weights.rank()) {
    ops::Axes extra;
    for (int axis = weights.rank(); axis < values.rank(); ++axis) extra.push_back(axis);
    reduced = ops::mean(values, extra);
  }
  const Tensor counted = reduced.shape() == weights.shape() ? weights : weights * ops::ones_like(reduced);
  return {{ops::sum(reduced * weights), ops::sum(counted)},
          [](const std::vector<Tensor>& totals) { return divide_no_nan(totals[0], totals[1]); }};
}

}  // namespace kiln
