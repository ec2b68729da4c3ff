#include <kiln/train/trainer.hpp>

#include <algorithm>
#include <utility>

#include <kiln/core/detail/program_pool.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/program.hpp>
#include <kiln/layers/model_base.hpp>
#include <kiln/train/detail/data_parallel.hpp>
#include <kiln/train/detail/sample_weights.hpp>
#include <kiln/train/detail/step_graph.hpp>
#include <kiln/train/fit_options.hpp>

namespace kiln {

namespace {

using detail::num_rows;

// The checks before evaluating `steps` batches of a dataset (-1: all of it), named by `who`.
void check_evaluation_steps(const Dataset& data, std::int64_t steps, const std::string& who) {
  if (!data.batched()) throw ValueError(who + ": the dataset's elements are single samples; call batch(n) on it first");
  if (steps == 0 || steps < -1) throw ValueError(who + ": steps must be positive, got " + std::to_string(steps));
  if (steps < 0 && data.cardinality() == Dataset::infinite)
    throw ValueError(who + ": the dataset repeats without end; give steps");
  if (steps > 0 && data.cardinality() >= 0 && steps > data.cardinality())
    throw ValueError(who + ": steps " + std::to_string(steps) + " but the dataset has " +
                     std::to_string(data.cardinality()) + " batches");
}

}  // namespace

Trainer::Trainer(ModelBase& model, OptimizerPtr optimizer, std::vector<Loss> losses, std::vector<Metric> metrics,
                 std::vector<Metric> weighted_metrics)
    : model_(model),
      optimizer_(std::move(optimizer)),
      losses_(std::move(losses)),
      metrics_(std::move(metrics)),
      weighted_metrics_(std::move(weighted_metrics)) {
  if (!optimizer_) throw ValueError(model_.describe() + ": compile needs an optimizer");
  if (losses_.empty()) throw ValueError(model_.describe() + ": compile needs a loss");
  if (losses_.size() != 1 && losses_.size() != model_.num_outputs())
    throw ValueError(model_.describe() + ": compile got " + std::to_string(losses_.size()) + " losses for " +
                     std::to_string(model_.num_outputs()) + " outputs; give one, or one per output");
}

Trainer::~Trainer() = default;

// ---- checks before anything runs -----------------------------------------------------------------------------

void Trainer::check_data(std::vector<Array>& x, std::vector<Array>& y, const std::string& what) const {
  const std::string who = model_.describe() + "." + what;
  // An unbuilt Sequential builds from its first data, as in Keras.
  if (!model_.build_from_data(x))
    throw LayerStateError(who + ": " + model_.describe() + " is not built and cannot build from this data");
  if (x.size() != model_.num_inputs())
    throw ValueError(who + ": the model has " + std::to_string(model_.num_inputs()) + " inputs, got " +
                     std::to_string(x.size()) + " arrays");
  if (y.size() != model_.num_outputs())
    throw ValueError(who + ": the model has " + std::to_string(model_.num_outputs()) + " outputs, got " +
                     std::to_string(y.size()) + " target arrays");
  const std::vector<Shape> input_shapes = model_.input_shapes();
  const std::vector<Shape> output_shapes = model_.model_output_shapes();
  const std::vector<DType> input_dtypes = model_.input_dtypes();
  auto check_rows = [&](const Array& array, const std::string& label) {
    if (array.shape().rank() == 0)
      throw ShapeError(who + ": " + label + " needs a first axis of samples, got a scalar");
    if (array.shape()[0] != x[0].shape()[0])
      throw ValueError(who + ": x has " + std::to_string(x[0].shape()[0]) + " samples but " + label + " has " +
                       std::to_string(array.shape()[0]) + " (shape " + array.shape().to_string() + ")");
  };
  for (std::size_t i = 0; i < x.size(); ++i) {
    check_rows(x[i], "x[" + std::to_string(i) + "]");
    const Shape& expected = input_shapes[i];
    if (!expected.accepts(x[i].shape(), 1))
      throw ShapeError(who, "x[" + std::to_string(i) + "] does not fit the model's input",
                       {{"input", expected}, {"x", x[i].shape()}});
    if (x[i].dtype() != input_dtypes[i]) x[i] = x[i].astype(input_dtypes[i]);
  }
  if (x[0].shape()[0] == 0) throw ValueError(who + ": no samples");
  for (std::size_t k = 0; k < y.size(); ++k) {
    check_rows(y[k], "y[" + std::to_string(k) + "]");
    // Targets take the model's dtype (its first input's): a float32 model fed float64 labels still trains.
    if (y[k].dtype() != input_dtypes[0]) y[k] = y[k].astype(input_dtypes[0]);
    const Loss& loss = losses_.size() == 1 ? losses_[0] : losses_[k];
    loss.check(detail::with_unknown_batch(y[k]), output_shapes[k]);
    loss.check_values(y[k], output_shapes[k], who + ": y[" + std::to_string(k) + "]");
  }
}

std::vector<Array> Trainer::check_weights(const std::vector<Array>& w, const std::vector<Array>& y,
                                          const std::string& what) const {
  return detail::checked_sample_weights(w, y, model_.model_output_shapes(), model_.input_dtypes().at(0),
                                        model_.describe() + "." + what);
}

// ---- steps ------------------------------------------------------------------------------------------------------

std::shared_ptr<detail::StepGraph> Trainer::step_graph_for(const std::vector<Array>& x, const std::vector<Array>& y,
                                                         const std::vector<Array>& w, bool training, bool distributed) {
  std::lock_guard<std::mutex> lock(steps_mutex_);
  std::shared_ptr<detail::StepGraph>& step_graph = training ? training_ : evaluation_;
  bool fits = step_graph != nullptr && step_graph->distributed == (training && distributed);
  // From axis 1: the batch is checked per batch (a fixed one, a stateful model's, by the feed).
  for (std::size_t k = 0; fits && k < y.size(); ++k) fits = step_graph->targets[k].shape().accepts(y[k].shape(), 1);
  for (std::size_t i = 0; fits && i < x.size(); ++i) fits = step_graph->inputs[i].dtype() == x[i].dtype();
  fits = fits && step_graph->sample_weights.size() == w.size();
  for (std::size_t k = 0; fits && k < w.size(); ++k) fits = step_graph->sample_weights[k].shape().accepts(w[k].shape(), 1);
  if (!fits)
    step_graph = detail::build_step_graph({model_, *optimizer_, losses_, metrics_, weighted_metrics_}, x, y, w, training,
                                        distributed);
  return step_graph;
}

void Trainer::run_batch(const detail::StepGraph& step_graph, Program& program, const std::vector<Array>& x,
                        const std::vector<Array>& y, const std::vector<Array>& w, detail::StepTotals& totals) {
  for (std::size_t i = 0; i < x.size(); ++i) program.feed(step_graph.inputs[i], x[i]);
  for (std::size_t k = 0; k < y.size(); ++k) program.feed(step_graph.targets[k], y[k]);
  for (std::size_t k = 0; k < w.size(); ++k) program.feed(step_graph.sample_weights[k], w[k]);
  if (step_graph.training) {
    optimizer_->prepare_step();
    // Per-step randomness (dropout) is keyed by the optimizer's iteration count, which is saved with
    // the optimizer, so a resumed run draws the masks the uninterrupted run would have drawn.
    program.set_run_count(static_cast<std::uint64_t>(optimizer_->iterations()));
  }
  program.run();
  if (step_graph.training) optimizer_->finish_step();
  const bool first = totals.sums.empty();
  std::size_t next = 0;
  for (const detail::StepGraph::Logged& logged : step_graph.logged)
    for (const Tensor& statistic : logged.statistics) {
      const Array value = program.view(statistic);
      if (first) totals.sums.emplace_back(statistic.shape(), DType::float64);
      Array& sum = totals.sums[next++];
      auto* into = static_cast<double*>(sum.raw());
      for (std::size_t i = 0; i < sum.size(); ++i) into[i] += value.flat(i);
    }
}

Logs Trainer::means(detail::StepGraph& step_graph, detail::StepTotals& totals) const {
  if (!totals.results) {
    std::vector<Tensor> results;
    for (const detail::StepGraph::Logged& logged : step_graph.logged) results.push_back(logged.result);
    totals.results = std::make_unique<Program>(step_graph.graph, results);
  }
  std::size_t next = 0;
  for (const detail::StepGraph::Logged& logged : step_graph.logged)
    for (const Tensor& placeholder : logged.totals) totals.results->feed(placeholder, totals.sums.at(next++));
  totals.results->run();
  Logs logs;
  for (const detail::StepGraph::Logged& logged : step_graph.logged) {
    const Array value = totals.results->view(logged.result);
    if (logged.result.rank() == 0)
      logs[logged.name] = value.flat(0);
    else
      for (std::size_t i = 0; i < value.size(); ++i) logs[logged.name + "_" + std::to_string(i)] = value.flat(i);
  }
  return logs;
}

// ---- the public operations ----------------------------------------------------------------------------------------

Logs Trainer::train_on_batch(const std::vector<Array>& x, const std::vector<Array>& y) { return one_batch(x, y, true); }

Logs Trainer::test_on_batch(const std::vector<Array>& x, const std::vector<Array>& y) { return one_batch(x, y, false); }

Logs Trainer::one_batch(const std::vector<Array>& x_given, const std::vector<Array>& y_given, bool training) {
  std::vector<Array> x = x_given, y = y_given;
  check_data(x, y, training ? "train_on_batch" : "test_on_batch");
  detail::StepTotals totals;
  const std::shared_ptr<detail::StepGraph> step_graph = step_graph_for(x, y, {}, training);
  const detail::ProgramPool::Lease program = step_graph->programs->lease(num_rows(x));
  run_batch(*step_graph, *program, x, y, {}, totals);
  return means(*step_graph, totals);
}

Logs Trainer::evaluate(const std::vector<Array>& x_given, const std::vector<Array>& y_given,
                       const EvaluateOptions& options) {
  std::vector<Array> x = x_given, y = y_given;
  check_data(x, y, "evaluate");
  const std::vector<Array> w = check_weights(options.sample_weight_, y, "evaluate");
  return evaluate_checked(x, y, w, options.batch_size_);
}

std::int64_t Trainer::batch_size_for(std::int64_t batch_size, std::int64_t rows, const std::string& what) const {
  const std::vector<Shape> inputs = model_.input_shapes();
  const std::int64_t fixed = inputs.empty() || inputs[0].rank() == 0 ? Shape::unknown : inputs[0][0];
  if (fixed == Shape::unknown) return batch_size;
  if (rows % fixed != 0)
    throw ValueError(model_.describe() + ": " + what + ": the model's inputs take batches of " + std::to_string(fixed) +
                     " rows, and " + std::to_string(rows) + " rows do not split into them");
  return fixed;
}

Logs Trainer::evaluate_checked(const std::vector<Array>& x, const std::vector<Array>& y, const std::vector<Array>& w,
                              std::int64_t batch_size) {
  if (batch_size <= 0)
    throw ValueError(model_.describe() + ": batch_size must be positive, got " + std::to_string(batch_size));
  const std::int64_t rows = num_rows(x);
  batch_size = batch_size_for(batch_size, rows, "evaluate");
  const std::shared_ptr<detail::StepGraph> step_graph = step_graph_for(x, y, w, false);
  const detail::ProgramPool::Lease program = step_graph->programs->lease(std::min(batch_size, rows));
  detail::StepTotals totals;
  std::vector<Array> batch_x(x.size()), batch_y(y.size()), batch_w(w.size());
  for (std::int64_t start = 0; start < rows; start += batch_size) {
    const std::int64_t count = std::min(batch_size, rows - start);
    for (std::size_t i = 0; i < x.size(); ++i) batch_x[i] = x[i].rows(start, count);
    for (std::size_t k = 0; k < y.size(); ++k) batch_y[k] = y[k].rows(start, count);
    for (std::size_t k = 0; k < w.size(); ++k) batch_w[k] = w[k].rows(start, count);
    run_batch(*step_graph, *program, batch_x, batch_y, batch_w, totals);
  }
  return means(*step_graph, totals);
}

void Trainer::zero_totals(const detail::StepGraph& step_graph, detail::StepTotals& totals) {
  totals.sums.clear();
  for (const detail::StepGraph::Logged& logged : step_graph.logged)
    for (const Tensor& statistic : logged.statistics) totals.sums.emplace_back(statistic.shape(), DType::float64);
}

std::shared_ptr<detail::StepGraph> Trainer::evaluate_part(const std::vector<Array>& x, const std::vector<Array>& y,
                                                          const std::vector<Array>& w, std::int64_t batch_size,
                                                          const Dataset* data, std::int64_t steps, int rank, int ranks,
                                                          detail::StepTotals& totals) {
  const std::string what = "fit validation_data";
  std::vector<Array> part_x(x.size()), part_y(y.size()), part_w(w.size());
  auto take = [&](const std::vector<Array>& from, std::vector<Array>& into, detail::Shard rows) {
    into.resize(from.size());
    for (std::size_t i = 0; i < from.size(); ++i) into[i] = from[i].rows(rows.start, rows.count);
  };
  if (data == nullptr) {
    // This rank's rows of the validation arrays, in batches.
    const detail::Shard mine = detail::shard_of(num_rows(x), rank, ranks);
    const std::shared_ptr<detail::StepGraph> step_graph = step_graph_for(x, y, w, false);
    zero_totals(*step_graph, totals);
    if (mine.count == 0) return step_graph;
    batch_size = batch_size_for(batch_size, num_rows(x), what);
    const detail::ProgramPool::Lease program = step_graph->programs->lease(std::min(batch_size, mine.count));
    for (std::int64_t start = 0; start < mine.count; start += batch_size) {
      const detail::Shard rows{mine.start + start, std::min(batch_size, mine.count - start)};
      take(x, part_x, rows);
      take(y, part_y, rows);
      take(w, part_w, rows);
      run_batch(*step_graph, *program, part_x, part_y, part_w, totals);
    }
    return step_graph;
  }
  // This rank's rows of each batch of the dataset, which every rank reads whole.
  const std::string who = model_.describe() + "." + what;
  check_evaluation_steps(*data, steps, who);
  Dataset::Iterator batches = data->iterate();
  Example example;
  std::shared_ptr<detail::StepGraph> step_graph;
  std::size_t num_x = 0, num_y = 0, num_w = 0;
  for (std::int64_t step = 0; steps < 0 || step < steps; ++step) {
    if (!batches.next(example)) {
      if (steps > 0)
        throw ValueError(who + ": the dataset ran out after " + std::to_string(step) +
                         " batches, fewer than validation_steps " + std::to_string(steps));
      break;
    }
    std::vector<Array> bx = example.x, by = example.y;
    check_data(bx, by, what);
    const std::vector<Array> bw = check_weights(example.sample_weight, by, what);
    if (!step_graph) {
      step_graph = step_graph_for(bx, by, bw, false);
      zero_totals(*step_graph, totals);
      num_x = bx.size();
      num_y = by.size();
      num_w = bw.size();
    } else if (bx.size() != num_x || by.size() != num_y || bw.size() != num_w) {
      throw ValueError(who + ": batch " + std::to_string(step + 1) +
                       " has other arrays than the first batch (inputs, targets or sample weights)");
    }
    const detail::Shard rows = detail::shard_of(num_rows(bx), rank, ranks);
    if (rows.count == 0) continue;
    take(bx, part_x, rows);
    take(by, part_y, rows);
    take(bw, part_w, rows);
    const detail::ProgramPool::Lease program = step_graph->programs->lease(rows.count);
    run_batch(*step_graph, *program, part_x, part_y, part_w, totals);
  }
  if (!step_graph) throw ValueError(who + ": the dataset is empty");
  return step_graph;
}

Logs Trainer::evaluate(const Dataset& data, const EvaluateOptions& options) {
  return evaluate_data(data, options.steps_, "evaluate");
}

Logs Trainer::evaluate_data(const Dataset& data, std::int64_t steps, const std::string& what) {
  const std::string who = model_.describe() + "." + what;
  check_evaluation_steps(data, steps, who);
  Dataset::Iterator batches = data.iterate();
  Example example;
  if (!batches.next(example)) throw ValueError(who + ": the dataset is empty");
  std::vector<Array> x = example.x, y = example.y;
  check_data(x, y, what);
  std::vector<Array> w = check_weights(example.sample_weight, y, what);
  const std::shared_ptr<detail::StepGraph> step_graph = step_graph_for(x, y, w, false);
  const detail::ProgramPool::Lease program = step_graph->programs->lease(num_rows(x));
  detail::StepTotals totals;
  for (std::int64_t step = 1;; ++step) {
    run_batch(*step_graph, *program, x, y, w, totals);
    if (steps > 0 && step >= steps) break;
    if (!batches.next(example)) {
      if (steps > 0)
        throw ValueError(who + ": the dataset ran out after " + std::to_string(step) + " batches, fewer than steps " +
                         std::to_string(steps));
      break;
    }
    if (example.x.size() != x.size() || example.y.size() != y.size() || example.sample_weight.size() != w.size())
      throw ValueError(who + ": batch " + std::to_string(step + 1) +
                       " has other arrays than the first batch (inputs, targets or sample weights)");
    x = example.x;
    y = example.y;
    check_data(x, y, what);
    w = check_weights(example.sample_weight, y, what);
  }
  return means(*step_graph, totals);
}

}  // namespace kiln
