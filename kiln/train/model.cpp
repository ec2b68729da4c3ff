#include <kiln/train/model.hpp>

#include <kiln/core/error.hpp>
#include <kiln/train/trainer.hpp>

namespace kiln {

const std::vector<double>& History::operator[](const std::string& key) const {
  const auto found = history.find(key);
  if (found == history.end()) {
    std::string known;
    for (const auto& [name, values] : history) known += (known.empty() ? "" : ", ") + name;
    throw KeyError("History has no '" + key + "' (it has " + known + ")");
  }
  return found->second;
}

namespace detail {

Trainer& trainer_of(ModelBase& model) {
  auto* trainer = static_cast<Trainer*>(model.compiled_state().get());
  if (!trainer)
    throw LayerStateError(model.describe() + " is not compiled; call compile(optimizer, loss) before training");
  return *trainer;
}

Optimizer& optimizer_of(ModelBase& model) { return trainer_of(model).optimizer(); }

// compile replaces the trainer that evaluate calls on other threads would be using: it takes the model
// alone, as fit does.
void compile_model(ModelBase& model, OptimizerPtr optimizer, std::vector<Loss> losses, std::vector<Metric> metrics,
                   std::vector<Metric> weighted_metrics) {
  if (!model.built() && !model.builds_from_data())
    throw LayerStateError(model.describe() + " is not built; give it an Input or build it before compile");
  const ModelBase::Use use = model.use_for_training("compile");
  model.set_compiled_state(std::make_shared<Trainer>(model, std::move(optimizer), std::move(losses), std::move(metrics),
                                                     std::move(weighted_metrics)));
}

History fit_model(ModelBase& model, const std::vector<Array>& x, const std::vector<Array>& y,
                  const FitOptions& options) {
  const ModelBase::Use use = model.use_for_training("fit");
  return trainer_of(model).fit(x, y, options);
}

Logs evaluate_model(ModelBase& model, const std::vector<Array>& x, const std::vector<Array>& y,
                    const EvaluateOptions& options) {
  const ModelBase::Use use = model.use_for_inference("evaluate");
  return trainer_of(model).evaluate(x, y, options);
}

Logs train_model_on_batch(ModelBase& model, const std::vector<Array>& x, const std::vector<Array>& y) {
  const ModelBase::Use use = model.use_for_training("train_on_batch");
  return trainer_of(model).train_on_batch(x, y);
}

Logs test_model_on_batch(ModelBase& model, const std::vector<Array>& x, const std::vector<Array>& y) {
  const ModelBase::Use use = model.use_for_inference("test_on_batch");
  return trainer_of(model).test_on_batch(x, y);
}

int epochs_trained(ModelBase& model) {
  const auto* trainer = static_cast<const Trainer*>(model.compiled_state().get());
  return trainer ? trainer->epochs_trained() : 0;
}

}  // namespace detail

Model::Model(const Tensor& input, const Tensor& output, const std::string& name)
    : Model(std::vector<Tensor>{input}, std::vector<Tensor>{output}, name) {}

Model::Model(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs, const std::string& name)
    : TrainableModel(std::static_pointer_cast<ModelBase>(std::make_shared<FunctionalModel>(inputs, outputs, name))) {}

Sequential::Sequential(const std::string& name)
    : TrainableModel(std::make_shared<SequentialModel>(name.empty() ? Config() : Config{{"name", name}})) {}

void SequentialItem::add_to(SequentialModel& model) const {
  if (is_input_) return model.add_input(input_);
  if (is_shape_) return model.add_input(shape_);
  model.add(layer_);
}

Sequential::Sequential(const std::vector<SequentialItem>& items, const std::string& name) : Sequential(name) {
  for (const SequentialItem& item : items) item.add_to(*layer_);
}

}  // namespace kiln
