#pragma once
// The graph of one training or evaluation step, made by the Trainer from compile()'s losses and metrics and
// the first batch's shapes (train/step_graph.cpp), and the sums of what it logs over an epoch's batches.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/detail/program_pool.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/program.hpp>
#include <kiln/core/tensor.hpp>
#include <kiln/layers/model_base.hpp>
#include <kiln/optim/losses.hpp>
#include <kiln/optim/metrics.hpp>
#include <kiln/optim/optimizer.hpp>

namespace kiln::detail {

/// One step's graph: the model's calls replayed on placeholders, the losses and metrics of its outputs and,
/// for training, the gradients and the optimizer's updates; planned as a pool of Programs (one per thread).
struct StepGraph {
  Graph graph;
  std::vector<Tensor> inputs, targets;
  std::vector<Tensor> sample_weights;  ///< one per output, or none: a graph without weights
  /// The loss or a metric, as fit logs it: its batch's sums, and its value from their totals.
  struct Logged {
    std::string name;
    std::vector<Tensor> statistics;  ///< fetched after each batch and added up on the host
    std::vector<Tensor> totals;      ///< float64 placeholders of the statistics' shapes, fed the sums
    Tensor result;                   ///< from the totals: () or (n,), logged as name_0 ... name_<n-1>
  };
  std::vector<Logged> logged;  ///< "loss", then the metrics, as they appear in logs
  std::unique_ptr<ProgramPool> programs;
  bool training = false;
  /// A distributed training graph: `programs` fetch the gradients (after the logged statistics) and run no
  /// optimizer update; `apply` runs the updates from the `reduced` placeholders, fed the gradients summed
  /// across processes. Both lists are parallel to the trainable weights; empty for a weight without gradient.
  bool distributed = false;
  std::vector<Tensor> gradients, reduced;
  std::unique_ptr<Program> apply;
};

/// Each logged value's sums over the batches of an epoch or evaluation, and the program that turns them into
/// the values (over the step graph's totals placeholders): one caller's, made at its first batch.
struct StepTotals {
  std::vector<Array> sums;  ///< float64, one per statistic of each logged value in order
  std::unique_ptr<Program> results;

  void reset() {
    for (Array& sum : sums) std::fill_n(static_cast<double*>(sum.raw()), sum.size(), 0.0);
  }
};

/// What a step graph is made of: what compile() was given.
struct StepRecipe {
  ModelBase& model;
  Optimizer& optimizer;
  const std::vector<Loss>& losses;  ///< one for every output, or one per output
  const std::vector<Metric>& metrics;
  const std::vector<Metric>& weighted_metrics;
};

/// The rows of a batch of arrays: the first array's first dimension (0 for none).
inline std::int64_t num_rows(const std::vector<Array>& arrays) { return arrays.empty() ? 0 : arrays[0].shape()[0]; }

/// `array`'s shape with its batch (first) dimension unknown: what a placeholder for its batches is.
Shape with_unknown_batch(const Array& array);

/// The step graph for batches shaped as x, y and w (w: one sample-weight array per output, or none), in
/// these steps: the model on input placeholders, the losses and metrics against target (and weight)
/// placeholders, the penalties (regularizers, activity losses), what is logged, and for training the updates
/// (gradients, the optimizer's assignments, constraints); then its programs are planned. `distributed`: a
/// training graph whose gradients are fetched and whose updates read them from placeholders
/// (StepGraph::apply), so they can be summed across processes in between.
std::shared_ptr<StepGraph> build_step_graph(const StepRecipe& recipe, const std::vector<Array>& x,
                                            const std::vector<Array>& y, const std::vector<Array>& w, bool training,
                                            bool distributed);

}  // namespace kiln::detail
