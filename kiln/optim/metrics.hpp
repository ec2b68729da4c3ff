#pragma once
// Metric: a Keras metric by name, as a graph builder. Applied to symbolic targets and predictions it
// returns the batch mean as a () tensor; fit() averages those over batches, weighted by batch size,
// which gives Keras's epoch value (its metrics are means over samples).
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
#include <string>
#include <vector>

#include <kiln/core/shape.hpp>
#include <kiln/core/tensor.hpp>
#include <kiln/layers/config.hpp>

namespace kiln {

class Metric {
 public:
  // "accuracy"/"acc", "binary_accuracy"/"BinaryAccuracy", "categorical_accuracy"/"CategoricalAccuracy",
  // "sparse_categorical_accuracy"/"SparseCategoricalAccuracy", "mae"/"mean_absolute_error"/
  // "MeanAbsoluteError", "mse"/"mean_squared_error"/"MeanSquaredError". Unknown names throw ConfigError
  // with the nearest ones.
  Metric(const char* name);         // NOLINT: implicit, so metrics = {"accuracy", "mae"} reads like Keras
  Metric(const std::string& name);  // NOLINT
  // A name, or {"class_name": "BinaryAccuracy", "config": {"name": ..., "threshold": 0.5, ...}}.
  static Metric from_config(const Config& identifier);
  static std::vector<std::string> names();

  // The concrete metric for targets and predictions of these shapes ("accuracy" becomes one of the three
  // accuracies; the others are returned unchanged).
  Metric resolve(const Shape& y_true, const Shape& y_pred) const;
  // The batch mean as a () tensor; resolves first. Throws ShapeError (see check).
  Tensor operator()(const Tensor& y_true, const Tensor& y_pred) const;
  // Throws ShapeError naming the metric and both shapes when they cannot be compared.
  void check(const Shape& y_true, const Shape& y_pred) const;

  const std::string& name() const { return name_; }  // the log key: as given ("acc", "mae"), or the config's
  // "BinaryAccuracy", ...; empty for "accuracy" until resolved.
  const std::string& class_name() const { return class_name_; }
  bool resolved() const { return kind_ != Kind::accuracy; }
  double threshold() const { return threshold_; }  // binary accuracy: a prediction > threshold is class 1
  Config get_config() const;  // {"name": ..., "dtype": null (, "threshold": ...)}; ValueError before resolve()

 private:
  enum class Kind {
    accuracy,
    binary_accuracy,
    categorical_accuracy,
    sparse_categorical_accuracy,
    mean_absolute_error,
    mean_squared_error
  };
  struct Definition;
  static const std::vector<Definition>& definitions();
  static const Definition& find(const std::string& name);
  static const Definition& definition_of(Kind kind);
  Metric(const Definition& definition, std::string name);
  std::string describe() const;

  Kind kind_ = Kind::accuracy;
  std::string class_name_;
  std::string name_;
  double threshold_ = 0.5;
};

}  // namespace kiln
