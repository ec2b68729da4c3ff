#include <kiln/train/detail/fit.hpp>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <utility>

#include <kiln/core/detail/python_float.hpp>
#include <kiln/core/error.hpp>
#include <kiln/layers/model_base.hpp>

namespace kiln {

// ---- the loop: a newcomer's reading order --------------------------------------------------------------------

Trainer::Fit::Fit(Trainer& trainer, std::vector<Array> x, std::vector<Array> y, const FitOptions& options)
    : trainer_(trainer),
      options_(options),
      bar_(std::cout, chief() ? options.verbose_ : 0, ProgressBar::stdout_is_terminal()) {
  batches_ = Batches::arrays(*this, std::move(x), std::move(y));
}

Trainer::Fit::Fit(Trainer& trainer, const Dataset& data, const FitOptions& options)
    : trainer_(trainer),
      options_(options),
      bar_(std::cout, chief() ? options.verbose_ : 0, ProgressBar::stdout_is_terminal()) {
  batches_ = Batches::dataset(*this, data);
}

History Trainer::Fit::run() {
  if (communicator_ != nullptr) agreement_ = std::make_unique<detail::Agreement>(*communicator_, who());
  // In a distributed fit, a rank that fails while preparing tells the others before they wait on it.
  guarded([&] {
    batches_->prepare();
    prepare_step();
    prepare_state();
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

Trainer::Fit::~Fit() {
  // The pooled program outlives this fit: it must not call into buckets that are gone.
  if (buckets_ != nullptr && program_ != nullptr) (*program_)->on_ready({}, {});
  for (ReportingCallback* silenced : silenced_) silenced->silence(false);
}

void Trainer::Fit::check_options() const {
  if (options_.batch_size_ <= 0)
    throw ValueError(who() + ": batch_size must be positive, got " + std::to_string(options_.batch_size_));
  if (options_.epochs_ < 0) throw ValueError(who() + ": epochs must not be negative");
  if (options_.initial_epoch_ < 0)
    throw ValueError(who() + ": initial_epoch must not be negative, got " + std::to_string(options_.initial_epoch_));
  if (options_.validation_split_ < 0.0 || options_.validation_split_ >= 1.0)
    throw ValueError(who() + ": validation_split must be in [0, 1), got " +
                     std::to_string(options_.validation_split_));
}

// The training graph for the first batch's shapes, and its program, leased for the largest batch: made once,
// so a training step allocates nothing.
void Trainer::Fit::prepare_step() {
  step_graph_ = trainer_.step_graph_for(batches_->x(), batches_->y(), batches_->w(), true, communicator_ != nullptr);
  program_ = std::make_unique<detail::ProgramPool::Lease>(
      step_graph_->programs->lease(local_batch(batches_->largest_batch())));
}

void Trainer::Fit::prepare_state() {
  state_.model = &trainer_.model_;
  state_.optimizer = trainer_.optimizer_.get();
  state_.epochs = options_.epochs_;
  state_.steps_per_epoch = steps_;
  state_.verbose = options_.verbose_;
  terminates_on_nan_ = std::any_of(options_.callbacks_.begin(), options_.callbacks_.end(), [](const CallbackPtr& c) {
    return dynamic_cast<const TerminateOnNaN*>(c.get()) != nullptr;
  });
}

// Where a callback said to resume (state_.resume_epoch, resume_batch): the batches already trained are
// skipped, drawn in the order the interrupted run drew them. Returns the epoch to start at.
int Trainer::Fit::resume() {
  const int epoch = state_.resume_epoch;
  const std::int64_t batch = state_.resume_batch;
  if (batch < 0 || (steps_ > 0 && batch > steps_))
    throw ValueError(who() + ": cannot resume at batch " + std::to_string(batch) + " of an epoch of " +
                     std::to_string(steps_));
  skip_batches_ = batch;
  batches_->skip_to(epoch, batch);
  return epoch;
}

void Trainer::Fit::run_epoch(int epoch) {
  // In a distributed fit a failure here is told at the epoch's first step.
  deferred([&] {
    for (const CallbackPtr& callback : options_.callbacks_) callback->on_epoch_begin(state_, epoch);
    bar_.epoch_begin(epoch, options_.epochs_);
    started_ = std::chrono::steady_clock::now();
    batches_->begin_epoch(epoch);
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
      if (!batches_->next(epoch, batch)) break;
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
  if (communicator_ != nullptr)
    end_distributed_epoch(epoch);
  else
    add_validation();
  trainer_.epochs_trained_ = epoch + 1;  // before the callbacks, so a checkpoint saved there records this epoch
  guarded([&] {
    for (const CallbackPtr& callback : options_.callbacks_) callback->on_epoch_logs(state_, epoch, logs_);
    for (const CallbackPtr& callback : options_.callbacks_) callback->on_epoch_end(state_, epoch, logs_);
  }, "the end of an epoch");
  bar_.epoch_end(batches_run, logs_, seconds_since_start());
  history_.epochs.push_back(epoch);
  for (const auto& [name, value] : logs_) history_.history[name].push_back(value);
}

void Trainer::Fit::train_batch(int epoch, std::int64_t batch) {
  trainer_.run_batch(*step_graph_, **program_, batch_x_, batch_y_, batch_w_, totals_);
  logs_ = trainer_.means(*step_graph_, totals_);
  bar_.update(batch + 1, steps_, logs_, seconds_since_start());
  warn_if_not_finite(epoch, batch);
  for (const CallbackPtr& callback : options_.callbacks_) callback->on_batch_end(state_, batch, logs_);
}

void Trainer::Fit::warn_if_not_finite(int epoch, std::int64_t batch) {
  if (std::isfinite(logs_.at("loss")) || warned_nan_) return;
  // python_float: printf writes "-nan" for a NaN with its sign bit set (inf - inf), Keras never does.
  std::cerr << who() << ": the loss is " << detail::python_float(logs_.at("loss")) << " at epoch " << epoch + 1
            << ", batch " << batch + 1 << (terminates_on_nan_ ? "\n" : "; add kiln::TerminateOnNaN to stop on it\n");
  warned_nan_ = true;
}

void Trainer::Fit::add_validation() {
  if (val_x_.empty() && !options_.validation_dataset_) return;
  const Logs validation =
      options_.validation_dataset_
          ? trainer_.evaluate_data(*options_.validation_dataset_, options_.validation_steps_, "fit validation_data")
          : trainer_.evaluate_checked(val_x_, val_y_, val_w_, options_.batch_size_);
  for (const auto& [name, value] : validation) logs_["val_" + name] = value;
}

double Trainer::Fit::seconds_since_start() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
}

History Trainer::fit(const std::vector<Array>& x, const std::vector<Array>& y, const FitOptions& options) {
  return Fit(*this, x, y, options).run();
}

History Trainer::fit(const Dataset& data, const FitOptions& options) { return Fit(*this, data, options).run(); }

}  // namespace kiln
