#pragma once
// What fit() and evaluate() take and what fit() returns: FitOptions, EvaluateOptions and History, named as
// Keras's arguments.
//
//   kiln::History history = model.fit(x, y, kiln::FitOptions().epochs(20).batch_size(32).validation_split(0.2));
//   double last = history["val_loss"].back();
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/data/dataset.hpp>
#include <kiln/train/callbacks.hpp>
#include <kiln/train/communicator.hpp>

namespace kiln {

/// fit()'s arguments, named as Keras's, each setter returning *this for chaining:
/// kiln::FitOptions().epochs(20).batch_size(32).validation_split(0.2). fit() checks them before any step:
/// ValueError for a bad value, ConfigError for a verbose other than 0, 1 or 2.
class FitOptions {
 public:
  /// Rows per training step (default 32), the last batch of an epoch taking what is left; also the batch
  /// size of the validation pass. Must be positive.
  FitOptions& batch_size(std::int64_t value) {
    batch_size_ = value;
    return *this;
  }
  /// The epoch to stop before (default 1), counted as Keras does: with initial_epoch(e) fit runs epochs e
  /// to value - 1, so value is the total, not the number more. Must not be negative.
  FitOptions& epochs(int value) {
    epochs_ = value;
    return *this;
  }
  /// The last fraction of the rows (before any shuffling), as Keras takes it.
  FitOptions& validation_split(double value) {
    validation_split_ = value;
    return *this;
  }
  /// Data evaluated at each epoch's end, one array per model input and per output, checked as fit's data is;
  /// its loss and metrics join the logs as `val_loss`, `val_<metric>`. Used instead of validation_split.
  FitOptions& validation_data(std::vector<Array> x, std::vector<Array> y) {
    validation_x_ = std::move(x);
    validation_y_ = std::move(y);
    return *this;
  }
  /// Validation data for a model of one input and one output.
  FitOptions& validation_data(const Array& x, const Array& y) {
    return validation_data(std::vector<Array>{x}, std::vector<Array>{y});
  }
  /// Validation data with each validation sample's weight (Keras's (x, y, sample_weight) tuple), one array
  /// per output as sample_weight() takes them.
  FitOptions& validation_data(std::vector<Array> x, std::vector<Array> y, std::vector<Array> sample_weight) {
    validation_data(std::move(x), std::move(y));
    validation_sample_weight_ = std::move(sample_weight);
    return *this;
  }
  /// Each training sample's weight in the loss and in the weighted metrics (compile's weighted_metrics), as
  /// Keras's: shape (samples,), or (samples, steps) for a sequence output to weigh each step. The loss is
  /// sum(loss · weight) over the number of losses, Keras's sum_over_batch_size; a weighted metric is the
  /// weighted mean. Weights must be finite and not negative. validation_split splits them with the data.
  FitOptions& sample_weight(Array value) {
    sample_weight_ = {std::move(value)};
    return *this;
  }
  /// One weight array per output, for a model of several outputs.
  FitOptions& sample_weight(std::vector<Array> values) {
    sample_weight_ = std::move(values);
    return *this;
  }
  /// Each class's weight (class index -> weight, a class left out weighing 1), made into sample weights from
  /// the targets as Keras does (the class is the target's arg-max, or the rounded index or 0/1 label). For a
  /// model of one output trained with a classification loss (a crossentropy or a hinge), and not with
  /// sample_weight: ValueError otherwise, and for a class the output does not have.
  FitOptions& class_weight(std::map<std::int64_t, double> value) {
    class_weight_ = std::move(value);
    return *this;
  }
  /// With a Dataset: batches per epoch. By default an epoch is one pass over the dataset, iterated afresh
  /// each epoch; with steps_per_epoch, epochs take that many batches from one pass that goes on across
  /// epochs (a repeat()ed dataset), as Keras does. ValueError when a dataset of known length is shorter, or
  /// when one of unknown length runs out.
  FitOptions& steps_per_epoch(std::int64_t value) {
    steps_per_epoch_ = value;
    return *this;
  }
  /// A batched Dataset evaluated at each epoch's end, as validation_data(x, y).
  FitOptions& validation_data(Dataset value) {
    validation_dataset_ = std::make_shared<Dataset>(std::move(value));
    return *this;
  }
  /// Batches of the validation dataset evaluated (default: all of it).
  FitOptions& validation_steps(std::int64_t value) {
    validation_steps_ = value;
    return *this;
  }
  /// Visit the training rows in a new random order each epoch (default true), seeded by seed() and the
  /// epoch, so a resumed run shuffles as the uninterrupted one would.
  FitOptions& shuffle(bool value) {
    shuffle_ = value;
    return *this;
  }
  /// The seed of the shuffling order (default 0): the same seed gives the same batches.
  FitOptions& seed(std::uint64_t value) {
    seed_ = value;
    return *this;
  }  // the shuffling order
  /// Adds a callback; callbacks run in the order they were added.
  FitOptions& callback(CallbackPtr value) {
    callbacks_.push_back(std::move(value));
    return *this;
  }
  /// 0 silent, 1 a live bar on a terminal (one line per epoch otherwise), 2 one line per epoch.
  FitOptions& verbose(int value) {
    verbose_ = value;
    return *this;
  }
  /// The epoch to start at (default 0): model.epochs_trained() resumes a saved run where it stopped.
  FitOptions& initial_epoch(int value) {
    initial_epoch_ = value;
    return *this;
  }
  /// Trains data-parallel across the processes of `communicator` (a kiln::distributed::Context, which must
  /// outlive the fit): every process runs the same program with the same data and options; rank 0's weights
  /// and optimizer state are copied to every rank; each rank computes the gradient of its shard of every
  /// batch (batch_size is the global batch, split by rows) and the gradients are summed while backward
  /// runs, so every rank applies the same update, the whole batch's. Logs, validation and the callbacks'
  /// decisions are the same on every rank; only rank 0 prints and writes files. See docs/distributed.md.
  FitOptions& distribute(Communicator& communicator) {
    communicator_ = &communicator;
    return *this;
  }

 private:
  friend class Trainer;
  std::int64_t batch_size_ = 32;
  int epochs_ = 1;
  double validation_split_ = 0.0;
  std::vector<Array> validation_x_, validation_y_, validation_sample_weight_;
  std::vector<Array> sample_weight_;
  std::map<std::int64_t, double> class_weight_;
  std::int64_t steps_per_epoch_ = -1, validation_steps_ = -1;
  std::shared_ptr<Dataset> validation_dataset_;
  bool shuffle_ = true;
  std::uint64_t seed_ = 0;
  std::vector<CallbackPtr> callbacks_;
  int verbose_ = 1;
  int initial_epoch_ = 0;
  Communicator* communicator_ = nullptr;
};

/// evaluate()'s arguments, named as Keras's: kiln::EvaluateOptions().batch_size(64).sample_weight(w).
class EvaluateOptions {
 public:
  /// Rows per batch (default 32); must be positive.
  EvaluateOptions& batch_size(std::int64_t value) {
    batch_size_ = value;
    return *this;
  }
  /// Each sample's weight in the loss and the weighted metrics, as FitOptions::sample_weight.
  EvaluateOptions& sample_weight(Array value) {
    sample_weight_ = {std::move(value)};
    return *this;
  }
  /// One weight array per output.
  EvaluateOptions& sample_weight(std::vector<Array> values) {
    sample_weight_ = std::move(values);
    return *this;
  }
  /// With a Dataset: the batches evaluated (default: all of it). ValueError when it runs out before.
  EvaluateOptions& steps(std::int64_t value) {
    steps_ = value;
    return *this;
  }

 private:
  friend class Trainer;
  std::int64_t batch_size_ = 32, steps_ = -1;
  std::vector<Array> sample_weight_;
};

/// Every epoch's logs: history["loss"][e], history["val_mae"][e], ...
struct History {
  /// The epochs run, counted from 0 (from initial_epoch in a resumed run).
  std::vector<int> epochs;
  /// Each logs key's values, one per epoch run, in order: the epoch's logs after the callbacks' on_epoch_end.
  std::map<std::string, std::vector<double>> history;
  /// history[key]; KeyError naming the keys there are when `key` is not one of them.
  const std::vector<double>& operator[](const std::string& key) const;
};

}  // namespace kiln
