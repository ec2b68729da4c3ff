#pragma once
// Loss: a Keras loss by name or config, applied to symbolic targets and predictions. It wraps the fused
// loss ops (ops/losses.cpp) and adds what compile() needs around them: Keras's names and configs, and a
// shape check that can run before training, naming the loss and both shapes.
//
//   kiln::Loss loss = "sparse_categorical_crossentropy";
//   loss.check(y_train.shape(), model_output.shape());   // ShapeError before the first step
//   kiln::Tensor value = loss(y_true, y_pred);             // a scalar: the batch mean
#include <functional>
#include <string>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/registry.hpp>
#include <kiln/core/shape.hpp>
#include <kiln/core/tensor.hpp>
#include <kiln/layers/config.hpp>

namespace kiln {

/// How a loss's (or metric's) targets meet its predictions, checked before training:
///   elementwise    y_true has y_pred's shape (or differs from it by a last axis of 1);
///   one_hot        y_true is one-hot (or probabilities) of y_pred's shape;
///   class_indices  y_true holds class indices: y_pred's shape without its last axis (or with a last axis
///                  of 1), integers in [0, classes);
///   any            nothing is checked.
enum class TargetForm { elementwise, one_hot, class_indices, any };

/// A registered loss class: Keras's default name for it, its own arguments with their defaults, how its
/// targets meet its predictions, and the loss itself. Built-in losses are registered this way; so are a
/// user's, which then save with a compiled model and reload compiled:
///
///   KILN_REGISTER_LOSS("acme>Cubic", {"cubic", {{"scale", 1.0}}, kiln::TargetForm::elementwise,
///       [](const kiln::Tensor& y_true, const kiln::Tensor& y_pred, const kiln::Config& arguments) {
///         const kiln::Tensor d = kiln::ops::abs(y_pred - y_true);
///         return kiln::ops::mean(d * d * d) * arguments.get_double("scale");
///       }, {}});
///   model.compile("adam", "acme>Cubic");   // or "Cubic", "cubic"
struct LossClass {
  /// The loss of a batch: a () tensor from the targets, the predictions and every argument.
  using Compute = std::function<Tensor(const Tensor& y_true, const Tensor& y_pred, const Config& arguments)>;
  std::string default_name;  ///< Keras's `name` default: "mean_squared_error"
  Config arguments;          ///< its own arguments (besides name and reduction) with their defaults, in order
  /// How y_true must meet y_pred: Loss::check enforces it, and so does every call.
  TargetForm targets = TargetForm::elementwise;
  Compute compute;  ///< the batch mean of the per-sample loss, a () tensor; `arguments` holds every argument
  /// Checks of given arguments beyond their types: a message ("delta must be > 0, got -1") or "".
  std::function<std::string(const Config& arguments)> validate;
  /// The loss of each sample and step, unreduced: y_pred's shape without its last axis. When set, a
  /// prediction that carries a mask (Graph::mask_of) is averaged over its kept steps only, as Keras does;
  /// without it, a masked prediction counts every step (with a warning).
  Compute per_step = nullptr;
};

/// Every loss class by key ("kiln>MeanSquaredError"); "MeanSquaredError", "mean_squared_error" and the
/// aliases a class registers ("mse") find it too (core/registry.hpp).
Registry<LossClass>& loss_registry();

/// A loss as compile() takes it: a registered loss class with its arguments and Keras's name, or a C++
/// function of your own. Copyable; it builds graph nodes only when called.
class Loss {
 public:
  /// A loss of your own: the batch mean as a () tensor, from the targets and the predictions.
  using Function = std::function<Tensor(const Tensor& y_true, const Tensor& y_pred)>;

  /// A registered name: "mse"/"mean_squared_error"/"MeanSquaredError", "mae"/..., "huber"/"Huber",
  /// "binary_crossentropy"/"BinaryCrossentropy", "categorical_crossentropy"/...,
  /// "sparse_categorical_crossentropy"/..., or a class of your own. Unknown names throw ConfigError with
  /// the nearest ones.
  Loss(const char* name);         ///< NOLINT: implicit, so compile(optimizer, "mse") reads like Keras
  Loss(const std::string& name);  ///< NOLINT
  /// A function of your own, not registered: it trains, but a model compiled with it saves uncompiled
  /// (register a LossClass to save it). `function` must return a scalar; check() accepts any shapes.
  Loss(std::string name, Function function);

  /// A name, or {"class_name": "Huber", "config": {"delta": 2.0, ...}, "registered_name": ...} as Keras
  /// writes loss objects.
  static Loss from_config(const Config& identifier);
  static std::vector<std::string> names();  ///< every registered key

  /// The batch mean of the per-sample loss, as a () tensor. Throws ShapeError (see check) first. When
  /// y_pred carries a mask (Embedding(mask_zero), Masking, ...), the mean is over the kept steps only:
  /// sum(loss · mask) / (sum(mask) + 1e-7), Keras's formula.
  Tensor operator()(const Tensor& y_true, const Tensor& y_pred) const;
  /// The loss with each sample (or step) weighed, as Keras's loss(y_true, y_pred, sample_weight):
  /// sum(loss · weight) / (the number of losses), or, when y_pred carries a mask, sum(loss · weight · mask) /
  /// (sum(mask) + 1e-7). `sample_weight` has the per-sample loss's shape (y_pred's without its last axis) or
  /// fewer trailing axes; an invalid one gives operator()(y_true, y_pred). ValueError for a loss without a
  /// per-sample form (a function of your own), ShapeError for weights that do not fit.
  Tensor operator()(const Tensor& y_true, const Tensor& y_pred, const Tensor& sample_weight) const;
  /// The loss has a per-sample form, so sample weights can weigh it.
  bool weighable() const { return !custom() && loss_class_->per_step; }
  /// The loss compares classes (a crossentropy, a hinge), so class weights mean something to it.
  bool classification() const;
  /// Throws ShapeError naming the loss and both shapes when targets of `y_true`'s shape cannot be compared
  /// with predictions of `y_pred`'s shape. Unknown (None) dimensions match anything.
  void check(const Shape& y_true, const Shape& y_pred) const;
  /// Checks target values before training: class indices must be integers in [0, classes), classes being
  /// y_pred's last dimension. ValueError starting with `where` ("Functional 'm'.fit: y[0]"), naming the
  /// value, its index and the loss.
  void check_values(const Array& y_true, const Shape& y_pred, const std::string& where) const;

  const std::string& class_name() const { return class_name_; }  ///< "MeanSquaredError"
  const std::string& name() const { return name_; }              ///< "mean_squared_error", Keras's name
  const Config& arguments() const { return arguments_; }         ///< every argument of the class
  bool from_logits() const;                                      ///< crossentropies: false by default
  double delta() const;                                          ///< huber: 1.0 by default
  bool custom() const { return loss_class_ == nullptr; }         ///< made from a function: not restorable from a config
  /// The class's config: name, reduction, and its own arguments (delta, from_logits, ...).
  Config get_config() const;
  /// {"module": "keras.losses", "class_name": ..., "config": ..., "registered_name": null}; a class of your
  /// own writes module null and its key as registered_name.
  Config serialize() const;

 private:
  Loss(const std::string& key, const LossClass& loss_class);
  void read_config(const Config& config);
  std::string describe() const;

  const LossClass* loss_class_ = nullptr;
  std::string key_;
  std::string class_name_;
  std::string name_;
  Config arguments_;
  Function function_;
};

}  // namespace kiln

// Registers a LossClass under "Package>Name", optionally with aliases: KILN_REGISTER_LOSS("acme>Name", {...});
// or KILN_REGISTER_LOSS("acme>Name", {...}, {"alias"});
#define KILN_REGISTER_LOSS(key, ...) KILN_AT_STARTUP(::kiln::loss_registry().add(key, __VA_ARGS__))
