#pragma once
// kiln::Model and kiln::Sequential: the models users hold, with Keras's training and saving API. They
// stand above every room they call: the graph and predict (layers/model_base.hpp), training
// (train/training.hpp) and files (serialize/saving.hpp); loading one back is models/loading.hpp.
//
//   kiln::Model model(inputs, outputs);
//   model.compile(kiln::create_optimizer("adam"), "mse", {"mae"});
//   kiln::History history = model.fit(x, y, kiln::FitOptions().epochs(20).batch_size(32).validation_split(0.2));
//   kiln::Logs scores = model.evaluate(x_test, y_test);
//   model.save("forecast.kiln");
//
// One training step (forward, backward and the optimizer's update) is one planned graph run that
// allocates nothing once planned; the graph is made at the first fit() from the data's shapes.
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/data/dataset.hpp>
#include <kiln/layers/model_base.hpp>
#include <kiln/optim/losses.hpp>
#include <kiln/optim/metrics.hpp>
#include <kiln/optim/optimizer.hpp>
#include <kiln/serialize/saving.hpp>
#include <kiln/train/fit_options.hpp>
#include <kiln/train/trainer.hpp>
#include <kiln/train/training.hpp>

namespace kiln {

/// What kiln::Model and kiln::Sequential add to ModelHandle (predict, summary): Keras's compile, fit,
/// evaluate, train_on_batch, test_on_batch and saving. Copies of a handle share one model, and the compiled
/// state is kept on the model, so every handle sees it. A training call (compile, fit, train_on_batch) takes
/// the model alone: LayerStateError when another thread is using it.
template <class M>
class TrainableModel : public ModelHandle<M> {
 public:
  using ModelHandle<M>::ModelHandle;

  /// The optimizer by name ("adam") with its defaults, or an object (kiln::create_optimizer("adam", config)).
  void compile(const std::string& optimizer, const Loss& loss, const std::vector<Metric>& metrics = {},
               const std::vector<Metric>& weighted_metrics = {}) const {
    compile_model(*this->layer_, create_optimizer(optimizer), {loss}, metrics, weighted_metrics);
  }
  /// Attaches the optimizer, `loss` (applied to every output) and `metrics` (logged by name, prefixed
  /// `output_<k>_` when the model has several outputs) for training. Compiling again starts afresh: a new
  /// optimizer state and epochs_trained() 0. LayerStateError when the model is not built and cannot build
  /// from data; ValueError for a null optimizer.
  void compile(OptimizerPtr optimizer, const Loss& loss, const std::vector<Metric>& metrics = {},
               const std::vector<Metric>& weighted_metrics = {}) const {
    compile_model(*this->layer_, std::move(optimizer), {loss}, metrics, weighted_metrics);
  }
  /// One loss per output (or one for all); the logged "loss" is their sum. ValueError for another count.
  /// `weighted_metrics`, as Keras's, are weighed by fit's and evaluate's sample or class weights (the plain
  /// metrics are not); each is logged under its name, or weighted_<name> when a plain metric has that name.
  void compile(OptimizerPtr optimizer, const std::vector<Loss>& losses, const std::vector<Metric>& metrics,
               const std::vector<Metric>& weighted_metrics = {}) const {
    compile_model(*this->layer_, std::move(optimizer), losses, metrics, weighted_metrics);
  }
  /// Trains on rows of `x` against `y` and returns every epoch's logs. Everything is checked before the first
  /// step: LayerStateError when not compiled, ValueError or ShapeError for data that does not fit the model
  /// (naming the array and shapes), ValueError or ConfigError for bad options. Arrays of another dtype are
  /// converted to the model's.
  History fit(const Array& x, const Array& y, const FitOptions& options = {}) const {
    return fit_model(*this->layer_, {x}, {y}, options);
  }
  /// For several inputs or outputs: one array per input in `x`, one per output in `y`, with equal rows.
  History fit(const std::vector<Array>& x, const std::vector<Array>& y, const FitOptions& options = {}) const {
    return fit_model(*this->layer_, x, y, options);
  }
  /// Trains on a batched Dataset (Dataset::batch): each element is a batch of x, y and, optionally, sample
  /// weights. Keras's rules for datasets: the dataset shuffles itself (FitOptions::shuffle and batch_size are
  /// not used), steps_per_epoch takes a fixed number of batches per epoch, validation_data(Dataset) and
  /// validation_steps validate. The first batch is read and checked before any step; a later batch that does
  /// not fit throws, naming it. The same seeds give the same weights, prefetch on or off.
  History fit(const Dataset& data, const FitOptions& options = {}) const {
    return fit_dataset(*this->layer_, data, options);
  }
  /// The loss and metrics over the batches of a Dataset (all of them, or EvaluateOptions::steps).
  Logs evaluate(const Dataset& data, const EvaluateOptions& options = {}) const {
    return evaluate_dataset(*this->layer_, data, options);
  }
  /// The outputs for the x of every batch of a Dataset (or of its first `steps`), one array per output,
  /// rows in the dataset's order.
  std::vector<Array> predict(const Dataset& data, std::int64_t steps = -1) const {
    return predict_dataset(*this->layer_, data, steps);
  }
  using ModelHandle<M>::predict;
  /// The loss and metrics in inference mode (dropout off), as means over every row, run in batches of
  /// `batch_size` (default 32; ValueError when not positive). Leaves the weights and the optimizer as they
  /// are; LayerStateError when not compiled. Several threads may evaluate at once.
  Logs evaluate(const Array& x, const Array& y, std::int64_t batch_size = 32) const {
    return evaluate_model(*this->layer_, {x}, {y}, EvaluateOptions().batch_size(batch_size));
  }
  /// For several inputs or outputs: one array per input in `x`, one per output in `y`.
  Logs evaluate(const std::vector<Array>& x, const std::vector<Array>& y, std::int64_t batch_size = 32) const {
    return evaluate_model(*this->layer_, x, y, EvaluateOptions().batch_size(batch_size));
  }
  /// With Keras's other arguments: sample weights.
  Logs evaluate(const Array& x, const Array& y, const EvaluateOptions& options) const {
    return evaluate_model(*this->layer_, {x}, {y}, options);
  }
  /// With Keras's other arguments, for several inputs or outputs.
  Logs evaluate(const std::vector<Array>& x, const std::vector<Array>& y, const EvaluateOptions& options) const {
    return evaluate_model(*this->layer_, x, y, options);
  }
  /// One training step on all of `x` and `y` as a single batch; returns its loss and metrics, computed
  /// before the step's update. No callbacks run and epochs_trained() does not change.
  Logs train_on_batch(const Array& x, const Array& y) const {
    return train_model_on_batch(*this->layer_, {x}, {y});
  }
  /// train_on_batch for a model of several inputs or outputs: one array per input and per output, in order.
  Logs train_on_batch(const std::vector<Array>& x, const std::vector<Array>& y) const {
    return train_model_on_batch(*this->layer_, x, y);
  }
  /// The optimizer compile() was given: its state (slots, iterations) is the run's state besides the weights.
  Optimizer& optimizer() const { return compiled_trainer(*this->layer_).optimizer(); }
  /// The loss and metrics of `x` and `y` as a single batch, in inference mode, without a training step.
  Logs test_on_batch(const Array& x, const Array& y) const {
    return test_model_on_batch(*this->layer_, {x}, {y});
  }
  /// test_on_batch for a model of several inputs or outputs: one array per input and per output, in order.
  Logs test_on_batch(const std::vector<Array>& x, const std::vector<Array>& y) const {
    return test_model_on_batch(*this->layer_, x, y);
  }
  /// Epochs fit() has finished, restored by load_model: pass it as FitOptions().initial_epoch to resume.
  int epochs_trained() const { return kiln::epochs_trained(*this->layer_); }

  // ---- saving (serialize/saving.hpp; loading is models/loading.hpp) ---------------------------------------
  /// Config, weights, optimizer state and progress in one checked file, written atomically.
  void save(const std::string& path) const { save_model(*this->layer_, path); }
  /// The weights alone, by path ("dense/kernel"), in one checked file written atomically. LayerStateError
  /// when the model is not built; SerializationError when the file cannot be written.
  void save_weights(const std::string& path) const { kiln::save_weights(*this->layer_, path); }
  /// Assigns the weights of a save_weights (or save) file, matched by path. Every shape is checked before any
  /// weight is set, so a file that does not fit (ValueError or ShapeError) leaves the model unchanged;
  /// SerializationError for a damaged or foreign file, LayerStateError when the model is not built.
  void load_weights(const std::string& path) const { kiln::load_weights(*this->layer_, path); }
  /// The architecture as Keras's JSON, without weights: `indent` spaces (0 to 16, 0 for one line);
  /// kiln::model_from_json makes a new model of it with fresh weights.
  std::string to_json(int indent = 2) const { return model_to_json(*this->layer_, indent); }
};

/// A functional model, Keras's keras.Model(inputs, outputs): the layer calls that lead from kiln::Input
/// tensors to the outputs, with compile() and fit(). Also the handle to any model, as load_model returns.
class Model : public TrainableModel<ModelBase> {
 public:
  /// The calls from one kiln::Input tensor to one output tensor; an empty `name` gives "functional".
  Model(const Tensor& input, const Tensor& output, const std::string& name = "");
  /// The calls from several inputs to several outputs, in the order given (x and y follow it in fit).
  Model(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs, const std::string& name = "");
  /// A handle to an existing model (e.g. from layer_from_config), shared, not copied.
  Model(std::shared_ptr<ModelBase> model) : TrainableModel(std::move(model)) {}
  /// The same model as another handle (a kiln::Sequential, say), shared, not copied.
  template <class M>
  Model(const ModelHandle<M>& other) : TrainableModel(std::static_pointer_cast<ModelBase>(other.ptr())) {}
};

/// One element of Sequential's list, as Keras takes them: a layer, or first an input: a kiln::Input
/// tensor or an input shape with its batch dimension.
///
///   kiln::Sequential model({kiln::Input({None, 8}), kiln::Dense(16, "relu"), kiln::Dense(1)});
///   kiln::Sequential lazy({kiln::Dense(16, "relu"), kiln::Dense(1)});   // builds at its first fit or predict
class SequentialItem {
 public:
  SequentialItem(LayerPtr layer) : layer_(std::move(layer)) {}  ///< NOLINT: implicit, as in Keras's list
  template <class L>
  SequentialItem(const LayerHandle<L>& layer) : layer_(layer.ptr()) {}  ///< NOLINT
  template <class L, class = std::enable_if_t<std::is_base_of_v<Layer, L>>>
  SequentialItem(std::shared_ptr<L> layer) : layer_(std::move(layer)) {}              ///< NOLINT
  SequentialItem(const Tensor& input) : input_(input), is_input_(true) {}             ///< NOLINT
  SequentialItem(const Shape& input_shape) : shape_(input_shape), is_shape_(true) {}  ///< NOLINT
  /// Adds the item to `model`: an input starts the stack, a layer goes on top. ConfigError for an input
  /// after a layer.
  void add_to(SequentialModel& model) const;

 private:
  LayerPtr layer_;
  Tensor input_;
  bool is_input_ = false;
  Shape shape_;
  bool is_shape_ = false;
};

/// Keras's Sequential: a stack of layers, each taking the previous one's output, with compile() and fit().
/// It builds from an input given first, from build(), or else from the first data fit or predict sees.
class Sequential : public TrainableModel<SequentialModel> {
 public:
  /// An empty stack; an empty `name` gives "sequential".
  Sequential(const std::string& name = "");
  /// The items in order, as keras.Sequential([...]) takes them.
  Sequential(const std::vector<SequentialItem>& items, const std::string& name = "");
  Sequential(std::shared_ptr<SequentialModel> model) : TrainableModel(std::move(model)) {}  ///< from layer_from_config
  /// Puts a layer on top of the stack (or, first, an input) and returns *this. On a built model a layer
  /// that does not fit the stack's output throws and is not kept; a layer already in the stack is a
  /// ConfigError.
  Sequential& add(const SequentialItem& item) {
    item.add_to(*layer_);
    return *this;
  }
  /// Builds for inputs of `input_shape`, batch dimension first (Shape{None, 8}), leaving the batch unknown.
  /// A no-op once built.
  void build(const Shape& input_shape) const { layer_->build_for(input_shape); }
};

}  // namespace kiln
