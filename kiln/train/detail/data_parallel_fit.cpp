// The distributed parts of one fit (FitOptions::distribute): the ranks' agreement on the model and the run,
// the gradient buckets hooked into the training program, rank 0's state on every rank, one data-parallel
// step, the replica check at each epoch's end, and validation split over the ranks. Trainer::Fit's members,
// beside data_parallel.cpp's pieces; docs/design.md ("Distributed fits") walks through them.
#include <kiln/train/detail/fit.hpp>

#include <algorithm>
#include <utility>

#include <kiln/core/error.hpp>
#include <kiln/core/warnings.hpp>
#include <kiln/layers/model_base.hpp>

namespace kiln {

// After the data and the graph are ready on every rank: the ranks must agree on the model and the run
// before any collective on weights; then the buckets and the gradient hook.
void Trainer::Fit::prepare_distributed() {
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
  std::string run = batches_->run_description() + "," + std::to_string(steps_) + "," +
                    std::to_string(options_.epochs_) + "," + std::to_string(options_.initial_epoch_) + "," +
                    std::to_string(options_.shuffle_) + "," + std::to_string(options_.seed_) + "," +
                    std::to_string(detail::num_rows(val_x_)) + "," +
                    std::to_string(options_.validation_steps_) + "," + std::to_string(options_.steps_per_epoch_);
  for (const std::vector<Array>* arrays : {&batches_->x(), &batches_->y(), &batches_->w()})
    for (const Array& array : *arrays) run += "|" + array.shape().to_string() + dtype_name(array.dtype());
  for (const auto& [label, weight] : options_.class_weight_) run += "|class " + std::to_string(label) + ":" + std::to_string(weight);
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
void Trainer::Fit::start_distributed() {
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
void Trainer::Fit::keep_replicas_equal(int epoch) {
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

// The end of a distributed epoch: the ranks agree on failures and stops of the last batch's callbacks, their
// weights are checked equal, rank 0's moving statistics become everyone's, and validation runs split over them.
void Trainer::Fit::end_distributed_epoch(int epoch) {
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
}

// One distributed step: this rank's shard forward and backward, its gradients summed while backward runs,
// the step's statistics and status summed, then the same update on every rank. False at the end of the data.
bool Trainer::Fit::distributed_batch(int epoch, std::int64_t batch) {
  // A stop asked for by the last batch's callbacks (TerminateOnNaN, or a callback of one rank's own) is
  // agreed at this step's exchange; then no rank applies this step, as one process would not have run it.
  const bool stop = std::exchange(stop_asked_, false);
  bool have = false;
  if (!stop && !agreement_->failed()) {
    try {
      have = batches_->next(epoch, batch);
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
  if (totals_.sums.empty()) Trainer::zero_totals(*step_graph_, totals_);
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
std::int64_t Trainer::Fit::local_batch(std::int64_t rows) const {
  return communicator_ == nullptr ? rows : std::max<std::int64_t>(1, detail::shard_of(rows, 0, communicator_->size()).count);
}

// Validation split over the ranks: each evaluates its part, then the statistics are summed.
void Trainer::Fit::add_distributed_validation(int epoch) {
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

}  // namespace kiln
