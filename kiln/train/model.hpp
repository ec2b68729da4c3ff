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

namespace kiln {

class FitOptions {
 public:
  FitOptions& batch_size(std::int64_t value) {
    batch_size_ = value;
    return *this;
  }
  FitOptions& epochs(int value) {
    epochs_ = value;
    return *this;
  }
  /// The last fraction of the rows (before any shuffling), as Keras takes it.
  FitOptions& validation_split(double value) {
    validation_split_ = value;
    return *this;
  }
  FitOptions& validation_data(std::vector<Array> x, std::vector<Array> y) {
    validation_x_ = std::move(x);
    validation_y_ = std::move(y);
    return *this;
  }
  FitOptions& validation_data(const Array& x, const Array& y) {
    return validation_data(std::vector<Array>{x}, std::vector<Array>{y});
  }
  FitOptions& shuffle(bool value) {
    shuffle_ = value;
    return *this;
  }
  FitOptions& seed(std::uint64_t value) {
    seed_ = value;
    return *this;
  }  // the shuffling order
  FitOptions& callback(CallbackPtr value) {
    callbacks_.push_back(std::move(value));
    return *this;
  }
  /// 0 silent, 1 a live bar on a terminal (one line per epoch otherwise), 2 one line per epoch.
  FitOptions& verbose(int value) {
    verbose_ = value;
    return *this;
  }
  FitOptions& initial_epoch(int value) {
    initial_epoch_ = value;
    return *this;
  }

 private:
  friend class Trainer;
  std::int64_t batch_size_ = 32;
  int epochs_ = 1;
  double validation_split_ = 0.0;
  std::vector<Array> validation_x_, validation_y_;
  bool shuffle_ = true;
  std::uint64_t seed_ = 0;
  std::vector<CallbackPtr> callbacks_;
  int verbose_ = 1;
  int initial_epoch_ = 0;
};

/// Every epoch's logs: history["loss"][e], history["val_mae"][e], ...
struct History {
  std::vector<int> epochs;
  std::map<std::string, std::vector<double>> history;
  const std::vector<double>& operator[](const std::string& key) const;
};

/// What compile() leaves on a model: train/trainer.cpp.
class Trainer;

namespace detail {
/// The trainer compile() attached to `model`; LayerStateError naming the model when it was not compiled.
Trainer& trainer_of(ModelBase& model);
Optimizer& optimizer_of(ModelBase& model);
void compile_model(ModelBase& model, OptimizerPtr optimizer, std::vector<Loss> losses, std::vector<Metric> metrics);
History fit_model(ModelBase& model, const std::vector<Array>& x, const std::vector<Array>& y,
                  const FitOptions& options);
Logs evaluate_model(ModelBase& model, const std::vector<Array>& x, const std::vector<Array>& y,
                    std::int64_t batch_size);
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

template <class M>
class TrainableModel : public ModelHandle<M> {
 public:
  using ModelHandle<M>::ModelHandle;

  /// The optimizer by name ("adam") with its defaults, or an object (kiln::create_optimizer("adam", config)).
  void compile(const std::string& optimizer, const Loss& loss, const std::vector<Metric>& metrics = {}) const {
    detail::compile_model(*this->layer_, create_optimizer(optimizer), {loss}, metrics);
  }
  void compile(OptimizerPtr optimizer, const Loss& loss, const std::vector<Metric>& metrics = {}) const {
    detail::compile_model(*this->layer_, std::move(optimizer), {loss}, metrics);
  }
  void compile(OptimizerPtr optimizer, const std::vector<Loss>& losses, const std::vector<Metric>& metrics) const {
    detail::compile_model(*this->layer_, std::move(optimizer), losses, metrics);
  }
  History fit(const Array& x, const Array& y, const FitOptions& options = {}) const {
    return detail::fit_model(*this->layer_, {x}, {y}, options);
  }
  History fit(const std::vector<Array>& x, const std::vector<Array>& y, const FitOptions& options = {}) const {
    return detail::fit_model(*this->layer_, x, y, options);
  }
  Logs evaluate(const Array& x, const Array& y, std::int64_t batch_size = 32) const {
    return detail::evaluate_model(*this->layer_, {x}, {y}, batch_size);
  }
  Logs evaluate(const std::vector<Array>& x, const std::vector<Array>& y, std::int64_t batch_size = 32) const {
    return detail::evaluate_model(*this->layer_, x, y, batch_size);
  }
  Logs train_on_batch(const Array& x, const Array& y) const {
    return detail::train_model_on_batch(*this->layer_, {x}, {y});
  }
  /// The optimizer compile() was given: its state (slots, iterations) is the run's state besides the weights.
  Optimizer& optimizer() const { return detail::optimizer_of(*this->layer_); }
  Logs test_on_batch(const Array& x, const Array& y) const {
    return detail::test_model_on_batch(*this->layer_, {x}, {y});
  }
  /// Epochs fit() has finished, restored by load_model: pass it as FitOptions().initial_epoch to resume.
  int epochs_trained() const { return detail::epochs_trained(*this->layer_); }

  // ---- saving (serialize/saving.hpp) --------------------------------------------------------------------
  /// Config, weights, optimizer state and progress in one checked file, written atomically.
  void save(const std::string& path) const { detail::save_model_file(*this->layer_, path); }
  void save_weights(const std::string& path) const { detail::save_weights_file(*this->layer_, path); }
  void load_weights(const std::string& path) const { detail::load_weights_file(*this->layer_, path); }
  std::string to_json(int indent = 2) const { return detail::model_json(*this->layer_, indent); }
};

class Model : public TrainableModel<ModelBase> {
 public:
  Model(const Tensor& input, const Tensor& output, const std::string& name = "");
  Model(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs, const std::string& name = "");
  Model(std::shared_ptr<ModelBase> model) : TrainableModel(std::move(model)) {}
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
  void add_to(SequentialModel& model) const;

 private:
  LayerPtr layer_;
  Tensor input_;
  bool is_input_ = false;
  Shape shape_;
  bool is_shape_ = false;
};

class Sequential : public TrainableModel<SequentialModel> {
 public:
  Sequential(const std::string& name = "");
  Sequential(const std::vector<SequentialItem>& items, const std::string& name = "");
  Sequential(std::shared_ptr<SequentialModel> model) : TrainableModel(std::move(model)) {}  ///< from layer_from_config
  Sequential& add(const SequentialItem& item) {
    item.add_to(*layer_);
    return *this;
  }
  void build(const Shape& input_shape) const { layer_->build_for(input_shape); }
};

}  // namespace kiln
