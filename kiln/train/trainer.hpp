#pragma once
// Trainer: what compile() attaches to a model. It owns the training graph (the model's calls
// replayed in training mode, the losses, the gradients and the optimizer's updates, planned as one
// Program) and the evaluation graph, both made from the data's shapes at first use.
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/layers/model_base.hpp>
#include <kiln/optim/losses.hpp>
#include <kiln/optim/metrics.hpp>
#include <kiln/optim/optimizer.hpp>
#include <kiln/train/callbacks.hpp>

namespace kiln {

class Dataset;
class EvaluateOptions;
namespace detail {
struct StepGraph;
struct StepTotals;
}  // namespace detail
class FitOptions;
class Program;
struct History;

/// What compile() attaches to a model (ModelBase::attach): the optimizer, losses and metrics, and the
/// graphs they train and evaluate with. Users reach it through kiln::Model and kiln::Sequential, whose calls
/// also take the model's thread checks (ModelBase::Use); the calls here do not.
class Trainer {
 public:
  /// For `model`, which must outlive it (the model owns it). ValueError for a null optimizer, no loss, or a
  /// number of losses other than 1 or the model's number of outputs.
  Trainer(ModelBase& model, OptimizerPtr optimizer, std::vector<Loss> losses, std::vector<Metric> metrics,
          std::vector<Metric> weighted_metrics = {});
  ~Trainer();

  /// TrainableModel::fit without the thread check.
  History fit(const std::vector<Array>& x, const std::vector<Array>& y, const FitOptions& options);
  /// TrainableModel::fit of a Dataset without the thread check.
  History fit(const Dataset& data, const FitOptions& options);
  /// TrainableModel::evaluate of a Dataset without the thread check.
  Logs evaluate(const Dataset& data, const EvaluateOptions& options);
  /// TrainableModel::evaluate without the thread check.
  Logs evaluate(const std::vector<Array>& x, const std::vector<Array>& y, const EvaluateOptions& options);
  /// TrainableModel::train_on_batch without the thread check.
  Logs train_on_batch(const std::vector<Array>& x, const std::vector<Array>& y);
  /// TrainableModel::test_on_batch without the thread check.
  Logs test_on_batch(const std::vector<Array>& x, const std::vector<Array>& y);

  /// The optimizer compile() was given.
  Optimizer& optimizer() { return *optimizer_; }
  const Optimizer& optimizer() const { return *optimizer_; }  ///< the same, to read
  /// The losses compile() was given: a single one for every output, or one per output.
  const std::vector<Loss>& losses() const { return losses_; }
  /// The metrics compile() was given, computed for every output.
  const std::vector<Metric>& metrics() const { return metrics_; }
  /// The metrics weighed by sample and class weights (compile's weighted_metrics).
  const std::vector<Metric>& weighted_metrics() const { return weighted_metrics_; }
  /// Epochs finished by fit() (counted from initial_epoch), saved with the model so a reloaded run knows
  /// where to resume: fit(..., FitOptions().initial_epoch(model.epochs_trained())).
  int epochs_trained() const { return epochs_trained_; }
  /// Sets epochs_trained(), as load_model does from the file; fit() sets it after each epoch.
  void set_epochs_trained(int epochs) { epochs_trained_ = epochs; }

 private:
  class Fit;  ///< one call of fit(), in parts: train/detail/fit.hpp
  /// The step graph (train/detail/step_graph.hpp) for targets of these row shapes, made when none fits.
  /// Evaluation runs on several threads at once (each with a Program of its own from the graph's pool); a
  /// graph replaced for other shapes lives on for the callers that hold it. `w` holds the sample weights, one
  /// array per output, or nothing. `distributed`: a training graph whose gradients are fetched and whose
  /// updates read them from placeholders (StepGraph::apply), so they can be summed across processes.
  std::shared_ptr<detail::StepGraph> step_graph_for(const std::vector<Array>& x, const std::vector<Array>& y,
                                                    const std::vector<Array>& w, bool training,
                                                    bool distributed = false);
  /// Data checks before any batch runs: counts, equal rows, shapes that fit; converts dtypes.
  void check_data(std::vector<Array>& x, std::vector<Array>& y, const std::string& what) const;
  /// The sample weights checked against checked data and made the model's dtype (sample_weights.cpp).
  std::vector<Array> check_weights(const std::vector<Array>& w, const std::vector<Array>& y,
                                   const std::string& what) const;
  /// One batch through a step_graph graph's program; adds each logged value's statistics into `totals`.
  void run_batch(const detail::StepGraph& step_graph, Program& program, const std::vector<Array>& x, const std::vector<Array>& y,
                 const std::vector<Array>& w, detail::StepTotals& totals);
  /// The logs of the batches added into `totals` so far.
  Logs means(detail::StepGraph& step_graph, detail::StepTotals& totals) const;
  /// `batch_size`, or the model's fixed batch size (a stateful model's Input({32, ...})) when it has one;
  /// ValueError naming `what` when the rows do not split into batches of it.
  std::int64_t batch_size_for(std::int64_t batch_size, std::int64_t rows, const std::string& what) const;
  /// The batches of a dataset (`steps` of them, or all: -1), as `what` ("evaluate") names the call.
  Logs evaluate_data(const Dataset& data, std::int64_t steps, const std::string& what);
  Logs one_batch(const std::vector<Array>& x, const std::vector<Array>& y, bool training);
  Logs evaluate_checked(const std::vector<Array>& x, const std::vector<Array>& y, const std::vector<Array>& w,
                        std::int64_t batch_size);
  /// Zero sums of every logged statistic of `step_graph` in `totals` (a rank without rows adds nothing).
  static void zero_totals(const detail::StepGraph& step_graph, detail::StepTotals& totals);
  /// Rank `rank` of `ranks`'s part of a distributed fit's validation, added into `totals`: its rows of the
  /// arrays, or its rows of each batch of `data` (when not null). Returns the evaluation graph used.
  std::shared_ptr<detail::StepGraph> evaluate_part(const std::vector<Array>& x, const std::vector<Array>& y,
                                          const std::vector<Array>& w, std::int64_t batch_size, const Dataset* data,
                                          std::int64_t steps, int rank, int ranks, detail::StepTotals& totals);

  ModelBase& model_;
  OptimizerPtr optimizer_;
  std::vector<Loss> losses_;
  std::vector<Metric> metrics_, weighted_metrics_;
  std::mutex steps_mutex_;
  std::shared_ptr<detail::StepGraph> training_, evaluation_;
  int epochs_trained_ = 0;
};

/// The Trainer compile() attached to `model`, or nullptr when it is not step_graph: the one way to reach it.
Trainer* trainer_of(const ModelBase& model);
/// The same for a model that must be step_graph: LayerStateError naming the model, and saying to call
/// compile, when it is not.
Trainer& compiled_trainer(const ModelBase& model);

}  // namespace kiln
