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
#include <kiln/layers/model.hpp>
#include <kiln/optim/losses.hpp>
#include <kiln/optim/metrics.hpp>
#include <kiln/optim/optimizer.hpp>
#include <kiln/train/callbacks.hpp>

namespace kiln {

class FitOptions;
class Program;
struct History;

class Trainer : public CompiledState {
 public:
  Trainer(ModelBase& model, OptimizerPtr optimizer, std::vector<Loss> losses, std::vector<Metric> metrics);
  ~Trainer() override;

  History fit(const std::vector<Array>& x, const std::vector<Array>& y, const FitOptions& options);
  Logs evaluate(const std::vector<Array>& x, const std::vector<Array>& y, std::int64_t batch_size);
  Logs train_on_batch(const std::vector<Array>& x, const std::vector<Array>& y);
  Logs test_on_batch(const std::vector<Array>& x, const std::vector<Array>& y);

  Optimizer& optimizer() { return *optimizer_; }
  const std::vector<Loss>& losses() const { return losses_; }
  const std::vector<Metric>& metrics() const { return metrics_; }
  /// Epochs finished by fit() (counted from initial_epoch), saved with the model so a reloaded run knows
  /// where to resume: fit(..., FitOptions().initial_epoch(model.epochs_trained())).
  int epochs_trained() const { return epochs_trained_; }
  void set_epochs_trained(int epochs) { epochs_trained_ = epochs; }

 private:
  /// What compile() makes of the model for one kind of batch: the training graph (forward, losses,
  /// gradients, the optimizer's updates) or the evaluation graph, with their programs.
  struct Compiled;
  class Fit;  ///< one call of fit()
  /// The compiled graph for targets of these row shapes, made when none fits. Evaluation runs on several
  /// threads at once (each with a Program of its own from the graph's pool); a graph replaced for other
  /// shapes lives on for the callers that hold it.
  std::shared_ptr<Compiled> compiled_for(const std::vector<Array>& x, const std::vector<Array>& y, bool training);
  std::shared_ptr<Compiled> compile_for(const std::vector<Array>& x, const std::vector<Array>& y, bool training);
  /// Data checks before any batch runs: counts, equal rows, shapes that fit; converts dtypes.
  void check_data(std::vector<Array>& x, std::vector<Array>& y, const std::string& what) const;
  /// One batch through a compiled graph's program; adds each value times the batch's rows into `sums`.
  void run_batch(const Compiled& compiled, Program& program, const std::vector<Array>& x, const std::vector<Array>& y,
                 std::vector<double>& sums);
  Logs means(const Compiled& compiled, const std::vector<double>& sums, std::int64_t rows) const;
  Logs one_batch(const std::vector<Array>& x, const std::vector<Array>& y, bool training);
  Logs evaluate_checked(const std::vector<Array>& x, const std::vector<Array>& y, std::int64_t batch_size);

  ModelBase& model_;
  OptimizerPtr optimizer_;
  std::vector<Loss> losses_;
  std::vector<Metric> metrics_;
  std::mutex steps_mutex_;
  std::shared_ptr<Compiled> training_, evaluation_;
  int epochs_trained_ = 0;
};

}  // namespace kiln
