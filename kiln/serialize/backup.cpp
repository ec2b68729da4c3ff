#include <kiln/serialize/backup.hpp>

#include <filesystem>
#include <system_error>

#include <kiln/core/error.hpp>
#include <kiln/layers/config.hpp>
#include <kiln/serialize/detail/training_backup.hpp>

namespace kiln {

namespace {

namespace fs = std::filesystem;

bool exists(const std::string& path) {
  std::error_code error;
  return fs::exists(path, error);
}

}  // namespace

BackupAndRestore::BackupAndRestore(Options options) : options_(std::move(options)) {
  if (options_.backup_dir.empty()) throw ConfigError("BackupAndRestore: backup_dir is empty");
  if (const auto* name = std::get_if<std::string>(&options_.save_freq); name != nullptr && *name != "epoch")
    throw ConfigError("BackupAndRestore: save_freq must be \"epoch\" or a positive integer, got '" + *name + "'");
  if (const auto* every = std::get_if<std::int64_t>(&options_.save_freq); every != nullptr && *every <= 0)
    throw ConfigError("BackupAndRestore: save_freq must be \"epoch\" or a positive integer, got " +
                      std::to_string(*every));
}

BackupAndRestore::BackupAndRestore(std::string backup_dir) : BackupAndRestore(Options{std::move(backup_dir)}) {}

std::string BackupAndRestore::backup_path() const { return (fs::path(options_.backup_dir) / "backup.kiln").string(); }

void BackupAndRestore::on_train_begin(TrainingState& state) {
  if (state.model == nullptr) throw ValueError("BackupAndRestore needs the model fit() trains (state.model)");
  restored_ = false;
  batches_since_ = 0;
  // In a distributed fit, rank 0 restores; the fit copies its weights, state and resume point to the others.
  if (!state.chief) return;
  const std::string last = backup_path();
  const std::string previous = (fs::path(options_.backup_dir) / "backup.prev.kiln").string();
  Config progress;
  if (exists(last)) {
    try {
      progress = detail::restore_training_backup(*state.model, last);
    } catch (const SerializationError& damaged) {
      // The last backup cannot be read (not from a kill: it is written atomically): the one before it.
      if (!options_.double_checkpoint || !exists(previous)) throw;
      warnings() << "BackupAndRestore: " << damaged.what() << "; restoring the backup before it\n";
      progress = detail::restore_training_backup(*state.model, previous);
    }
  } else if (options_.double_checkpoint && exists(previous)) {
    progress = detail::restore_training_backup(*state.model, previous);
  } else {
    return;
  }
  state.resume_epoch = static_cast<int>(progress.get_int("epoch"));
  state.resume_batch = progress.get_int("batch");
  restored_ = true;
}

void BackupAndRestore::on_epoch_begin(TrainingState& state, int epoch) {
  // The first epoch of a resumed run starts with the batches the interrupted run trained.
  batches_done_ = restored_ && epoch == state.resume_epoch ? state.resume_batch : 0;
  epoch_ = epoch;
}

void BackupAndRestore::on_batch_end(TrainingState& state, std::int64_t batch, const Logs&) {
  batches_done_ = batch + 1;
  const auto* every = std::get_if<std::int64_t>(&options_.save_freq);
  if (every == nullptr || ++batches_since_ < *every) return;
  batches_since_ = 0;
  // A backup after an epoch's last batch is the next epoch's start.
  if (state.steps_per_epoch > 0 && batches_done_ >= state.steps_per_epoch)
    back_up(state, epoch_ + 1, 0);
  else
    back_up(state, epoch_, batches_done_);
}

void BackupAndRestore::on_epoch_end(TrainingState& state, int epoch, Logs&) {
  if (std::holds_alternative<std::string>(options_.save_freq)) back_up(state, epoch + 1, 0);
}

void BackupAndRestore::on_train_end(TrainingState& state, const Logs&) {
  if (!options_.delete_checkpoint || !state.chief) return;
  std::error_code error;
  for (const char* name : {"backup.kiln", "backup.prev.kiln"}) fs::remove(fs::path(options_.backup_dir) / name, error);
  fs::remove(options_.backup_dir, error);  // only when nothing else is in it
}

void BackupAndRestore::back_up(TrainingState& state, int epoch, std::int64_t batches_done) {
  if (!state.chief) return;  // rank 0 of a distributed fit writes the backup; every rank restores from it
  std::error_code error;
  fs::create_directories(options_.backup_dir, error);
  if (error)
    throw SerializationError("BackupAndRestore: cannot create '" + options_.backup_dir + "': " + error.message());
  const std::string last = backup_path();
  if (options_.double_checkpoint && exists(last)) {
    fs::copy_file(last, fs::path(options_.backup_dir) / "backup.prev.kiln", fs::copy_options::overwrite_existing, error);
    if (error) throw SerializationError("BackupAndRestore: cannot keep the previous backup: " + error.message());
  }
  detail::save_training_backup(*state.model, last, Config{{"epoch", epoch}, {"batch", batches_done}});
}

}  // namespace kiln
