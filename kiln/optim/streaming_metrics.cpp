// The metrics that are no mean over samples: each batch adds to sums (a confusion matrix per threshold,
// R²'s moments), and the value is a formula of the totals. Keras keeps those sums in metric variables;
// kiln's fit adds them up on the host and evaluates the same formula on the totals, so the batch value and
// the epoch value have one definition (MetricClass::statistics and ::result).
//
// Formulas and argument checks follow Keras 3's confusion_metrics.py, f_score_metrics.py and
// regression_metrics.py.
#include <kiln/optim/detail/streaming_metrics.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/ops/ops.hpp>
#include <kiln/optim/detail/targets.hpp>

namespace kiln::detail {

namespace {

constexpr double kEpsilon = 1e-7;        // Keras's backend.epsilon()
constexpr double kNegativeInf = -1e10;   // Keras's metrics_utils.NEG_INF

Tensor one_minus(const Tensor& x) { return (-x) + 1.0; }

// 1 where x is not 0, as Keras casts labels to bool.
Tensor nonzero(const Tensor& x) { return one_minus(ops::equal(x, ops::scalar_like(x, 0.0))); }

// Weights (batch, ...) with trailing axes of 1 added up to `rank`, so they broadcast over the rest.
Tensor expanded_to(Tensor weights, int rank) {
  while (weights.rank() < rank) weights = ops::expand_dims(weights, -1);
  return weights;
}

Tensor vector_constant(Graph& graph, const std::vector<double>& values, DType dtype, const std::string& name) {
  Array array(Shape{static_cast<std::int64_t>(values.size())}, dtype);
  for (std::size_t i = 0; i < values.size(); ++i) array.set_flat(i, values[i]);
  return ops::constant(graph, array, name);
}

// x[..., :n-1] and x[..., 1:] along the last axis (the thresholds').
Tensor head(const Tensor& x) {
  std::vector<std::int64_t> begin(static_cast<std::size_t>(x.rank()), 0), size(begin.size(), -1);
  size.back() = x.shape().dim(-1) - 1;
  return ops::slice(x, begin, size);
}
Tensor tail(const Tensor& x) {
  std::vector<std::int64_t> begin(static_cast<std::size_t>(x.rank()), 0), size(begin.size(), -1);
  begin.back() = 1;
  return ops::slice(x, begin, size);
}

bool is_null(const Config& arguments, const std::string& key) {
  const Config* value = arguments.find(key);
  return value == nullptr || value->is_null();
}

std::vector<double> numbers(const Config& value, const std::string& what) {
  std::vector<double> result;
  if (value.is_list())
    for (const Config& item : value.as_list(what)) result.push_back(item.as_double(what));
  else
    result.push_back(value.as_double(what));
  return result;
}

// Keras's assert_thresholds_range.
std::vector<double> thresholds_in_range(const Config& value, const std::string& who) {
  std::vector<double> thresholds = numbers(value, who + " argument 'thresholds'");
  for (double threshold : thresholds)
    if (!(threshold >= 0.0 && threshold <= 1.0))
      throw ConfigError(who + ": threshold values must be in [0, 1], got " + value.to_string());
  return thresholds;
}

// Keras's is_evenly_distributed_thresholds: 0, 1/(n-1), ..., 1 for n >= 3, within float32's epsilon.
bool evenly_distributed(const std::vector<double>& thresholds) {
  const std::size_t n = thresholds.size();
  if (n < 3) return false;
  for (std::size_t i = 0; i < n; ++i)
    if (std::abs(thresholds[i] - static_cast<double>(i) / static_cast<double>(n - 1)) > kEpsilon) return false;
  return true;
}

std::int64_t optional_int(const Config& arguments, const std::string& key) {
  return is_null(arguments, key) ? -1 : arguments.get_int(key);
}

// ---- the confusion matrix per threshold --------------------------------------------------------------------

// What update_confusion_matrix_variables needs besides the data.
struct ConfusionOptions {
  std::vector<double> thresholds;
  bool clip = false;            // evenly spaced thresholds: Keras buckets predictions clipped to [0, 1]
  std::int64_t top_k = -1;      // keep each row's k highest predictions, the rest -1e10
  std::int64_t class_id = -1;   // only this class (y_pred's last axis)
  bool multi_label = false;     // one curve per label: statistics (labels, thresholds)
  Tensor label_weights;         // (labels,), weighting each label's counts (not with multi_label)
};

struct Confusion {
  Tensor true_positives, false_positives, true_negatives, false_negatives;
};

// x with each row's k highest entries (the last axis) kept and the others set to -1e10, as Keras's
// _filter_top_k. An entry is kept when fewer than k entries of its row are strictly above it, so a tie at
// the k-th place keeps every tied entry (top_k keeps the first of them).
Tensor filter_top_k(const Tensor& x, std::int64_t k) {
  const Tensor above = ops::sum(ops::greater(ops::expand_dims(x, -2), ops::expand_dims(x, -1)), {-1});
  const Tensor kept = ops::less(above, ops::scalar_like(above, static_cast<double>(k)));
  return ops::where(kept, x, ops::scalar_like(x, kNegativeInf));
}

// Counts per threshold (a prediction above it is positive), each weighted by its sample's weight: shapes
// (thresholds,), or (labels, thresholds) with multi_label.
Confusion confusion(const std::string& who, const Tensor& y_true_given, const Tensor& y_pred_given,
                    const Tensor& weights, const ConfusionOptions& options) {
  Tensor y_pred = y_pred_given;
  Tensor y_true = match_rank(y_true_given, y_pred);
  if (options.top_k > 0) y_pred = filter_top_k(y_pred, options.top_k);
  if (options.class_id >= 0) {
    if (y_pred.rank() < 2)
      throw ShapeError(who, "class_id needs predictions of shape (samples, classes)", {{"y_pred", y_pred.shape()}});
    const std::int64_t classes = y_pred.shape().dim(-1);
    if (classes != Shape::unknown && options.class_id >= classes)
      throw ShapeError(who + ": class_id " + std::to_string(options.class_id) + " is not one of the " +
                       std::to_string(classes) + " classes of predictions " + y_pred.shape().to_string());
    std::vector<std::int64_t> begin(static_cast<std::size_t>(y_pred.rank()), 0), size(begin.size(), -1);
    begin.back() = options.class_id;
    size.back() = 1;
    y_pred = ops::slice(y_pred, begin, size);
    y_true = ops::slice(y_true, begin, size);
  }
  if (options.clip)
    y_pred = ops::minimum(ops::maximum(y_pred, ops::scalar_like(y_pred, 0.0)), ops::scalar_like(y_pred, 1.0));
  const int rank = y_pred.rank();
  if (options.multi_label && rank != 2)
    throw ShapeError(who, "multi_label needs predictions of rank 2 (samples, labels)", {{"y_pred", y_pred.shape()}});
  // (..., labels, thresholds): which predictions each threshold calls positive.
  const Tensor thresholds = vector_constant(y_pred.graph(), options.thresholds, y_pred.dtype(), "thresholds");
  const Tensor positive = ops::greater(ops::expand_dims(y_pred, -1), thresholds);
  const Tensor negative = one_minus(positive);
  Tensor is_true = ops::expand_dims(nonzero(y_true), -1);
  Tensor is_false = one_minus(is_true);
  Tensor weight;
  if (weights.valid()) weight = expanded_to(weights, rank + 1);
  if (options.label_weights.valid()) {
    const Tensor per_label = ops::expand_dims(options.label_weights, -1);
    weight = weight.valid() ? weight * per_label : per_label;
  }
  if (weight.valid()) {
    is_true = is_true * weight;
    is_false = is_false * weight;
  }
  // Summed over the samples (and every axis but the thresholds', or but the labels' and thresholds').
  ops::Axes axes;
  for (int axis = 0; axis < (options.multi_label ? rank - 1 : rank); ++axis) axes.push_back(axis);
  auto count = [&](const Tensor& label, const Tensor& predicted) { return ops::sum(label * predicted, axes); };
  return {count(is_true, positive), count(is_false, positive), count(is_false, negative), count(is_true, negative)};
}

// Precision's and Recall's thresholds: given, or 0.5 (-1e10 with top_k, so the top k are positive).
ConfusionOptions threshold_options(const Config& arguments, const std::string& who) {
  ConfusionOptions options;
  options.top_k = optional_int(arguments, "top_k");
  options.class_id = optional_int(arguments, "class_id");
  options.thresholds = is_null(arguments, "thresholds") ? std::vector<double>{options.top_k > 0 ? kNegativeInf : 0.5}
                                                        : thresholds_in_range(arguments.at("thresholds"), who);
  options.clip = evenly_distributed(options.thresholds);
  return options;
}

void check_threshold_arguments(Config& arguments, const std::string& who) {
  if (!is_null(arguments, "thresholds")) thresholds_in_range(arguments.at("thresholds"), who);
  if (!is_null(arguments, "top_k") && arguments.get_int("top_k") < 1)
    throw ConfigError(who + ": top_k must be at least 1, got " + arguments.at("top_k").to_string());
  if (!is_null(arguments, "class_id") && arguments.get_int("class_id") < 0)
    throw ConfigError(who + ": class_id must not be negative, got " + arguments.at("class_id").to_string());
}

// One value when there is one threshold, else one per threshold.
Tensor per_threshold(const Tensor& values) { return values.shape().dim(0) == 1 ? ops::sum(values) : values; }

// Precision, tp / (tp + fp), or Recall, tp / (tp + fn), at each threshold.
MetricClass threshold_ratio(const std::string& name, const std::string& who, bool recall) {
  MetricClass metric{name, {{"thresholds", Config()}, {"top_k", Config()}, {"class_id", Config()}},
                     TargetForm::elementwise};
  metric.statistics = [who, recall](const Tensor& y_true, const Tensor& y_pred, const Tensor& weights,
                                    const Config& args) {
    const Confusion counts = confusion(who, y_true, y_pred, weights, threshold_options(args, who));
    return std::vector<Tensor>{counts.true_positives, recall ? counts.false_negatives : counts.false_positives};
  };
  metric.result = [](const std::vector<Tensor>& totals, const Config&) {
    return per_threshold(divide_no_nan(totals[0], totals[0] + totals[1]));
  };
  metric.check_arguments = [who](Config& args) { check_threshold_arguments(args, who); };
  return metric;
}

// ---- AUC --------------------------------------------------------------------------------------------------

std::string curve_of(const Config& arguments) {
  const std::string curve = arguments.get_string("curve");
  if (curve == "ROC" || curve == "roc") return "ROC";
  if (curve == "PR" || curve == "pr") return "PR";
  if (curve == "PRGAIN" || curve == "prgain") return "PRGAIN";
  throw ConfigError("AUC: invalid curve '" + curve + "'; expected one of ROC, PR, PRGAIN");
}

std::string summation_of(const Config& arguments) {
  std::string method = arguments.get_string("summation_method");
  std::transform(method.begin(), method.end(), method.begin(), [](unsigned char c) { return std::tolower(c); });
  if (method == "interpolation" || method == "minoring" || method == "majoring") return method;
  throw ConfigError("AUC: invalid summation_method '" + arguments.get_string("summation_method") +
                    "'; expected one of interpolation, minoring, majoring");
}

// -eps, the thresholds given (sorted) or n - 2 evenly spaced ones, 1 + eps.
std::vector<double> auc_thresholds(const Config& arguments) {
  std::vector<double> inner;
  if (!is_null(arguments, "thresholds")) {
    inner = thresholds_in_range(arguments.at("thresholds"), "AUC");
    std::sort(inner.begin(), inner.end());
  } else {
    const std::int64_t n = arguments.get_int("num_thresholds");
    for (std::int64_t i = 0; i < n - 2; ++i) inner.push_back(static_cast<double>(i + 1) / static_cast<double>(n - 1));
  }
  std::vector<double> thresholds = {-kEpsilon};
  thresholds.insert(thresholds.end(), inner.begin(), inner.end());
  thresholds.push_back(1.0 + kEpsilon);
  return thresholds;
}

void check_auc_arguments(Config& arguments) {
  arguments.set("curve", curve_of(arguments));
  arguments.set("summation_method", summation_of(arguments));
  if (!is_null(arguments, "thresholds")) {
    std::vector<double> inner = thresholds_in_range(arguments.at("thresholds"), "AUC");
    std::sort(inner.begin(), inner.end());
    Config sorted = Config::list();
    for (double threshold : inner) sorted.push_back(threshold);
    arguments.set("thresholds", sorted);
    arguments.set("num_thresholds", static_cast<std::int64_t>(inner.size() + 2));
  } else if (arguments.get_int("num_thresholds") <= 1) {
    throw ConfigError("AUC: num_thresholds must be an integer > 1, got " + arguments.at("num_thresholds").to_string());
  }
  if (!is_null(arguments, "num_labels") && !arguments.get_bool("multi_label"))
    throw ConfigError("AUC: num_labels is needed only when multi_label is true");
}

std::vector<Tensor> auc_statistics(const Tensor& y_true, const Tensor& y_pred, const Tensor& weights,
                                   const Config& arguments) {
  ConfusionOptions options;
  const std::vector<double> thresholds = auc_thresholds(arguments);
  options.thresholds = thresholds;
  std::vector<double> spread = {0.0};
  spread.insert(spread.end(), thresholds.begin() + 1, thresholds.end() - 1);
  spread.push_back(1.0);
  options.clip = evenly_distributed(spread);
  options.multi_label = arguments.get_bool("multi_label");
  const std::int64_t labels = y_pred.shape().dim(-1);
  if (options.multi_label && !is_null(arguments, "num_labels") && arguments.get_int("num_labels") != labels)
    throw ShapeError("AUC: num_labels is " + arguments.at("num_labels").to_string() + " but the predictions " +
                     y_pred.shape().to_string() + " have " + std::to_string(labels));
  if (!is_null(arguments, "label_weights") && !options.multi_label) {
    const std::vector<double> label_weights = numbers(arguments.at("label_weights"), "AUC argument 'label_weights'");
    if (static_cast<std::int64_t>(label_weights.size()) != labels)
      throw ShapeError("AUC: " + std::to_string(label_weights.size()) + " label_weights for predictions " +
                       y_pred.shape().to_string());
    options.label_weights = vector_constant(y_pred.graph(), label_weights, y_pred.dtype(), "label_weights");
  }
  const Tensor scores = arguments.get_bool("from_logits") ? ops::sigmoid(y_pred) : y_pred;
  const Confusion counts = confusion("AUC", y_true, scores, weights, options);
  return {counts.true_positives, counts.false_positives, counts.true_negatives, counts.false_negatives};
}

// The AUC of each label (the last axis is the thresholds'), summed over the thresholds: a () tensor, or one
// per label with multi_label, then averaged (weighted by label_weights when given).
Tensor average_labels(const Tensor& terms, const Config& arguments) {
  if (!arguments.get_bool("multi_label")) return ops::sum(terms);
  const Tensor by_label = ops::sum(terms, {-1});
  if (is_null(arguments, "label_weights")) return ops::mean(by_label);
  const std::vector<double> values = numbers(arguments.at("label_weights"), "AUC argument 'label_weights'");
  const Tensor weights = vector_constant(by_label.graph(), values, by_label.dtype(), "label_weights");
  return divide_no_nan(ops::sum(by_label * weights), ops::sum(weights));
}

// Davis & Goadrich's interpolation of the precision-recall curve, as Keras's interpolate_pr_auc.
Tensor interpolated_pr_auc(const Tensor& tp, const Tensor& fp, const Tensor& fn, const Config& arguments) {
  const Tensor zero = ops::scalar_like(tp, 0.0);
  const Tensor dtp = head(tp) - tail(tp);
  const Tensor p = tp + fp;
  const Tensor dp = head(p) - tail(p);
  const Tensor slope = divide_no_nan(dtp, ops::maximum(dp, zero));
  const Tensor intercept = tail(tp) - slope * tail(p);
  const Tensor both_positive = ops::greater(head(p), zero) * ops::greater(tail(p), zero);
  const Tensor ratio = ops::where(both_positive, divide_no_nan(head(p), ops::maximum(tail(p), zero)),
                                  ops::ones_like(tail(p)));
  const Tensor increments =
      divide_no_nan(slope * (dtp + intercept * ops::log(ratio)), ops::maximum(tail(tp) + tail(fn), zero));
  return average_labels(increments, arguments);
}

Tensor auc_result(const std::vector<Tensor>& totals, const Config& arguments) {
  const Tensor &tp = totals[0], &fp = totals[1], &tn = totals[2], &fn = totals[3];
  const std::string curve = curve_of(arguments), method = summation_of(arguments);
  if (curve == "PR" && method == "interpolation") return interpolated_pr_auc(tp, fp, fn, arguments);
  Tensor x, y;
  if (curve == "ROC") {
    x = divide_no_nan(fp, fp + tn);  // false positive rate
    y = divide_no_nan(tp, tp + fn);  // recall
  } else if (curve == "PR") {
    x = divide_no_nan(tp, tp + fn);
    y = divide_no_nan(tp, tp + fp);
  } else {  // PRGAIN
    const Tensor scaling = divide_no_nan(tp + fn, tn + fp);
    const Tensor no_positives = ops::equal(tp, ops::scalar_like(tp, 0.0));
    const Tensor recall_gain = one_minus(scaling * divide_no_nan(fn, tp));
    const Tensor precision_gain = one_minus(scaling * divide_no_nan(fp, tp));
    x = ops::maximum(ops::where(no_positives, ops::scalar_like(tp, 0.0), recall_gain), ops::scalar_like(tp, 0.0));
    y = ops::maximum(ops::where(no_positives, ops::scalar_like(tp, 1.0), precision_gain), ops::scalar_like(tp, 0.0));
  }
  const Tensor heights = method == "interpolation" ? (head(y) + tail(y)) * 0.5
                         : method == "minoring"    ? ops::minimum(head(y), tail(y))
                                                   : ops::maximum(head(y), tail(y));
  return average_labels((head(x) - tail(x)) * heights, arguments);
}

// ---- F-beta -------------------------------------------------------------------------------------------------

void check_fbeta_arguments(Config& arguments, const std::string& who) {
  if (!is_null(arguments, "average")) {
    const std::string average = arguments.get_string("average");
    if (average != "micro" && average != "macro" && average != "weighted")
      throw ConfigError(who + ": invalid average '" + average + "'; expected one of null, micro, macro, weighted");
  }
  if (arguments.contains("beta") && !(arguments.get_double("beta") > 0.0))
    throw ConfigError(who + ": beta must be > 0, got " + arguments.at("beta").to_string());
  if (!is_null(arguments, "threshold")) {
    const double threshold = arguments.get_double("threshold");
    if (!(threshold > 0.0 && threshold <= 1.0))
      throw ConfigError(who + ": threshold must verify 0 < threshold <= 1, got " + arguments.at("threshold").to_string());
  }
}

// y_true and y_pred of rank 2 (samples, outputs) with the outputs known, as Keras's FBetaScore and R2Score.
void check_two_dimensional(const std::string& who, const Tensor& y_true, const Tensor& y_pred) {
  if (y_true.rank() != 2 || y_pred.rank() != 2 || y_pred.shape().dim(-1) == Shape::unknown)
    throw ShapeError(who, "expects 2D inputs of shape (batch_size, output_dim), output_dim known",
                     {{"y_true", y_true.shape()}, {"y_pred", y_pred.shape()}});
}

std::vector<Tensor> fbeta_statistics(const std::string& who, const Tensor& y_true_given, const Tensor& y_pred,
                                     const Tensor& weights, const Config& arguments) {
  const Tensor y_true = match_rank(y_true_given, y_pred);
  check_two_dimensional(who, y_true, y_pred);
  Tensor predicted;
  if (is_null(arguments, "threshold")) {
    // The arg-max of each row (all of a tied maximum), but never a zero: [0, 0, 0] stays [0, 0, 0].
    const Tensor top = ops::max(y_pred, {-1}, /*keepdims=*/true);
    predicted = ops::greater_equal(y_pred, top) * ops::greater(ops::abs(y_pred), ops::scalar_like(y_pred, 1e-9));
  } else {
    predicted = ops::greater(y_pred, ops::scalar_like(y_pred, arguments.get_double("threshold")));
  }
  const ops::Axes axes = !is_null(arguments, "average") && arguments.get_string("average") == "micro" ? ops::Axes{} : ops::Axes{0};
  const Tensor weight = weights.valid() ? expanded_to(weights, 2) : Tensor();
  auto weighted_sum = [&](const Tensor& value) { return ops::sum(weight.valid() ? value * weight : value, axes); };
  return {weighted_sum(predicted * y_true), weighted_sum(predicted * one_minus(y_true)),
          weighted_sum(one_minus(predicted) * y_true), weighted_sum(y_true)};
}

Tensor fbeta_result(const std::vector<Tensor>& totals, const Config& arguments) {
  const Tensor &tp = totals[0], &fp = totals[1], &fn = totals[2], &intermediate_weights = totals[3];
  const double beta_squared = std::pow(arguments.get_double("beta", 1.0), 2.0);
  const Tensor precision = tp / ((tp + fp) + kEpsilon);
  const Tensor recall = tp / ((tp + fn) + kEpsilon);
  const Tensor score = (precision * recall) / ((precision * beta_squared + recall) + kEpsilon) * (1.0 + beta_squared);
  if (is_null(arguments, "average")) return score;
  if (arguments.get_string("average") == "weighted")
    return ops::sum(score * (intermediate_weights / (ops::sum(intermediate_weights) + kEpsilon)));
  return ops::mean(score);
}

// ---- R² -----------------------------------------------------------------------------------------------------

void check_r2_arguments(Config& arguments) {
  if (!is_null(arguments, "class_aggregation")) {
    const std::string aggregation = arguments.get_string("class_aggregation");
    if (aggregation != "uniform_average" && aggregation != "variance_weighted_average")
      throw ConfigError("R2Score: invalid class_aggregation '" + aggregation +
                        "'; expected one of null, uniform_average, variance_weighted_average");
  }
  if (arguments.get_int("num_regressors") < 0)
    throw ConfigError("R2Score: num_regressors must be >= 0, got " + arguments.at("num_regressors").to_string());
}

std::vector<Tensor> r2_statistics(const Tensor& y_true_given, const Tensor& y_pred, const Tensor& weights,
                                  const Config&) {
  const Tensor y_true = match_rank(y_true_given, y_pred);
  check_two_dimensional("R2Score", y_true, y_pred);
  const Tensor ones = ops::ones_like(y_true);
  // Each (sample, output)'s weight: the sample's, 1 without weights.
  const Tensor weight = weights.valid() ? expanded_to(weights, 2) * ones : ones;
  const Tensor weighted = y_true * weight;
  const Tensor error = y_true - y_pred;
  const Tensor sample_counts = ops::max(nonzero(weight), {-1});  // a sample with any nonzero weight
  return {ops::sum(weighted, {0}), ops::sum(y_true * weighted, {0}), ops::sum(error * error * weight, {0}),
          ops::sum(weight, {0}), ops::sum(sample_counts)};
}

Tensor r2_result(const std::vector<Tensor>& totals, const Config& arguments) {
  const Tensor &sum = totals[0], &squared_sum = totals[1], &total_mse = totals[2], &count = totals[3],
               &samples = totals[4];
  const Tensor mean = sum / count;
  const Tensor total = squared_sum - sum * mean;
  Tensor raw = one_minus(total_mse / total);
  const Tensor infinite = ops::equal(ops::abs(raw), ops::scalar_like(raw, std::numeric_limits<double>::infinity()));
  raw = ops::where(infinite, ops::scalar_like(raw, 0.0), raw);
  Tensor score = raw;
  if (!is_null(arguments, "class_aggregation"))
    score = arguments.get_string("class_aggregation") == "uniform_average" ? ops::mean(raw)
                                                                          : ops::sum(total * raw) / ops::sum(total);
  const std::int64_t regressors = arguments.get_int("num_regressors");
  if (regressors == 0) return score;
  // The adjusted R², unless there are too few samples for it (Keras warns and keeps the plain one).
  const auto p = static_cast<double>(regressors);
  const Tensor adjusted = one_minus(one_minus(score) * (samples - 1.0) / ((samples - 1.0) - p));
  return ops::where(ops::less(ops::scalar_like(samples, p), samples - 1.0), adjusted, score);
}

}  // namespace

void register_streaming_metrics(Registry<MetricClass>& registry) {
  registry.add("kiln>Precision", threshold_ratio("precision", "Precision", /*recall=*/false));
  registry.add("kiln>Recall", threshold_ratio("recall", "Recall", /*recall=*/true));

  MetricClass auc{"auc",
                  {{"num_thresholds", 200},
                   {"curve", "ROC"},
                   {"summation_method", "interpolation"},
                   {"multi_label", false},
                   {"num_labels", Config()},
                   {"label_weights", Config()},
                   {"from_logits", false},
                   {"thresholds", Config()}},
                  TargetForm::elementwise};
  auc.statistics = auc_statistics;
  auc.result = auc_result;
  auc.check_arguments = check_auc_arguments;
  registry.add("kiln>AUC", auc);

  MetricClass fbeta{"fbeta_score",
                    {{"average", Config()}, {"beta", 1.0}, {"threshold", Config()}},
                    TargetForm::elementwise};
  fbeta.statistics = [](const Tensor& y_true, const Tensor& y_pred, const Tensor& weights, const Config& args) {
    return fbeta_statistics("FBetaScore", y_true, y_pred, weights, args);
  };
  fbeta.result = fbeta_result;
  fbeta.check_arguments = [](Config& args) { check_fbeta_arguments(args, "FBetaScore"); };
  registry.add("kiln>FBetaScore", fbeta);

  // F1Score is FBetaScore with beta 1, which its config leaves out.
  MetricClass f1{"f1_score", {{"average", Config()}, {"threshold", Config()}}, TargetForm::elementwise};
  f1.statistics = [](const Tensor& y_true, const Tensor& y_pred, const Tensor& weights, const Config& args) {
    return fbeta_statistics("F1Score", y_true, y_pred, weights, args);
  };
  f1.result = fbeta_result;
  f1.check_arguments = [](Config& args) { check_fbeta_arguments(args, "F1Score"); };
  registry.add("kiln>F1Score", f1);

  MetricClass r2{"r2_score", {{"class_aggregation", "uniform_average"}, {"num_regressors", 0}}, TargetForm::elementwise};
  r2.statistics = r2_statistics;
  r2.result = r2_result;
  r2.check_arguments = check_r2_arguments;
  registry.add("kiln>R2Score", r2);

  // A mean of each sample's mean squared error, then its square root.
  MetricClass rmse{"root_mean_squared_error", Config::map(), TargetForm::elementwise};
  rmse.per_sample = [](const Tensor& y_true, const Tensor& y_pred, const Config&) {
    const Tensor error = match_rank(y_true, y_pred) - y_pred;
    return ops::mean(error * error, {-1});
  };
  rmse.result = [](const std::vector<Tensor>& totals, const Config&) {
    return ops::sqrt(divide_no_nan(totals[0], totals[1]));
  };
  registry.add("kiln>RootMeanSquaredError", rmse);
}

}  // namespace kiln::detail
