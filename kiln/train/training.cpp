#include <kiln/train/training.hpp>

#include <cstring>

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

Trainer* trainer_of(const ModelBase& model) { return model.attachment<Trainer>().get(); }

Trainer& compiled_trainer(const ModelBase& model) {
  Trainer* trainer = trainer_of(model);
  if (!trainer)
    throw LayerStateError(model.describe() + " is not compiled; call compile(optimizer, loss) before training");
  return *trainer;
}

// compile replaces the trainer that evaluate calls on other threads would be using: it takes the model
// alone, as fit does.
void compile_model(ModelBase& model, OptimizerPtr optimizer, std::vector<Loss> losses, std::vector<Metric> metrics,
                   std::vector<Metric> weighted_metrics) {
  if (!model.built() && !model.builds_from_data())
    throw LayerStateError(model.describe() + " is not built; give it an Input or build it before compile");
  const ModelBase::Use use = model.use_for_training("compile");
  model.attach(std::make_shared<Trainer>(model, std::move(optimizer), std::move(losses), std::move(metrics),
                                                     std::move(weighted_metrics)));
}

History fit_model(ModelBase& model, const std::vector<Array>& x, const std::vector<Array>& y,
                  const FitOptions& options) {
  const ModelBase::Use use = model.use_for_training("fit");
  return compiled_trainer(model).fit(x, y, options);
}

Logs evaluate_model(ModelBase& model, const std::vector<Array>& x, const std::vector<Array>& y,
                    const EvaluateOptions& options) {
  const ModelBase::Use use = model.use_for_inference("evaluate");
  return compiled_trainer(model).evaluate(x, y, options);
}

History fit_dataset(ModelBase& model, const Dataset& data, const FitOptions& options) {
  const ModelBase::Use use = model.use_for_training("fit");
  return compiled_trainer(model).fit(data, options);
}

Logs evaluate_dataset(ModelBase& model, const Dataset& data, const EvaluateOptions& options) {
  const ModelBase::Use use = model.use_for_inference("evaluate");
  return compiled_trainer(model).evaluate(data, options);
}

std::vector<Array> predict_dataset(ModelBase& model, const Dataset& data, std::int64_t steps) {
  // predict needs no compile: the model's own predict, batch by batch.
  if (!data.batched()) throw ValueError(model.describe() + ".predict: the dataset is not batched; call batch(n)");
  if (steps == 0 || steps < -1) throw ValueError(model.describe() + ".predict: steps must be positive, got " + std::to_string(steps));
  if (steps < 0 && data.cardinality() == Dataset::infinite)
    throw ValueError(model.describe() + ".predict: the dataset repeats without end; give steps");
  std::vector<std::vector<Array>> parts;
  Dataset::Iterator batches = data.iterate();
  Example batch;
  for (std::int64_t step = 0; steps < 0 || step < steps; ++step) {
    if (!batches.next(batch)) {
      if (steps >= 0)
        throw ValueError(model.describe() + ".predict: the dataset ran out after " + std::to_string(step) +
                         " batches, fewer than steps " + std::to_string(steps));
      break;
    }
    parts.push_back(model.predict(batch.x, batch.x.empty() ? 1 : batch.x[0].shape()[0]));
  }
  if (parts.empty()) throw ValueError(model.describe() + ".predict: the dataset is empty");
  std::vector<Array> outputs;
  for (std::size_t k = 0; k < parts[0].size(); ++k) {
    std::int64_t rows = 0;
    for (const std::vector<Array>& part : parts) rows += part[k].shape()[0];
    std::vector<std::int64_t> dims = parts[0][k].shape().dims();
    dims[0] = rows;
    Array joined{Shape(dims), parts[0][k].dtype()};
    std::size_t offset = 0;
    for (const std::vector<Array>& part : parts) {
      std::memcpy(static_cast<unsigned char*>(joined.raw()) + offset, part[k].raw(), part[k].nbytes());
      offset += part[k].nbytes();
    }
    outputs.push_back(joined);
  }
  return outputs;
}

Logs train_model_on_batch(ModelBase& model, const std::vector<Array>& x, const std::vector<Array>& y) {
  const ModelBase::Use use = model.use_for_training("train_on_batch");
  return compiled_trainer(model).train_on_batch(x, y);
}

Logs test_model_on_batch(ModelBase& model, const std::vector<Array>& x, const std::vector<Array>& y) {
  const ModelBase::Use use = model.use_for_inference("test_on_batch");
  return compiled_trainer(model).test_on_batch(x, y);
}

int epochs_trained(const ModelBase& model) {
  const Trainer* trainer = trainer_of(model);
  return trainer ? trainer->epochs_trained() : 0;
}

}  // namespace kiln
