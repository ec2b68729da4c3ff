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

#include <kiln/core/shape.hpp>
#include <kiln/core/tensor.hpp>
#include <kiln/layers/config.hpp>

namespace kiln {

class Loss {
 public:
  using Function = std::function<Tensor(const Tensor& y_true, const Tensor& y_pred)>;

  // A Keras name: "mse"/"mean_squared_error"/"MeanSquaredError", "mae"/..., "huber"/"Huber",
  // "binary_crossentropy"/"BinaryCrossentropy", "categorical_crossentropy"/..., and
  // "sparse_categorical_crossentropy"/.... Unknown names throw ConfigError with the nearest ones.
  Loss(const char* name);         // NOLINT: implicit, so compile(optimizer, "mse") reads like Keras
  Loss(const std::string& name);  // NOLINT
  // A loss of your own; `function` must return a scalar. check() accepts any shapes for it.
  Loss(std::string name, Function function);

  // A name, or {"class_name": "Huber", "config": {"delta": 2.0, ...}} as Keras writes loss objects.
  static Loss from_config(const Config& identifier);
  static std::vector<std::string> names();  // every accepted name

  // The batch mean of the per-sample loss, as a () tensor. Throws ShapeError (see check) first.
  Tensor operator()(const Tensor& y_true, const Tensor& y_pred) const;
  // Throws ShapeError naming the loss and both shapes when targets of `y_true`'s shape cannot be compared
  // with predictions of `y_pred`'s shape. Unknown (None) dimensions match anything.
  void check(const Shape& y_true, const Shape& y_pred) const;

  const std::string& class_name() const { return class_name_; }  // "MeanSquaredError"
  const std::string& name() const { return name_; }              // "mean_squared_error", Keras's name
  bool from_logits() const { return from_logits_; }
  bool custom() const { return kind_ == Kind::custom; }  // made from a function: not restorable from a config
  double delta() const { return delta_; }
  // The class's config: name, reduction, and its own arguments (delta, from_logits, ...).
  Config get_config() const;
  // {"module": "keras.losses", "class_name": ..., "config": ..., "registered_name": null}
  Config serialize() const;

 private:
  enum class Kind {
    mean_squared_error,
    mean_absolute_error,
    huber,
    binary_crossentropy,
    categorical_crossentropy,
    sparse_categorical_crossentropy,
    custom
  };
  struct Definition;
  static const std::vector<Definition>& definitions();
  static const Definition& find(const std::string& name);
  explicit Loss(const Definition& definition);
  void read_config(const Config& config);
  std::string describe() const;

  Kind kind_ = Kind::mean_squared_error;
  std::string class_name_;
  std::string name_;
  bool from_logits_ = false;
  double delta_ = 1.0;
  Function function_;
};

}  // namespace kiln
