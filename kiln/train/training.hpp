#pragma once
// Keras's training calls on a model: compile, fit, evaluate, train_on_batch, test_on_batch. kiln::Model and
// kiln::Sequential (models/model.hpp) are the way users reach them; these take the model itself.
//
// Each call claims the model as Keras users expect (ModelBase::Use): training calls take it alone,
// inference calls may run on several threads at once. compile() attaches a Trainer to the model
// (train/trainer.hpp), which every other call finds there.
#include <cstdint>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/data/dataset.hpp>
#include <kiln/layers/model_base.hpp>
#include <kiln/optim/losses.hpp>
#include <kiln/optim/metrics.hpp>
#include <kiln/optim/optimizer.hpp>
#include <kiln/train/callbacks.hpp>
#include <kiln/train/fit_options.hpp>

namespace kiln {

/// Keras's compile: attaches a new Trainer with `optimizer`, one loss per output (or one for all) and the
/// metrics, replacing any earlier one (a new optimizer state, epochs_trained() 0). LayerStateError when the
/// model is not built and cannot build from data; ValueError for a null optimizer or another count of losses.
void compile_model(ModelBase& model, OptimizerPtr optimizer, std::vector<Loss> losses, std::vector<Metric> metrics,
                   std::vector<Metric> weighted_metrics = {});
/// Keras's fit on arrays: one per model input in `x`, one per output in `y`.
History fit_model(ModelBase& model, const std::vector<Array>& x, const std::vector<Array>& y,
                  const FitOptions& options);
/// Keras's fit on a batched Dataset.
History fit_dataset(ModelBase& model, const Dataset& data, const FitOptions& options);
/// Keras's evaluate on arrays.
Logs evaluate_model(ModelBase& model, const std::vector<Array>& x, const std::vector<Array>& y,
                    const EvaluateOptions& options);
/// Keras's evaluate on a batched Dataset.
Logs evaluate_dataset(ModelBase& model, const Dataset& data, const EvaluateOptions& options);
/// Keras's predict on a batched Dataset (needs no compile): one array per output, rows in the dataset's order.
std::vector<Array> predict_dataset(ModelBase& model, const Dataset& data, std::int64_t steps);
/// Keras's train_on_batch: one step on all the rows as one batch; the logs are computed before the update.
Logs train_model_on_batch(ModelBase& model, const std::vector<Array>& x, const std::vector<Array>& y);
/// Keras's test_on_batch: the loss and metrics of the rows as one batch, in inference mode.
Logs test_model_on_batch(ModelBase& model, const std::vector<Array>& x, const std::vector<Array>& y);
/// Epochs fit() has finished since compile (restored by load_model); 0 for a model not compiled.
int epochs_trained(const ModelBase& model);

}  // namespace kiln
