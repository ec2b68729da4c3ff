#pragma once
// kiln::Model and kiln::Sequential: the models users hold, with Keras's training API.
//
//   kiln::Model model(inputs, outputs);
//   model.compile(kiln::create_optimizer("adam"), "mse", {"mae"});
//   kiln::History history = model.fit(x, y, kiln::FitOptions().epochs(20).batch_size(32).validation_split(0.2));
//   kiln::Logs scores = model.evaluate(x_test, y_test);
//
// One training step (forward, backward and the optimizer's update) is one planned graph run that
// allocates nothing once planned; the graph is made at the first fit() from the data's shapes.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/layers/model.hpp>
#include <kiln/optim/losses.hpp>
#include <kiln/optim/metrics.hpp>
#include <kiln/optim/optimizer.hpp>
#include <kiln/train/callbacks.hpp>
#include <kiln/train/communicator.hpp>
#include <kiln/data/dataset.hpp>

namespace kiln {

/// fit()'s arguments, named as Keras's, each setter returning *this for chaining:
/// kiln::FitOptions().epochs(20).batch_size(32).validation_split(0.2). fit() checks them before any step:
/// ValueError for a bad value, ConfigError for a verbose other than 0, 1 or 2.
class FitOptions {
 public:
  /// Rows per training step (default 32), the last batch of an epoch taking what is left; also the batch
  /// size of the validation pass. Must be positive.
  FitOptions& batch_size(std::int64_t value) {
    batch_size_ = value;
    return *this;
  }
  /// The epoch to stop before (default 1), counted as Keras does: with initial_epoch(e) fit runs epochs e
  /// to value - 1, so value is the total, not the number more. Must not be negative.
  FitOptions& epochs(int value) {
    epochs_ = value;
    return *this;
  }
  /// The last fraction of the rows (before any shuffling), as Keras takes it.
  FitOptions& validation_split(double value) {
    validation_split_ = value;
    return *this;
  }
  /// Data evaluated at each epoch's end, one array per model input and per output, checked as fit's data is;
  /// its loss and metrics join the logs as `val_loss`, `val_<metric>`. Used instead of validation_split.
  FitOptions& validation_data(std::vector<Array> x, std::vector<Array> y) {
    validation_x_ = std::move(x);
    validation_y_ = std::move(y);
    return *this;
  }
  /// Validation data for a model of one input and one output.
  FitOptions& validation_data(const Array& x, const Array& y) {
    return validation_data(std::vector<Array>{x}, std::vector<Array>{y});
  }
  /// Validation data with each validation sample's weight (Keras's (x, y, sample_weight) tuple), one array
  /// per output as sample_weight() takes them.
  FitOptions& validation_data(std::vector<Array> x, std::vector<Array> y, std::vector<Array> sample_weight) {
    validation_data(std::move(x), std::move(y));
    validation_sample_weight_ = std::move(sample_weight);
    return *this;
  }
  /// Each training sample's weight in the loss and in the weighted metrics (compile's weighted_metrics), as
  /// Keras's: shape (samples,), or (samples, steps) for a sequence output to weigh each step. The loss is
  /// sum(loss · weight) over the number of losses, Keras's sum_over_batch_size; a weighted metric is the
  /// weighted mean. Weights must be finite and not negative. validation_split splits them with the data.
  FitOptions& sample_weight(Array value) {
    sample_weight_ = {std::move(value)};
    return *this;
  }
  /// One weight array per output, for a model of several outputs.
  FitOptions& sample_weight(std::vector<Array> values) {
    sample_weight_ = std::move(values);
    return *this;
  }
  /// Each class's weight (class index -> weight, a class left out weighing 1), made into sample weights from
  /// the targets as Keras does (the class is the target's arg-max, or the rounded index or 0/1 label). For a
  /// model of one output trained with a classification loss (a crossentropy or a hinge), and not with
  /// sample_weight: ValueError otherwise, and for a class the output does not have.
  FitOptions& class_weight(std::map<std::int64_t, double> value) {
    class_weight_ = std::move(value);
    return *this;
  }
  /// With a Dataset: batches per epoch. By default an epoch is one pass over the dataset, iterated afresh
  /// each epoch; with steps_per_epoch, epochs take that many batches from one pass that goes on across
  /// epochs (a repeat()ed dataset), as Keras does. ValueError when a dataset of known length is shorter, or
  /// when one of unknown length runs out.
  FitOptions& steps_per_epoch(std::int64_t value) {
    steps_per_epoch_ = value;
    return *this;
  }
  /// A batched Dataset evaluated at each epoch's end, as validation_data(x, y).
  FitOptions& validation_data(Dataset value) {
    validation_dataset_ = std::make_shared<Dataset>(std::move(value));
    return *this;
  }
  /// Batches of the validation dataset evaluated (default: all of it).
  FitOptions& validation_steps(std::int64_t value) {
    validation_steps_ = value;
    return *this;
  }
  /// Visit the training rows in a new random order each epoch (default true), seeded by seed() and the
  /// epoch, so a resumed run shuffles as the uninterrupted one would.
  FitOptions& shuffle(bool value) {
    shuffle_ = value;
    return *this;
  }
  /// The seed of the shuffling order (default 0): the same seed gives the same batches.
  FitOptions& seed(std::uint64_t value) {
    seed_ = value;
    return *this;
  }  // the shuffling order
  /// Adds a callback; callbacks run in the order they were added.
  FitOptions& callback(CallbackPtr value) {
    callbacks_.push_back(std::move(value));
    return *this;
  }
  /// 0 silent, 1 a live bar on a terminal (one line per epoch otherwise), 2 one line per epoch.
  FitOptions& verbose(int value) {
    verbose_ = value;
    return *this;
  }
  /// The epoch to start at (default 0): model.epochs_trained() resumes a saved run where it stopped.
  FitOptions& initial_epoch(int value) {
    initial_epoch_ = value;
    return *this;
  }
  /// Trains data-parallel across the processes of `communicator` (a kiln::distributed::Context, which must
  /// outlive the fit): every process runs the same program with the same data and options; rank 0's weights
  /// and optimizer state are copied to every rank; each rank computes the gradient of its shard of every
  /// batch (batch_size is the global batch, split by rows) and the gradients are summed while backward
  /// runs, so every rank applies the same update, the whole batch's. Logs, validation and the callbacks'
  /// decisions are the same on every rank; only rank 0 prints and writes files. See docs/distributed.md.
  FitOptions& distribute(Communicator& communicator) {
    communicator_ = &communicator;
    return *this;
  }

 private:
  friend class Trainer;
  std::int64_t batch_size_ = 32;
  int epochs_ = 1;
  double validation_split_ = 0.0;
  std::vector<Array> validation_x_, validation_y_, validation_sample_weight_;
  std::vector<Array> sample_weight_;
  std::map<std::int64_t, double> class_weight_;
  std::int64_t steps_per_epoch_ = -1, validation_steps_ = -1;
  std::shared_ptr<Dataset> validation_dataset_;
  bool shuffle_ = true;
  std::uint64_t seed_ = 0;
  std::vector<CallbackPtr> callbacks_;
  int verbose_ = 1;
  int initial_epoch_ = 0;
  Communicator* communicator_ = nullptr;
};

/// evaluate()'s arguments, named as Keras's: kiln::EvaluateOptions().batch_size(64).sample_weight(w).
class EvaluateOptions {
 public:
  /// Rows per batch (default 32); must be positive.
  EvaluateOptions& batch_size(std::int64_t value) {
    batch_size_ = value;
    return *this;
  }
  /// Each sample's weight in the loss and the weighted metrics, as FitOptions::sample_weight.
  EvaluateOptions& sample_weight(Array value) {
    sample_weight_ = {std::move(value)};
    return *this;
  }
  /// One weight array per output.
  EvaluateOptions& sample_weight(std::vector<Array> values) {
    sample_weight_ = std::move(values);
    return *this;
  }
  /// With a Dataset: the batches evaluated (default: all of it). ValueError when it runs out before.
  EvaluateOptions& steps(std::int64_t value) {
    steps_ = value;
    return *this;
  }

 private:
  friend class Trainer;
  std::int64_t batch_size_ = 32, steps_ = -1;
  std::vector<Array> sample_weight_;
};

/// Every epoch's logs: history["loss"][e], history["val_mae"][e], ...
struct History {
  /// The epochs run, counted from 0 (from initial_epoch in a resumed run).
  std::vector<int> epochs;
  /// Each logs key's values, one per epoch run, in order: the epoch's logs after the callbacks' on_epoch_end.
  std::map<std::string, std::vector<double>> history;
  /// history[key]; KeyError naming the keys there are when `key` is not one of them.
  const std::vector<double>& operator[](const std::string& key) const;
};

/// What compile() leaves on a model: train/trainer.cpp.
class Trainer;

namespace detail {
/// The trainer compile() attached to `model`; LayerStateError naming the model when it was not compiled.
Trainer& trainer_of(ModelBase& model);
Optimizer& optimizer_of(ModelBase& model);
void compile_model(ModelBase& model, OptimizerPtr optimizer, std::vector<Loss> losses, std::vector<Metric> metrics,
                   std::vector<Metric> weighted_metrics = {});
History fit_model(ModelBase& model, const std::vector<Array>& x, const std::vector<Array>& y,
                  const FitOptions& options);
Logs evaluate_model(ModelBase& model, const std::vector<Array>& x, const std::vector<Array>& y,
                    const EvaluateOptions& options);
History fit_dataset(ModelBase& model, const Dataset& data, const FitOptions& options);
Logs evaluate_dataset(ModelBase& model, const Dataset& data, const EvaluateOptions& options);
std::vector<Array> predict_dataset(ModelBase& model, const Dataset& data, std::int64_t steps);
Logs train_model_on_batch(ModelBase& model, const std::vector<Array>& x, const std::vector<Array>& y);
Logs test_model_on_batch(ModelBase& model, const std::vector<Array>& x, const std::vector<Array>& y);
int epochs_trained(ModelBase& model);
/// Defined in serialize/saving.cpp, the room above this one: the members below are Keras's spelling of
/// kiln::save_model, kiln::save_weights, kiln::load_weights and kiln::model_to_json (serialize/saving.hpp).
void save_model_file(const ModelBase& model, const std::string& path);
void save_weights_file(const ModelBase& model, const std::string& path);
void load_weights_file(ModelBase& model, const std::string& path);
std::string model_json(const ModelBase& model, int indent);
}  // namespace detail

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
    detail::compile_model(*this->layer_, create_optimizer(optimizer), {loss}, metrics, weighted_metrics);
  }
  /// Attaches the optimizer, `loss` (applied to every output) and `metrics` (logged by name, prefixed
  /// `output_<k>_` when the model has several outputs) for training. Compiling again starts afresh: a new
  /// optimizer state and epochs_trained() 0. LayerStateError when the model is not built and cannot build
  /// from data; ValueError for a null optimizer.
  void compile(OptimizerPtr optimizer, const Loss& loss, const std::vector<Metric>& metrics = {},
               const std::vector<Metric>& weighted_metrics = {}) const {
    detail::compile_model(*this->layer_, std::move(optimizer), {loss}, metrics, weighted_metrics);
  }
  /// One loss per output (or one for all); the logged "loss" is their sum. ValueError for another count.
  /// `weighted_metrics`, as Keras's, are weighed by fit's and evaluate's sample or class weights (the plain
  /// metrics are not); each is logged under its name, or weighted_<name> when a plain metric has that name.
  void compile(OptimizerPtr optimizer, const std::vector<Loss>& losses, const std::vector<Metric>& metrics,
               const std::vector<Metric>& weighted_metrics = {}) const {
    detail::compile_model(*this->layer_, std::move(optimizer), losses, metrics, weighted_metrics);
  }
  /// Trains on rows of `x` against `y` and returns every epoch's logs. Everything is checked before the first
  /// step: LayerStateError when not compiled, ValueError or ShapeError for data that does not fit the model
  /// (naming the array and shapes), ValueError or ConfigError for bad options. Arrays of another dtype are
  /// converted to the model's.
  History fit(const Array& x, const Array& y, const FitOptions& options = {}) const {
    return detail::fit_model(*this->layer_, {x}, {y}, options);
  }
  /// For several inputs or outputs: one array per input in `x`, one per output in `y`, with equal rows.
  History fit(const std::vector<Array>& x, const std::vector<Array>& y, const FitOptions& options = {}) const {
    return detail::fit_model(*this->layer_, x, y, options);
  }
  /// Trains on a batched Dataset (Dataset::batch): each element is a batch of x, y and, optionally, sample
  /// weights. Keras's rules for datasets: the dataset shuffles itself (FitOptions::shuffle and batch_size are
  /// not used), steps_per_epoch takes a fixed number of batches per epoch, validation_data(Dataset) and
  /// validation_steps validate. The first batch is read and checked before any step; a later batch that does
  /// not fit throws, naming it. The same seeds give the same weights, prefetch on or off.
  History fit(const Dataset& data, const FitOptions& options = {}) const {
    return detail::fit_dataset(*this->layer_, data, options);
  }
  /// The loss and metrics over the batches of a Dataset (all of them, or EvaluateOptions::steps).
  Logs evaluate(const Dataset& data, const EvaluateOptions& options = {}) const {
    return detail::evaluate_dataset(*this->layer_, data, options);
  }
  /// The outputs for the x of every batch of a Dataset (or of its first `steps`), one array per output,
  /// rows in the dataset's order.
  std::vector<Array> predict(const Dataset& data, std::int64_t steps = -1) const {
    return detail::predict_dataset(*this->layer_, data, steps);
  }
  using ModelHandle<M>::predict;
  /// The loss and metrics in inference mode (dropout off), as means over every row, run in batches of
  /// `batch_size` (default 32; ValueError when not positive). Leaves the weights and the optimizer as they
  /// are; LayerStateError when not compiled. Several threads may evaluate at once.
  Logs evaluate(const Array& x, const Array& y, std::int64_t batch_size = 32) const {
    return detail::evaluate_model(*this->layer_, {x}, {y}, EvaluateOptions().batch_size(batch_size));
  }
  /// For several inputs or outputs: one array per input in `x`, one per output in `y`.
  Logs evaluate(const std::vector<Array>& x, const std::vector<Array>& y, std::int64_t batch_size = 32) const {
    return detail::evaluate_model(*this->layer_, x, y, EvaluateOptions().batch_size(batch_size));
  }
  /// With Keras's other arguments: sample weights.
  Logs evaluate(const Array& x, const Array& y, const EvaluateOptions& options) const {
    return detail::evaluate_model(*this->layer_, {x}, {y}, options);
  }
  /// With Keras's other arguments, for several inputs or outputs.
  Logs evaluate(const std::vector<Array>& x, const std::vector<Array>& y, const EvaluateOptions& options) const {
    return detail::evaluate_model(*this->layer_, x, y, options);
  }
  /// One training step on all of `x` and `y` as a single batch; returns its loss and metrics, computed
  /// before the step's update. No callbacks run and epochs_trained() does not change.
  Logs train_on_batch(const Array& x, const Array& y) const {
    return detail::train_model_on_batch(*this->layer_, {x}, {y});
  }
  /// train_on_batch for a model of several inputs or outputs: one array per input and per output, in order.
  Logs train_on_batch(const std::vector<Array>& x, const std::vector<Array>& y) const {
    return detail::train_model_on_batch(*this->layer_, x, y);
  }
  /// The optimizer compile() was given: its state (slots, iterations) is the run's state besides the weights.
  Optimizer& optimizer() const { return detail::optimizer_of(*this->layer_); }
  /// The loss and metrics of `x` and `y` as a single batch, in inference mode, without a training step.
  Logs test_on_batch(const Array& x, const Array& y) const {
    return detail::test_model_on_batch(*this->layer_, {x}, {y});
  }
  /// test_on_batch for a model of several inputs or outputs: one array per input and per output, in order.
  Logs test_on_batch(const std::vector<Array>& x, const std::vector<Array>& y) const {
    return detail::test_model_on_batch(*this->layer_, x, y);
  }
  /// Epochs fit() has finished, restored by load_model: pass it as FitOptions().initial_epoch to resume.
  int epochs_trained() const { return detail::epochs_trained(*this->layer_); }

  // ---- saving (serialize/saving.hpp) --------------------------------------------------------------------
  /// Config, weights, optimizer state and progress in one checked file, written atomically.
  void save(const std::string& path) const { detail::save_model_file(*this->layer_, path); }
  /// The weights alone, by path ("dense/kernel"), in one checked file written atomically. LayerStateError
  /// when the model is not built; SerializationError when the file cannot be written.
  void save_weights(const std::string& path) const { detail::save_weights_file(*this->layer_, path); }
  /// Assigns the weights of a save_weights (or save) file, matched by path. Every shape is checked before any
  /// weight is set, so a file that does not fit (ValueError or ShapeError) leaves the model unchanged;
  /// SerializationError for a damaged or foreign file, LayerStateError when the model is not built.
  void load_weights(const std::string& path) const { detail::load_weights_file(*this->layer_, path); }
  /// The architecture as Keras's JSON, without weights: `indent` spaces (0 to 16, 0 for one line);
  /// kiln::model_from_json makes a new model of it with fresh weights.
  std::string to_json(int indent = 2) const { return detail::model_json(*this->layer_, indent); }
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
