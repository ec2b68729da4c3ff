#pragma once
// Metric: a Keras metric by name, as a graph builder. Applied to symbolic targets and predictions it
// returns the batch's value as a () tensor. For fit() it gives sums to add up over batches (accumulated):
// a mean metric its weighted total and count, a streaming one (Precision, AUC, R2Score) its statistics,
// and each a formula of the totals, which gives Keras's epoch value.
//
//   kiln::Metric accuracy = "accuracy";
//   kiln::Tensor value = accuracy(y_true, y_pred);   // binary, categorical or sparse, from the shapes
//
// "accuracy" (or "acc") is resolved as Keras's compile does, from the shapes of y_true and y_pred:
// binary when y_pred's last axis is 1; else sparse categorical when y_true has a lower rank than y_pred,
// or a last axis of 1; else categorical. The metric keeps the name it was given ("accuracy") as its log key.
//
// Arg-max ties: categorical and sparse categorical accuracy take the first index of the maximum, exactly as
// Keras (NumPy's argmax) does, so a tie counts as correct only when the true class is the first of the tied
// ones. A row with a NaN prediction counts as wrong.
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <kiln/core/registry.hpp>
#include <kiln/core/shape.hpp>
#include <kiln/core/tensor.hpp>
#include <kiln/layers/config.hpp>
#include <kiln/optim/losses.hpp>

namespace kiln {

/// A registered metric class: Keras's default name for it (the log key when a config gives none), its own
/// arguments with their defaults, how its targets meet its predictions, and the batch mean itself.
///
///   KILN_REGISTER_METRIC("acme>WithinTenth", {"within_tenth", kiln::Config::map(),
///       kiln::TargetForm::elementwise,
///       [](const kiln::Tensor& y_true, const kiln::Tensor& y_pred, const kiln::Config&) {
///         return kiln::ops::mean(kiln::ops::less(kiln::ops::abs(y_pred - y_true),
///                                                kiln::ops::scalar_like(y_pred, 0.1)));
///       }});
///   model.compile("adam", "mse", {"within_tenth"});
struct MetricClass {
  /// The metric of a batch: a () tensor from the targets, the predictions and every argument.
  using Compute = std::function<Tensor(const Tensor& y_true, const Tensor& y_pred, const Config& arguments)>;
  std::string default_name;  ///< "binary_accuracy"
  Config arguments;          ///< its own arguments (besides name and dtype) with their defaults: {"threshold": 0.5}
  /// How y_true must meet y_pred: Metric::check enforces it, and so does every call.
  TargetForm targets = TargetForm::elementwise;
  /// The batch mean, a () tensor; `arguments` holds every argument. May be empty when per_sample is given:
  /// the batch mean is then per_sample's mean.
  Compute compute = {};
  /// Optional: each sample's (and step's) value, y_pred's shape without its last axis, whose mean is
  /// `compute`'s. With it, a masked prediction's padding steps do not count (Keras's MeanMetricWrapper with
  /// the mask as sample weight), and sample weights weigh it; without it, the metric averages over every
  /// step and says so.
  Compute per_sample = {};

  /// A metric that is no mean over samples (Precision, AUC, R2Score) gives its batch's sums instead, each of
  /// a shape that does not depend on the batch, and `result`, its value from their totals. `weights` is
  /// invalid, or each sample's (and step's) weight: y_pred's shape without its last axis, or fewer axes.
  using Statistics = std::function<std::vector<Tensor>(const Tensor& y_true, const Tensor& y_pred,
                                                       const Tensor& weights, const Config& arguments)>;
  /// The value from totals of the statistics (tensors of their shapes, float64 in fit): a () tensor, or one
  /// value per class or threshold (n,), logged as name_0 ... name_<n-1>. For a per_sample metric it may be
  /// given too, to finish the mean: it then gets {sum of values, sum of weights} (RootMeanSquaredError's
  /// square root); otherwise the mean is the value.
  using Result = std::function<Tensor(const std::vector<Tensor>& totals, const Config& arguments)>;
  Statistics statistics = {};  ///< the batch's sums, for a metric that is no mean over samples; else empty
  Result result = {};          ///< the value from the totals of `statistics` (or of a mean's sums); may be empty
  /// Optional: throws ConfigError naming what is wrong with `arguments` (a beta of 0) when the metric is made
  /// from a config, before it meets any data; may also put them in their canonical form ("roc" as "ROC").
  std::function<void(Config& arguments)> check_arguments = {};
};

/// What fit and evaluate accumulate over the batches of an epoch for one loss or metric: sums of fixed
/// shapes, added up batch after batch, and the value as a function of their totals. The batch value and
/// the epoch value are one definition: result(statistics) is the batch's own.
struct MetricSums {
  std::vector<Tensor> statistics;                                   ///< this batch's sums
  std::function<Tensor(const std::vector<Tensor>& totals)> result;  ///< the value from totals of their shapes

  /// A batch mean over `rows` samples ({mean · rows, rows}, a mean of the totals): how a loss is logged.
  static MetricSums batch_mean(const Tensor& mean, const Tensor& rows);
  /// The weighted mean of `values` ({sum(values · weights), sum(weights)}); `weights` of values' shape, or
  /// of fewer axes (values are first averaged over the axes weights lack, as Keras does), or invalid.
  static MetricSums weighted_mean(const Tensor& values, const Tensor& weights);
};

/// a / b, and 0 where b is 0: Keras's ops.divide_no_nan.
Tensor divide_no_nan(const Tensor& a, const Tensor& b);

/// Every metric class by key ("kiln>BinaryAccuracy"); "BinaryAccuracy", "binary_accuracy" and registered
/// aliases ("mae") find it too. "accuracy" and "acc" are not classes: Metric resolves them from the shapes.
Registry<MetricClass>& metric_registry();

/// A metric as compile() takes it: a registered metric class with its arguments and its log key, or
/// "accuracy" waiting to be resolved from the shapes it meets. Copyable; it builds graph nodes only when called.
class Metric {
 public:
  /// "accuracy"/"acc", "binary_accuracy"/"BinaryAccuracy", "categorical_accuracy"/"CategoricalAccuracy",
  /// "sparse_categorical_accuracy"/"SparseCategoricalAccuracy", "mae"/"mean_absolute_error"/
  /// "MeanAbsoluteError", "mse"/"mean_squared_error"/"MeanSquaredError", or a class of your own. Unknown
  /// names throw ConfigError with the nearest ones.
  Metric(const char* name);         ///< NOLINT: implicit, so metrics = {"accuracy", "mae"} reads like Keras
  Metric(const std::string& name);  ///< NOLINT
  /// A name, or {"class_name": "BinaryAccuracy", "config": {"name": ..., "threshold": 0.5, ...}}.
  static Metric from_config(const Config& identifier);
  static std::vector<std::string> names();  ///< "accuracy", "acc" and every registered key

  /// The concrete metric for targets and predictions of these shapes ("accuracy" becomes one of the three
  /// accuracies; the others are returned unchanged).
  Metric resolve(const Shape& y_true, const Shape& y_pred) const;
  /// The batch's value as a () tensor (a (n,) one for a metric of several values: a Precision of several
  /// thresholds); resolves first. Throws ShapeError (see check).
  Tensor operator()(const Tensor& y_true, const Tensor& y_pred) const;
  /// Throws ShapeError naming the metric and both shapes when they cannot be compared.
  void check(const Shape& y_true, const Shape& y_pred) const;
  /// What fit and evaluate accumulate over batches. `sample_weight` is invalid, or each sample's (or step's)
  /// weight; predictions that carry a mask (Graph::mask_of) multiply it by the mask, so padding steps do
  /// not count, as in Keras. A mean metric with a per-sample form gives its weighted mean; one with only a
  /// batch mean gives {mean · rows, rows} (and ignores weights and masks, saying so once); a streaming
  /// metric gives its statistics.
  MetricSums accumulated(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight = Tensor()) const;

  const std::string& name() const { return name_; }  ///< the log key: as given ("acc", "mae"), or the config's
  /// "BinaryAccuracy", ...; empty for "accuracy" until resolved.
  const std::string& class_name() const { return class_name_; }
  /// False only for "accuracy"/"acc" before resolve(): which accuracy it is depends on the shapes.
  bool resolved() const { return metric_class_ != nullptr; }
  double threshold() const;   ///< binary accuracy: a prediction > threshold is class 1
  Config get_config() const;  ///< {"name": ..., "dtype": null (, "threshold": ...)}; ValueError before resolve()
  /// {"class_name": ..., "config": ...} (with "registered_name" for a class of your own), or the name of
  /// an unresolved "accuracy".
  Config serialize() const;

 private:
  Metric(const std::string& key, std::string name);
  std::string describe() const;

  const MetricClass* metric_class_ = nullptr;  ///< none for "accuracy" until resolved
  std::string key_;
  std::string class_name_;
  std::string name_;
  Config arguments_;
};

}  // namespace kiln

// Registers a MetricClass under "Package>Name", optionally with aliases: KILN_REGISTER_METRIC("acme>Name", {...});
// or KILN_REGISTER_METRIC("acme>Name", {...}, {"alias"});
#define KILN_REGISTER_METRIC(key, ...) KILN_AT_STARTUP(::kiln::metric_registry().add(key, __VA_ARGS__))
