#pragma once
// BackupAndRestore: Keras 3's callback for training that may be interrupted (a preempted machine, a killed
// job). It backs up the run (weights, optimizer state, and how far it got) in backup_dir; a fit() started
// again with the same call and the same callback restores the backup and goes on from there:
//
//   auto backup = std::make_shared<kiln::BackupAndRestore>("run/backup");
//   model.fit(x, y, kiln::FitOptions().epochs(50).callback(backup));   // killed at epoch 17? run it again
//
// The backup is one kiln file written atomically, so a kill at any moment leaves the last whole backup.
// With save_freq a number of batches, a run resumes mid-epoch: fit skips the batches already trained, drawn
// in the same order (shuffling is seeded by the seed and the epoch, dropout by the optimizer's step), so the
// final weights are bitwise those of an uninterrupted run. The epoch's logged means then cover only the
// batches after the restart, and callbacks keep no state across the restart (EarlyStopping's patience
// starts again), as in Keras.
#include <cstdint>
#include <string>
#include <variant>

#include <kiln/train/callbacks.hpp>

namespace kiln {

/// Keras 3's BackupAndRestore callback: backs up a fit in backup_dir and resumes it from there when the same fit
/// runs again (see the top of this header).
class BackupAndRestore : public ReportingCallback {
 public:
  /// "epoch", or a number of batches: back up after every that many batches, counted across epochs.
  using SaveFreq = std::variant<std::string, std::int64_t>;

  /// Keras's arguments, by its names and with its defaults.
  struct Options {
    std::string backup_dir;  ///< where the backup lives; created when missing
    SaveFreq save_freq = std::string("epoch");  ///< "epoch", or back up after every that many batches
    /// Keep the backup before the last one too (backup.prev.kiln), and restore it when the last cannot
    /// be read.
    bool double_checkpoint = false;
    /// Delete the backup when fit() ends normally (not after an exception, so that a run that failed can
    /// be started again from it).
    bool delete_checkpoint = true;
  };

  /// ConfigError for an empty backup_dir, or a save_freq other than "epoch" or a positive integer.
  explicit BackupAndRestore(Options options);
  /// Keras's defaults, backing up in `backup_dir`.
  explicit BackupAndRestore(std::string backup_dir);

  /// Restores the backup when there is one (state.model must be compiled; ValueError otherwise), and tells
  /// fit where to go on (state.resume_epoch, resume_batch). A backup of another model throws (ValueError or
  /// ShapeError) and leaves the model's weights as they were.
  void on_train_begin(TrainingState& state) override;
  void on_epoch_begin(TrainingState& state, int epoch) override;
  /// With save_freq "epoch": backs up (SerializationError when it cannot be written).
  void on_epoch_end(TrainingState& state, int epoch, Logs& logs) override;
  /// With an integer save_freq: backs up after every save_freq batches.
  void on_batch_end(TrainingState& state, std::int64_t batch, const Logs& logs) override;
  /// With delete_checkpoint: removes the backup files.
  void on_train_end(TrainingState& state, const Logs& logs) override;

  /// The options it was made with.
  const Options& options() const { return options_; }
  /// The file the backup is written to: backup_dir/backup.kiln.
  std::string backup_path() const;
  /// True when on_train_begin restored a backup in this fit.
  bool restored() const { return restored_; }

 private:
  void back_up(TrainingState& state, int epoch, std::int64_t batches_done);

  Options options_;
  int epoch_ = 0;
  std::int64_t batches_done_ = 0;  // in the current epoch, counting those before a restart
  std::int64_t batches_since_ = 0;
  bool restored_ = false;
};

}  // namespace kiln
