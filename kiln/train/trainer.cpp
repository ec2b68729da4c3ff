#include <kiln/train/trainer.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <numeric>
#include <utility>

#include <kiln/core/autodiff.hpp>
#include <kiln/core/detail/program_pool.hpp>
#include <kiln/core/detail/python_float.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/program.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/core/warnings.hpp>
#include <kiln/layers/model_base.hpp>
#include <kiln/ops/ops.hpp>
#include <kiln/data/data.hpp>
#include <kiln/train/detail/data_parallel.hpp>
#include <kiln/train/detail/sample_weights.hpp>
#include <kiln/train/detail/step_graph.hpp>
#include <kiln/train/fit_options.hpp>
#include <kiln/train/progress.hpp>

namespace kiln {

namespace {

std::int64_t num_rows(const std::vector<Array>& arrays) { return arrays.empty() ? 0 : arrays[0].shape()[0]; }

// Gathers rows `order[start, start + count)` of `source` into the front of `buffer` (preallocated for a
// whole batch), so shuffled batches cost a copy but no allocation of data.
Array gather_rows(const Array& source, Array& buffer, const std::vector<std::int64_t>& order, std::int64_t start,
                  std::int64_t count) {
  const std::size_t row_bytes =
      source.shape()[0] == 0 ? 0 : source.nbytes() / static_cast<std::size_t>(source.shape()[0]);
  const auto* from = static_cast<const unsigned char*>(source.raw());
  auto* to = static_cast<unsigned char*>(buffer.raw());
  for (std::int64_t j = 0; j < count; ++j)
    std::memcpy(to + static_cast<std::size_t>(j) * row_bytes,
                from + static_cast<std::size_t>(order[static_cast<std::size_t>(start + j)]) * row_bytes, row_bytes);
  return buffer.rows(0, count);
}

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

Array batch_buffer(const Array& source, std::int64_t batch_size) {
  std::vector<std::int64_t> dims = source.shape().dims();
  dims[0] = std::min(batch_size, dims[0]);
  return Array(Shape(dims), source.dtype());
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

// ---- fit ------------------------------------------------------------------------------------------------------

// One call of fit: the data and its validation part, the training graph's program, the batch buffers,
// the callbacks' state and the history, stepped through epochs and batches.
class Trainer::Fit {
 public:
  // The arrays are checked when the fit runs, where a distributed fit's ranks agree on failures.
  Fit(Trainer& trainer, std::vector<Array> x, std::vector<Array> y, const FitOptions& options)
      : trainer_(trainer),
        options_(options),
        x_(std::move(x)),
        y_(std::move(y)),
        bar_(std::cout, chief() ? options.verbose_ : 0, ProgressBar::stdout_is_terminal()) {}
  Fit(Trainer& trainer, const Dataset& data, const FitOptions& options)
      : trainer_(trainer),
        options_(options),
        data_(&data),
        bar_(std::cout, chief() ? options.verbose_ : 0, ProgressBar::stdout_is_terminal()) {}

  History run() {
    if (communicator_ != nullptr) agreement_ = std::make_unique<detail::Agreement>(*communicator_, who());
    // In a distributed fit, a rank that fails while preparing tells the others before they wait on it.
    guarded([&] {
      if (data_ != nullptr) {
        check_options();
        prepare_dataset();
      } else {
        trainer_.check_data(x_, y_, "fit");
        w_ = trainer_.check_weights(options_.sample_weight_, y_, "fit");
        check_options();
        split_validation();
        weigh_classes();
        prepare();
      }
    });
    if (communicator_ != nullptr) prepare_distributed();
    guarded([&] {
      for (const CallbackPtr& callback : options_.callbacks_) callback->on_train_begin(state_);
    });
    if (communicator_ != nullptr) start_distributed();
    int first_epoch = options_.initial_epoch_;
    if (state_.resume_epoch >= 0) guarded([&] { first_epoch = resume(); }, "resuming");
    for (int epoch = first_epoch; epoch < options_.epochs_ && !state_.stop_training; ++epoch) run_epoch(epoch);
    guarded([&] {
      for (const CallbackPtr& callback : options_.callbacks_) callback->on_train_end(state_, logs_);
    }, "the end of training");
    return history_;
  }

  ~Fit() {
    // The pooled program outlives this fit: it must not call into buckets that are gone.
    if (buckets_ != nullptr && program_ != nullptr) (*program_)->on_ready({}, {});
    for (ReportingCallback* silenced : silenced_) silenced->silence(false);
  }

 private:
  std::string who() const { return trainer_.model_.describe() + ".fit"; }

  // ---- distributed fits ---------------------------------------------------------------------------------------
  // Every rank runs this same code; each collective below is reached by every rank in the same order. A rank
  // that throws keeps the exception (agreement_) until the next exchange, where every rank learns of it and
  // stops. Rank 0 prints and writes files.

  bool chief() const { return options_.communicator_ == nullptr || options_.communicator_->rank() == 0; }

  // Runs `body`; in a distributed fit, an exception is kept rather than thrown now, and every rank agrees
  // here: any rank's failure throws on every rank, and any rank's stop request stops every rank.
  template <class Body>
  void guarded(const Body& body, const char* where = "the start of training") {
    if (agreement_ == nullptr) return body();
    try {
      body();
    } catch (...) {
      agreement_->fail(std::current_exception());
    }
    if (agreement_->agree(where, state_.stop_training)) state_.stop_training = true;
  }

  // Runs `body`; in a distributed fit, an exception is kept for the next agreement (the next step's).
  template <class Body>
  void deferred(const Body& body) {
    if (agreement_ == nullptr) return body();
    try {
      body();
    } catch (...) {
      agreement_->fail(std::current_exception());
    }
  }

  // After the data and the graph are ready on every rank: the ranks must agree on the model and the run
  // before any collective on weights; then the buckets and the gradient hook.
  void prepare_distributed() {
    Communicator& communicator = *communicator_;
    std::string model = trainer_.model_.get_config().to_string() + trainer_.optimizer_->get_config().to_string();
    for (const Weight& weight : trainer_.model_.weights())
      model += "|" + weight.path + weight.value.shape().to_string() + dtype_name(weight.value.dtype());
    // What the collectives' sizes depend on: the losses, the logged statistics, the bucket size.
    for (const Loss& loss : trainer_.losses_) model += "|loss " + loss.serialize().to_string();
    for (const detail::StepGraph::Logged& logged : step_graph_->logged) {
      model += "|" + logged.name;
      for (const Tensor& statistic : logged.statistics) model += statistic.shape().to_string();
    }
    model += "|buckets " + std::to_string(communicator.bucket_bytes());
    std::string run = std::to_string(rows_) + "," + std::to_string(batch_size_) + "," + std::to_string(steps_) + "," +
                      std::to_string(options_.epochs_) + "," + std::to_string(options_.initial_epoch_) + "," +
                      std::to_string(options_.shuffle_) + "," + std::to_string(options_.seed_) + "," +
                      std::to_string(val_x_.empty() ? 0 : num_rows(val_x_)) + "," +
                      std::to_string(options_.validation_steps_) + "," + std::to_string(options_.steps_per_epoch_);
    for (const std::vector<Array>* arrays : {&x_, &y_, &w_})
      for (const Array& array : *arrays) run += "|" + array.shape().to_string() + dtype_name(array.dtype());
    for (const auto& [label, weight] : options_.class_weight_) run += "|class " + std::to_string(label) + ":" + std::to_string(weight);
    if (data_ != nullptr) run += "|dataset " + std::to_string(data_->cardinality());
    detail::check_same_on_every_rank(communicator, detail::hash_text(model), detail::hash_text(run), who());
    guarded([&] {
      buckets_ = std::make_unique<detail::GradientBuckets>(communicator, step_graph_->gradients);
      std::vector<Tensor> hooked;
      hooked_index_.clear();
      for (std::size_t i = 0; i < step_graph_->gradients.size(); ++i)
        if (step_graph_->gradients[i].valid()) {
          hooked.push_back(step_graph_->gradients[i]);
          hooked_index_.push_back(i);
        }
      detail::GradientBuckets* buckets = buckets_.get();
      const std::vector<std::size_t>* index = &hooked_index_;
      (*program_)->on_ready(hooked,
                            [buckets, index](std::size_t i, const void* data) { buckets->ready((*index)[i], data); });
      for (std::size_t i = 0; i < step_graph_->reduced.size(); ++i)
        if (step_graph_->reduced[i].valid()) step_graph_->apply->feed(step_graph_->reduced[i], buckets_->reduced(i));
      state_.chief = chief();
      if (!state_.chief)
        for (const CallbackPtr& callback : options_.callbacks_)
          if (auto* reporting = dynamic_cast<ReportingCallback*>(callback.get())) {
            reporting->silence(true);
            silenced_.push_back(reporting);
          }
    }, "preparing the gradient buckets");
  }

  // After on_train_begin (which may have restored a backup, on rank 0): rank 0's weights, optimizer state and
  // resume point on every rank, once the ranks agree the optimizer's variables are the same.
  void start_distributed() {
    Communicator& communicator = *communicator_;
    std::vector<Array> state;
    std::string variables;
    for (const Weight& weight : trainer_.model_.weights()) state.push_back(weight.value);
    for (const Weight& slot : trainer_.optimizer_->variables()) {
      state.push_back(slot.value);
      variables += "|" + slot.path + slot.value.shape().to_string();
    }
    detail::check_same_on_every_rank(communicator, detail::hash_text(variables), 0, who());
    detail::broadcast_arrays(communicator, state);
    std::int64_t resume[2] = {state_.resume_epoch, state_.resume_batch};
    communicator.broadcast(resume, sizeof resume, 0);
    state_.resume_epoch = static_cast<int>(resume[0]);
    state_.resume_batch = resume[1];
  }

  // Every rank's weights, bit for bit: MPI's sums give every rank the same bits, but nothing promises it, so at
  // each epoch's end the ranks compare a hash of their weights and, if they drifted, take rank 0's again.
  void keep_replicas_equal(int epoch) {
    std::vector<Array> state;
    for (const Weight& weight : trainer_.model_.weights()) state.push_back(weight.value);
    for (const Weight& slot : trainer_.optimizer_->variables()) state.push_back(slot.value);
    std::uint64_t hash = detail::hash_bytes(nullptr, 0);
    for (const Array& array : state) hash = detail::hash_bytes(array.raw(), array.nbytes(), hash);
    const std::vector<std::uint64_t> hashes = communicator_->all_gather(hash);
    if (std::all_of(hashes.begin(), hashes.end(), [&](std::uint64_t h) { return h == hashes[0]; })) return;
    if (chief() && !warned_drift_)
      kiln::warn(who() + ": the ranks' weights differ by rounding after epoch " + std::to_string(epoch + 1) +
                 " (their MPI sums were not bitwise the same); every rank takes rank 0's");
    warned_drift_ = true;
    detail::broadcast_arrays(*communicator_, state);
  }

  // This rank's rows of the global batch in batch_x_, batch_y_ and batch_w_ (which hold the whole batch).
  void take_shard() {
    global_rows_ = num_rows(batch_x_);
    shard_ = detail::shard_of(global_rows_, communicator_->rank(), communicator_->size());
    for (std::vector<Array>* arrays : {&batch_x_, &batch_y_, &batch_w_})
      for (Array& array : *arrays) array = array.rows(shard_.start, shard_.count);
  }

  // One distributed step: this rank's shard forward and backward, its gradients summed while backward runs,
  // the step's statistics and status summed, then the same update on every rank. False at the end of the data.
  bool distributed_batch(int epoch, std::int64_t batch) {
    // A stop asked for by the last batch's callbacks (TerminateOnNaN, or a callback of one rank's own) is
    // agreed at this step's exchange; then no rank applies this step, as one process would not have run it.
    const bool stop = std::exchange(stop_asked_, false);
    bool have = false;
    if (!stop && !agreement_->failed()) {
      try {
        have = data_ != nullptr ? next_dataset_batch(epoch, batch) : gather_batch(batch);
        if (have && data_ != nullptr) take_shard();
      } catch (...) {
        agreement_->fail(std::current_exception());
      }
    }
    const bool runs = have && !agreement_->failed() && shard_.count > 0;
    buckets_->begin(runs ? static_cast<double>(shard_.count) / static_cast<double>(global_rows_) : 0.0);
    Program& program = **program_;
    if (runs) {
      try {
        const detail::StepGraph& step_graph = *step_graph_;
        for (std::size_t i = 0; i < batch_x_.size(); ++i) program.feed(step_graph.inputs[i], batch_x_[i]);
        for (std::size_t k = 0; k < batch_y_.size(); ++k) program.feed(step_graph.targets[k], batch_y_[k]);
        for (std::size_t k = 0; k < batch_w_.size(); ++k) program.feed(step_graph.sample_weights[k], batch_w_[k]);
        program.set_run_count(static_cast<std::uint64_t>(trainer_.optimizer_->iterations()));
        program.set_batch_offset(shard_.start);
        program.run();
      } catch (...) {
        agreement_->fail(std::current_exception());
      }
    }
    buckets_->finish();
    // [ranks with a batch, then each logged statistic's values]: one sum for the status, the end of the data
    // and the logs.
    exchange_.assign(1, have ? 1.0 : 0.0);
    for (const detail::StepGraph::Logged& logged : step_graph_->logged)
      for (const Tensor& statistic : logged.statistics) {
        const auto count = static_cast<std::size_t>(statistic.shape().num_elements());
        if (runs && !agreement_->failed()) {
          const Array value = program.view(statistic);
          for (std::size_t i = 0; i < count; ++i) exchange_.push_back(value.flat(i));
        } else {
          exchange_.insert(exchange_.end(), count, 0.0);
        }
      }
    if (agreement_->exchange_step(exchange_, epoch, batch, stop)) {
      state_.stop_training = true;
      return false;
    }
    const auto ranks = static_cast<double>(communicator_->size());
    if (exchange_[0] == 0.0) return false;
    if (exchange_[0] != ranks)
      throw DistributedError(who() + ": the ranks' data ended at different batches (" +
                             std::to_string(static_cast<int>(exchange_[0])) + " of " +
                             std::to_string(communicator_->size()) + " ranks had epoch " + std::to_string(epoch + 1) +
                             ", batch " + std::to_string(batch + 1) + ")");
    if (totals_.sums.empty()) zero_totals_of_fit();
    std::size_t next = 1;
    for (Array& sum : totals_.sums) {
      auto* into = static_cast<double*>(sum.raw());
      for (std::size_t i = 0; i < sum.size(); ++i) into[i] += exchange_[next++];
    }
    trainer_.optimizer_->prepare_step();
    step_graph_->apply->run();
    trainer_.optimizer_->finish_step();
    logs_ = trainer_.means(*step_graph_, totals_);
    deferred([&] {  // a failure is told at the next exchange
      bar_.update(batch + 1, steps_, logs_, seconds_since_start());
      if (chief()) warn_if_not_finite(epoch, batch);
      for (const CallbackPtr& callback : options_.callbacks_) callback->on_batch_end(state_, batch, logs_);
    });
    stop_asked_ = state_.stop_training;
    return true;
  }

  // The most rows of a batch of `rows` that one rank trains on.
  std::int64_t local_batch(std::int64_t rows) const {
    return communicator_ == nullptr ? rows : std::max<std::int64_t>(1, detail::shard_of(rows, 0, communicator_->size()).count);
  }

  void zero_totals_of_fit() { Trainer::zero_totals(*step_graph_, totals_); }

  // Validation split over the ranks: each evaluates its part, then the statistics are summed.
  void add_distributed_validation(int epoch) {
    const std::string where = "the validation of epoch " + std::to_string(epoch + 1);
    detail::StepTotals totals;
    std::shared_ptr<detail::StepGraph> step_graph;
    try {
      step_graph = trainer_.evaluate_part(val_x_, val_y_, val_w_, options_.batch_size_, options_.validation_dataset_.get(),
                                        options_.validation_steps_, communicator_->rank(), communicator_->size(),
                                        totals);
    } catch (...) {
      agreement_->fail(std::current_exception());
    }
    agreement_->agree(where);  // every rank has its sums, of the same sizes
    std::vector<double> sums;
    for (const Array& sum : totals.sums)
      for (std::size_t i = 0; i < sum.size(); ++i) sums.push_back(sum.flat(i));
    agreement_->exchange(sums, where);
    std::size_t next = 0;
    for (Array& sum : totals.sums)
      for (std::size_t i = 0; i < sum.size(); ++i) sum.set_flat(i, sums[next++]);
    for (const auto& [name, value] : trainer_.means(*step_graph, totals)) logs_["val_" + name] = value;
  }

  void check_options() const {
    if (options_.batch_size_ <= 0)
      throw ValueError(who() + ": batch_size must be positive, got " + std::to_string(options_.batch_size_));
    if (options_.epochs_ < 0) throw ValueError(who() + ": epochs must not be negative");
    if (options_.initial_epoch_ < 0)
      throw ValueError(who() + ": initial_epoch must not be negative, got " + std::to_string(options_.initial_epoch_));
    if (options_.validation_split_ < 0.0 || options_.validation_split_ >= 1.0)
      throw ValueError(who() + ": validation_split must be in [0, 1), got " +
                       std::to_string(options_.validation_split_));
  }

  // Validation data: given, or the last fraction of the rows (before shuffling, as Keras takes it).
  void split_validation() {
    val_x_ = options_.validation_x_;
    val_y_ = options_.validation_y_;
    if (!val_x_.empty() || !val_y_.empty()) {
      trainer_.check_data(val_x_, val_y_, "fit validation_data");
      val_w_ = trainer_.check_weights(options_.validation_sample_weight_, val_y_, "fit validation_data");
      return;
    }
    if (options_.validation_split_ <= 0.0) return;
    const std::int64_t rows = num_rows(x_);
    const auto validation_rows =
        static_cast<std::int64_t>(std::floor(static_cast<double>(rows) * options_.validation_split_));
    if (validation_rows == 0 || validation_rows == rows)
      throw ValueError(who() + ": validation_split " + std::to_string(options_.validation_split_) + " of " +
                       std::to_string(rows) + " samples leaves an empty part");
    auto split = [&](std::vector<Array>& arrays, std::vector<Array>& validation) {
      for (Array& array : arrays) {
        validation.push_back(array.rows(rows - validation_rows, validation_rows));
        array = array.rows(0, rows - validation_rows);
      }
    };
    split(x_, val_x_);
    split(y_, val_y_);
    split(w_, val_w_);
  }

  // class_weight as sample weights of the training rows (Keras leaves validation rows unweighted by it).
  void weigh_classes() {
    if (options_.class_weight_.empty()) return;
    if (!options_.sample_weight_.empty())
      throw ValueError(who() + ": class_weight and sample_weight cannot be given together");
    if (y_.size() != 1) throw ValueError(who() + ": class_weight is only supported for models with a single output");
    const Loss& loss = trainer_.losses_[0];
    w_ = {detail::class_sample_weights(options_.class_weight_, y_[0], trainer_.model_.model_output_shapes()[0], loss,
                                       who())};
  }

  // The training graph's program and the buffers a shuffled batch is gathered into: made once, so a
  // training step allocates nothing.
  void prepare() {
    rows_ = num_rows(x_);
    batch_size_ = trainer_.batch_size_for(std::min(options_.batch_size_, rows_), rows_, "fit");
    steps_ = (rows_ + batch_size_ - 1) / batch_size_;
    step_graph_ = trainer_.step_graph_for(x_, y_, w_, true, communicator_ != nullptr);
    program_ = std::make_unique<detail::ProgramPool::Lease>(step_graph_->programs->lease(local_batch(batch_size_)));
    for (const Array& array : x_) buffers_x_.push_back(batch_buffer(array, batch_size_));
    for (const Array& array : y_) buffers_y_.push_back(batch_buffer(array, batch_size_));
    for (const Array& array : w_) buffers_w_.push_back(batch_buffer(array, batch_size_));
    order_.resize(static_cast<std::size_t>(rows_));
    batch_x_.resize(x_.size());
    batch_y_.resize(y_.size());
    batch_w_.resize(w_.size());
    prepare_state();
  }

  // Where a callback said to resume (state_.resume_epoch, resume_batch): the batches already trained are
  // skipped, drawn in the order the interrupted run drew them (rows are ordered by (seed, epoch); a dataset
  // pass is opened as it was and read past them). Returns the epoch to start at.
  int resume() {
    const int epoch = state_.resume_epoch;
    const std::int64_t batch = state_.resume_batch;
    if (batch < 0 || (steps_ > 0 && batch > steps_))
      throw ValueError(who() + ": cannot resume at batch " + std::to_string(batch) + " of an epoch of " +
                       std::to_string(steps_));
    skip_batches_ = batch;
    if (data_ == nullptr) return epoch;
    std::int64_t skipped = batch;
    if (options_.steps_per_epoch_ > 0) {
      // One pass runs on across epochs: the batches of the epochs before count too.
      skipped += static_cast<std::int64_t>(epoch - options_.initial_epoch_) * options_.steps_per_epoch_;
      iterator_ = std::make_unique<Dataset::Iterator>(data_->iterate(static_cast<std::uint64_t>(options_.initial_epoch_)));
    } else {
      iterator_ = std::make_unique<Dataset::Iterator>(data_->iterate(static_cast<std::uint64_t>(epoch)));
      opened_for_ = epoch;
    }
    pending_ = false;
    for (std::int64_t i = 0; i < skipped; ++i)
      if (!iterator_->next(example_))
        throw ValueError(who() + ": the dataset ran out while skipping the " + std::to_string(skipped) +
                         " batches the interrupted run had trained");
    return epoch;
  }

  void prepare_state() {
    state_.model = &trainer_.model_;
    state_.optimizer = trainer_.optimizer_.get();
    state_.epochs = options_.epochs_;
    state_.steps_per_epoch = steps_;
    state_.verbose = options_.verbose_;
    terminates_on_nan_ = std::any_of(options_.callbacks_.begin(), options_.callbacks_.end(), [](const CallbackPtr& c) {
      return dynamic_cast<const TerminateOnNaN*>(c.get()) != nullptr;
    });
  }

  // A dataset's steps per epoch, checked against its length, and its first batch read and checked, all
  // before any step: the graph is made from that batch's shapes.
  void prepare_dataset() {
    if (!data_->batched())
      throw ValueError(who() + ": the dataset's elements are single samples; call batch(n) on it first");
    const std::int64_t length = data_->cardinality();
    const std::int64_t per_epoch = options_.steps_per_epoch_;
    if (per_epoch == 0 || per_epoch < -1)
      throw ValueError(who() + ": steps_per_epoch must be positive, got " + std::to_string(per_epoch));
    if (per_epoch < 0 && length == Dataset::infinite)
      throw ValueError(who() + ": the dataset repeats without end; give steps_per_epoch");
    const std::int64_t epochs = std::max(0, options_.epochs_ - options_.initial_epoch_);
    if (per_epoch > 0 && length >= 0 && per_epoch * epochs > length)
      throw ValueError(who() + ": steps_per_epoch " + std::to_string(per_epoch) + " over " + std::to_string(epochs) +
                       " epochs needs " + std::to_string(per_epoch * epochs) + " batches, but the dataset has " +
                       std::to_string(length) + "; repeat() it");
    steps_ = per_epoch > 0 ? per_epoch : std::max<std::int64_t>(length, 0);  // 0: unknown until the data ends
    iterator_ = std::make_unique<Dataset::Iterator>(data_->iterate(static_cast<std::uint64_t>(options_.initial_epoch_)));
    // Keras's rules for a dataset: the weights come in its elements, and validation_split cannot cut it.
    if (!options_.sample_weight_.empty())
      throw ValueError(who() + ": with a dataset, give sample weights in its elements (Example::sample_weight)");
    if (options_.validation_split_ > 0.0)
      throw ValueError(who() + ": validation_split cannot split a dataset; give validation_data");
    if (!options_.class_weight_.empty() && trainer_.model_.num_outputs() != 1)
      throw ValueError(who() + ": class_weight is only supported for models with a single output");
    if (!options_.validation_x_.empty() || !options_.validation_y_.empty()) {
      val_x_ = options_.validation_x_;
      val_y_ = options_.validation_y_;
      trainer_.check_data(val_x_, val_y_, "fit validation_data");
      val_w_ = trainer_.check_weights(options_.validation_sample_weight_, val_y_, "fit validation_data");
    }
    if (!iterator_->next(example_)) throw ValueError(who() + ": the dataset is empty");
    x_ = example_.x;
    y_ = example_.y;
    trainer_.check_data(x_, y_, "fit");
    input_dtypes_ = trainer_.model_.input_dtypes();
    w_ = dataset_weights(y_);
    step_graph_ = trainer_.step_graph_for(x_, y_, w_, true, communicator_ != nullptr);
    program_ = std::make_unique<detail::ProgramPool::Lease>(step_graph_->programs->lease(local_batch(num_rows(x_))));
    batch_x_ = x_;
    batch_y_ = y_;
    batch_w_ = w_;
    pending_ = true;
    opened_for_ = options_.initial_epoch_;
    prepare_state();
  }

  // The next batch of the dataset into batch_x_, batch_y_ and batch_w_ (converted to the model's dtype);
  // false at the end of the data.
  bool next_dataset_batch(int epoch, std::int64_t batch) {
    if (pending_) {
      pending_ = false;
      return true;
    }
    if (!iterator_->next(example_)) {
      if (options_.steps_per_epoch_ > 0)
        throw ValueError(who() + ": the dataset ran out at epoch " + std::to_string(epoch + 1) + ", batch " +
                         std::to_string(batch + 1) + " of steps_per_epoch " +
                         std::to_string(options_.steps_per_epoch_) + "; repeat() it");
      return false;
    }
    if (example_.x.size() != x_.size() || example_.y.size() != y_.size() ||
        example_.sample_weight.size() != (options_.class_weight_.empty() ? w_.size() : 0))
      throw ValueError(who() + ": batch " + std::to_string(batch + 1) + " of epoch " + std::to_string(epoch + 1) +
                       " has other arrays than the first batch (inputs, targets or sample weights)");
    // Each input in its own dtype, the targets in the model's (the first input's), as check_data does.
    const std::vector<DType>& dtypes = input_dtypes_;
    batch_x_.resize(example_.x.size());
    for (std::size_t i = 0; i < example_.x.size(); ++i)
      batch_x_[i] = example_.x[i].dtype() == dtypes[i] ? example_.x[i] : example_.x[i].astype(dtypes[i]);
    batch_y_.resize(example_.y.size());
    for (std::size_t k = 0; k < example_.y.size(); ++k)
      batch_y_[k] = example_.y[k].dtype() == dtypes[0] ? example_.y[k] : example_.y[k].astype(dtypes[0]);
    batch_w_ = dataset_weights(batch_y_);
    return true;
  }

  // A dataset batch's sample weights: its own, checked, or made from class_weight.
  std::vector<Array> dataset_weights(const std::vector<Array>& y) const {
    if (options_.class_weight_.empty())
      return example_.sample_weight.empty() ? std::vector<Array>{}
                                            : trainer_.check_weights(example_.sample_weight, y, "fit");
    if (!example_.sample_weight.empty())
      throw ValueError(who() + ": class_weight and the dataset's own sample weights cannot be given together");
    return {detail::class_sample_weights(options_.class_weight_, y.at(0), trainer_.model_.model_output_shapes()[0],
                                         trainer_.losses_[0], who())};
  }

  void run_epoch(int epoch) {
    // In a distributed fit a failure here is told at the epoch's first step.
    deferred([&] {
      for (const CallbackPtr& callback : options_.callbacks_) callback->on_epoch_begin(state_, epoch);
      bar_.epoch_begin(epoch, options_.epochs_);
      started_ = std::chrono::steady_clock::now();
      if (data_ == nullptr) {
        order_rows(epoch);
      } else if (options_.steps_per_epoch_ < 0 && opened_for_ != epoch) {
        // Keras iterates a dataset afresh each epoch unless steps_per_epoch is given.
        iterator_ = std::make_unique<Dataset::Iterator>(data_->iterate(static_cast<std::uint64_t>(epoch)));
        opened_for_ = epoch;
      }
    });
    stop_asked_ = false;  // a stop asked for in on_epoch_begin counts after the epoch's first batch, as in Keras
    totals_.reset();
    std::int64_t batches_run = 0;
    // As in Keras, stop_training is looked at after each batch: an epoch that starts runs at least one,
    // so its logs are its own even when a callback asked to stop in on_epoch_begin.
    const std::int64_t first_batch = std::exchange(skip_batches_, 0);
    for (std::int64_t batch = first_batch; steps_ == 0 || batch < steps_; ++batch) {
      if (communicator_ != nullptr) {
        if (!distributed_batch(epoch, batch)) break;
      } else {
        if (data_ != nullptr ? !next_dataset_batch(epoch, batch) : !gather_batch(batch)) break;
        train_batch(epoch, batch);
      }
      ++batches_run;
      if (communicator_ == nullptr && state_.stop_training) break;  // distributed: agreed at the next step
    }
    if (batches_run == 0 && first_batch == 0)
      throw ValueError(who() + ": epoch " + std::to_string(epoch + 1) + " had no data");
    if (batches_run == 0) {
      // A resumed epoch whose batches were all trained before the interruption: nothing to log.
      trainer_.epochs_trained_ = epoch + 1;
      return;
    }
    if (communicator_ != nullptr) {
      // An on_batch_end that threw at the last batch, or asked to stop there.
      if (agreement_->agree("the end of epoch " + std::to_string(epoch + 1), stop_asked_)) state_.stop_training = true;
      stop_asked_ = false;
      keep_replicas_equal(epoch);
      // BatchNormalization's moving statistics follow each rank's shards: rank 0's are everyone's, so
      // validation and the saved model see one model.
      std::vector<Array> statistics;
      for (const Weight& weight : trainer_.model_.weights())
        if (!weight.trainable) statistics.push_back(weight.value);
      detail::broadcast_arrays(*communicator_, statistics);
      if (!val_x_.empty() || options_.validation_dataset_) add_distributed_validation(epoch);
    } else {
      add_validation();
    }
    trainer_.epochs_trained_ = epoch + 1;  // before the callbacks, so a checkpoint saved there records this epoch
    guarded([&] {
      for (const CallbackPtr& callback : options_.callbacks_) callback->on_epoch_logs(state_, epoch, logs_);
      for (const CallbackPtr& callback : options_.callbacks_) callback->on_epoch_end(state_, epoch, logs_);
    }, "the end of an epoch");
    bar_.epoch_end(batches_run, logs_, seconds_since_start());
    history_.epochs.push_back(epoch);
    for (const auto& [name, value] : logs_) history_.history[name].push_back(value);
  }

  // Each epoch's row order: seeded by (seed, epoch), so a resumed run shuffles as the uninterrupted one.
  void order_rows(int epoch) {
    if (options_.shuffle_)
      order_ = shuffled_row_order(rows_, mix64(options_.seed_ ^ mix64(static_cast<std::uint64_t>(epoch))));
    else
      std::iota(order_.begin(), order_.end(), std::int64_t{0});
  }

  // Batch `batch` of the in-memory arrays, in this epoch's row order.
  bool gather_batch(std::int64_t batch) {
    std::int64_t start = batch * batch_size_, count = std::min(batch_size_, rows_ - start);
    if (communicator_ != nullptr) {
      // This rank's rows of the global batch, in the order every rank drew.
      global_rows_ = count;
      shard_ = detail::shard_of(count, communicator_->rank(), communicator_->size());
      start += shard_.start;
      count = shard_.count;
    }
    auto gather = [&](const std::vector<Array>& arrays, std::vector<Array>& buffers, std::vector<Array>& batch_arrays) {
      for (std::size_t i = 0; i < arrays.size(); ++i)
        batch_arrays[i] =
            options_.shuffle_ ? gather_rows(arrays[i], buffers[i], order_, start, count) : arrays[i].rows(start, count);
    };
    gather(x_, buffers_x_, batch_x_);
    gather(y_, buffers_y_, batch_y_);
    gather(w_, buffers_w_, batch_w_);
    return true;
  }

  void train_batch(int epoch, std::int64_t batch) {
    trainer_.run_batch(*step_graph_, **program_, batch_x_, batch_y_, batch_w_, totals_);
    logs_ = trainer_.means(*step_graph_, totals_);
    bar_.update(batch + 1, steps_, logs_, seconds_since_start());
    warn_if_not_finite(epoch, batch);
    for (const CallbackPtr& callback : options_.callbacks_) callback->on_batch_end(state_, batch, logs_);
  }

  void warn_if_not_finite(int epoch, std::int64_t batch) {
    if (std::isfinite(logs_.at("loss")) || warned_nan_) return;
    // python_float: printf writes "-nan" for a NaN with its sign bit set (inf - inf), Keras never does.
    std::cerr << who() << ": the loss is " << detail::python_float(logs_.at("loss")) << " at epoch " << epoch + 1
              << ", batch " << batch + 1 << (terminates_on_nan_ ? "\n" : "; add kiln::TerminateOnNaN to stop on it\n");
    warned_nan_ = true;
  }

  void add_validation() {
    if (val_x_.empty() && !options_.validation_dataset_) return;
    const Logs validation =
        options_.validation_dataset_
            ? trainer_.evaluate_data(*options_.validation_dataset_, options_.validation_steps_, "fit validation_data")
            : trainer_.evaluate_checked(val_x_, val_y_, val_w_, options_.batch_size_);
    for (const auto& [name, value] : validation) logs_["val_" + name] = value;
  }

  double seconds_since_start() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  }

  Trainer& trainer_;
  const FitOptions& options_;
  const Dataset* data_ = nullptr;
  std::unique_ptr<Dataset::Iterator> iterator_;
  Example example_;
  bool pending_ = false;  // the dataset's first batch, read by prepare_dataset, is not trained on yet
  std::int64_t skip_batches_ = 0;  // batches of the first epoch a resumed run has trained already
  std::vector<DType> input_dtypes_;  // the model's, what a dataset's batches are converted to
  int opened_for_ = -1;   // the epoch iterator_ was opened for
  std::vector<Array> x_, y_, w_, val_x_, val_y_, val_w_;
  std::int64_t rows_ = 0, batch_size_ = 0, steps_ = 0;
  TrainingState state_;
  ProgressBar bar_;
  History history_;
  std::shared_ptr<detail::StepGraph> step_graph_;
  std::unique_ptr<detail::ProgramPool::Lease> program_;
  std::vector<Array> buffers_x_, buffers_y_, buffers_w_, batch_x_, batch_y_, batch_w_;
  std::vector<std::int64_t> order_;
  detail::StepTotals totals_;
  std::chrono::steady_clock::time_point started_;
  Logs logs_;
  bool warned_nan_ = false;
  bool terminates_on_nan_ = false;
  // A distributed fit's (options_.communicator_ set):
  Communicator* communicator_ = options_.communicator_;
  std::unique_ptr<detail::Agreement> agreement_;
  std::unique_ptr<detail::GradientBuckets> buckets_;
  std::vector<std::size_t> hooked_index_;  // the hooked gradients' weight indices
  std::vector<double> exchange_;
  detail::Shard shard_;            // this rank's rows of the current batch
  std::int64_t global_rows_ = 0;   // the current batch's rows on all ranks
  bool stop_asked_ = false;        // the last batch's callbacks set stop_training: agreed at the next exchange
  bool warned_drift_ = false;
  std::vector<ReportingCallback*> silenced_;  // given their messages back when the fit ends
};

History Trainer::fit(const std::vector<Array>& x, const std::vector<Array>& y, const FitOptions& options) {
  return Fit(*this, x, y, options).run();
}

History Trainer::fit(const Dataset& data, const FitOptions& options) { return Fit(*this, data, options).run(); }

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
