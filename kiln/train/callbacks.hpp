#pragma once
// Callbacks: code that fit() calls at the edges of training, epochs and batches, as in Keras.
//
//   struct PrintEpochs : kiln::Callback {
//     void on_epoch_end(kiln::TrainingState&, int epoch, kiln::Logs& logs) override {
//       std::printf("epoch %d: loss %.4f\n", epoch + 1, logs.at("loss"));
//     }
//   };
//   model.fit(x, y, kiln::FitOptions().epochs(10).callback(std::make_shared<PrintEpochs>()));
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/registry.hpp>
#include <kiln/layers/config.hpp>

namespace kiln {

class ModelBase;
class Optimizer;

/// Values of one batch or epoch by name: "loss", "mae", "val_loss", "learning_rate", ... A std::map whose
/// at() throws kiln::KeyError listing the keys there are (std::map's says only "map::at").
class Logs : public std::map<std::string, double> {
 public:
  using std::map<std::string, double>::map;
  /// The value of `key`; KeyError naming the keys there are when it is missing.
  double& at(const std::string& key);
  /// The value of `key`; KeyError naming the keys there are when it is missing.
  const double& at(const std::string& key) const;
  std::string keys() const;  ///< "loss, mae, val_loss"
};

/// What callbacks may look at and change while fit() runs.
struct TrainingState {
  /// The model fit() trains. A callback that needs it (EarlyStopping with restore_best_weights) throws
  /// ValueError in on_train_begin when it is null, as it is when code drives a callback by hand.
  ModelBase* model = nullptr;
  /// The optimizer compile() was given. ReduceLROnPlateau sets its learning rate, and throws ValueError in
  /// on_train_begin when it is null.
  Optimizer* optimizer = nullptr;
  int epochs = 0;  ///< planned
  /// Batches per epoch: the training rows (after any validation_split) over batch_size, rounded up.
  std::int64_t steps_per_epoch = 0;
  bool stop_training = false;  ///< set to end fit() after the current epoch (or batch)
  /// FitOptions::verbose: 0 silent, 1 a live bar, 2 one line per epoch.
  std::int64_t verbose = 1;
  /// Set in on_train_begin to resume an interrupted run (BackupAndRestore does): the epoch to start at
  /// instead of FitOptions::initial_epoch, and how many of its batches were trained already (fit skips
  /// them, in the same order the interrupted run drew). -1: no resumption.
  int resume_epoch = -1;
  std::int64_t resume_batch = 0;  ///< batches of resume_epoch already trained
  /// This process writes the files and prints: true, but on the ranks other than 0 of a distributed fit
  /// (FitOptions::distribute), whose callbacks still run and decide alike but do not write (CSVLogger,
  /// ModelCheckpoint, BackupAndRestore check it).
  bool chief = true;
};

/// Code that fit() calls at the edges of training, epochs and batches; override the hooks you need, the
/// others do nothing. Epochs count from 0 (a run resumed with FitOptions::initial_epoch(e) starts at e),
/// batches from 0 in each epoch.
class Callback {
 public:
  virtual ~Callback() = default;
  /// Once, after fit() has checked its data and options and before the first epoch: the place to check
  /// what the callback needs (state.model, state.optimizer) rather than fail hours in.
  virtual void on_train_begin(TrainingState&) {}
  /// Once, after the last epoch run, also after an early stop; `logs` are the last epoch's (empty when no
  /// epoch ran). Not called when a callback or a step throws.
  virtual void on_train_end(TrainingState&, const Logs&) {}
  /// Before the epoch's first batch.
  virtual void on_epoch_begin(TrainingState&, int /*epoch*/) {}
  /// Runs for every callback before any callback's on_epoch_end: a callback that reports a value adds it to
  /// the epoch's logs here (ReduceLROnPlateau writes "learning_rate"), so that every callback sees it in
  /// on_epoch_end whatever the order the callbacks were given in (a CSVLogger before it too).
  virtual void on_epoch_logs(TrainingState&, int /*epoch*/, Logs& /*logs*/) {}
  /// `logs` holds the epoch's means, the validation values and what on_epoch_logs added.
  virtual void on_epoch_end(TrainingState&, int /*epoch*/, Logs& /*logs*/) {}
  /// After each training step; `logs` hold the epoch's running means so far ("loss", the metrics), not the
  /// batch's own values, as in Keras 3.
  virtual void on_batch_end(TrainingState&, std::int64_t /*batch*/, const Logs& /*logs*/) {}
};

/// How FitOptions holds callbacks: shared, so the caller can still read one's state after fit() returns.
using CallbackPtr = std::shared_ptr<Callback>;

// ---- built-in callbacks (Keras 3's, with its argument names and defaults) ---------------------------------
//
//   kiln::EarlyStopping::Options stop;
//   stop.patience = 5;
//   stop.restore_best_weights = true;
//   fit_options.callback(std::make_shared<kiln::EarlyStopping>(stop));

/// Which way a monitored quantity improves.
/// min: lower is better (losses, errors); max: higher is better (accuracies, scores).
enum class MonitorMode { min, max };

/// Keras's mode argument: "min", "max", or "auto", which infers the direction from the name without its
/// "val_" prefix: losses and errors ("loss", "dense_1_loss", "mae", "mean_squared_error", ...) are minimized,
/// accuracies and scores ("accuracy", "acc", "auc", "f1_score", ...) maximized. Throws ConfigError naming
/// `who` for a mode other than the three, or an "auto" name whose direction is unknown (pass "min" or "max").
MonitorMode resolve_monitor_mode(const std::string& who, const std::string& monitor, const std::string& mode);

/// A callback that prints: verbose messages go to std::cout and warnings to std::cerr unless redirected
/// (tests capture them in a std::ostringstream).
class ReportingCallback : public Callback {
 public:
  /// Sends verbose messages to `messages` and warnings to `warnings` from now on. The callback keeps
  /// pointers: both streams must outlive its use.
  void redirect(std::ostream& messages, std::ostream& warnings) {
    messages_ = &messages;
    warnings_ = &warnings;
  }
  /// Drops verbose messages (true) or prints them again (false): a distributed fit silences its callbacks on
  /// the ranks other than 0 while it runs; rank 0 prints them.
  void silence(bool silent) { silent_ = silent; }

 protected:
  /// Where verbose messages go: the stream given to redirect(), else std::cout.
  std::ostream& messages() const;
  /// Where warnings go: the stream given to redirect(), else std::cerr.
  std::ostream& warnings() const;

 private:
  std::ostream* messages_ = nullptr;
  std::ostream* warnings_ = nullptr;
  bool silent_ = false;
};

/// Stops training when `monitor` has not improved for `patience` epochs (sets state.stop_training).
/// With restore_best_weights the model ends training with the weights of its best epoch, also when no
/// early stop happened (as Keras 3 does); that needs state.model.
class EarlyStopping : public ReportingCallback {
 public:
  /// EarlyStopping's arguments, with Keras's names and defaults.
  struct Options {
    /// The logs key watched at each epoch's end (default "val_loss", which needs validation data). An epoch
    /// whose logs lack it prints a warning listing the keys there are, and does not count.
    std::string monitor = "val_loss";
    double min_delta = 0.0;  ///< an improvement must beat the best by more than |min_delta|
    /// Epochs without improvement after which training stops (default 0). 0 and 1 both stop at the first
    /// epoch that does not improve; the first monitored epoch always counts as the best so far.
    int patience = 0;
    /// 1 or more prints "Epoch N: early stopping" and, when it restores, the best epoch (default 0: silent).
    int verbose = 0;
    /// "min", "max" or "auto" (default), which infers the direction from `monitor` (see resolve_monitor_mode).
    std::string mode = "auto";
    /// Epochs that do not beat the baseline do not reset the patience count.
    std::optional<double> baseline;
    /// At the end of training, set the model's weights to those of the best monitored epoch (default false).
    /// Needs state.model: on_train_begin throws ValueError without it.
    bool restore_best_weights = false;
    int start_from_epoch = 0;  ///< epochs before this one are not monitored (warm-up)
  };

  /// With Keras's defaults (see Options): watches "val_loss" and stops at its first epoch without improvement.
  EarlyStopping();
  /// Throws ConfigError for an unknown mode, or an "auto" monitor whose direction cannot be inferred.
  explicit EarlyStopping(Options options);

  /// Resets the count, the best value and the saved weights, so one instance can serve several fit()
  /// calls. Throws ValueError when restore_best_weights is set and state.model is null.
  void on_train_begin(TrainingState& state) override;
  void on_epoch_end(TrainingState& state, int epoch, Logs& logs) override;
  /// Prints the stop (verbose) and, with restore_best_weights, gives the model its best epoch's weights.
  void on_train_end(TrainingState& state, const Logs& logs) override;

  /// The options it was made with.
  const Options& options() const { return options_; }
  /// The direction `mode` resolved to.
  MonitorMode monitor_mode() const { return mode_; }
  int stopped_epoch() const { return stopped_epoch_; }  ///< 0 until a stop (Keras's convention)
  std::optional<double> best() const { return best_; }  ///< none until a monitored epoch
  /// The epoch of best(), counted from 0; 0 until a monitored epoch.
  int best_epoch() const { return best_epoch_; }
  /// Monitored epochs counted towards patience since the count was last reset.
  int wait() const { return wait_; }

 private:
  bool is_improvement(double value, double reference) const;

  Options options_;
  MonitorMode mode_;
  int wait_ = 0;
  int stopped_epoch_ = 0;
  int best_epoch_ = 0;
  std::optional<double> best_;
  std::vector<Array> best_weights_;
  bool has_best_weights_ = false;
};

/// Keras's LearningRateScheduler: at the start of each epoch, sets the optimizer's learning rate to
/// schedule(epoch, current rate), and writes the epoch's rate to logs["learning_rate"]. Holds a function,
/// so it is not registered by name (as Keras's is not serializable). Needs state.optimizer with a constant
/// learning rate (not a LearningRateSchedule, which sets the rate every step).
///
///   auto halve_after_10 = std::make_shared<kiln::LearningRateScheduler>(
///       [](int epoch, double rate) { return epoch < 10 ? rate : rate * 0.5; });
class LearningRateScheduler : public ReportingCallback {
 public:
  /// The new rate from the epoch (counted from 0) and the current rate.
  using Schedule = std::function<double(int epoch, double learning_rate)>;
  /// verbose 1 or more prints "Epoch N: LearningRateScheduler setting learning rate to R." each epoch.
  /// ValueError for an empty schedule.
  explicit LearningRateScheduler(Schedule schedule, int verbose = 0);

  /// ValueError when state.optimizer is null or a learning-rate schedule drives it.
  void on_train_begin(TrainingState& state) override;
  /// Sets the rate; ValueError naming the epoch when the schedule returns a negative or non-finite rate.
  void on_epoch_begin(TrainingState& state, int epoch) override;
  void on_epoch_logs(TrainingState& state, int epoch, Logs& logs) override;

 private:
  Schedule schedule_;
  int verbose_;
};

/// Multiplies the optimizer's learning rate by `factor` when `monitor` has not improved for `patience`
/// epochs, never below min_lr, then waits `cooldown` epochs. Writes the epoch's learning rate (before any
/// reduction) to logs["learning_rate"] in on_epoch_logs. Needs state.optimizer with a constant learning
/// rate (not a schedule).
class ReduceLROnPlateau : public ReportingCallback {
 public:
  /// ReduceLROnPlateau's arguments, with Keras's names and defaults.
  struct Options {
    /// The logs key watched at each epoch's end (default "val_loss", which needs validation data). An epoch
    /// whose logs lack it prints a warning listing the keys there are, and does not count.
    std::string monitor = "val_loss";
    double factor = 0.1;  ///< new_lr = lr * factor; must be < 1
    /// Epochs without improvement after which the learning rate is reduced (default 10).
    int patience = 10;
    /// 1 or more prints "Epoch N: ReduceLROnPlateau reducing learning rate to ..." (default 0: silent).
    int verbose = 0;
    /// "min", "max" or "auto" (default), which infers the direction from `monitor` (see resolve_monitor_mode).
    std::string mode = "auto";
    double min_delta = 1e-4;  ///< min mode: an improvement is below best - min_delta
    /// Epochs after a reduction that do not count towards patience (default 0).
    int cooldown = 0;
    /// The floor of the learning rate (default 0): a reduction stops there, and a rate at it is left alone.
    double min_lr = 0.0;
  };

  /// With Keras's defaults (see Options): multiplies the rate by 0.1 after 10 epochs without improvement.
  ReduceLROnPlateau();
  /// Throws ConfigError for factor >= 1, an unknown mode, or an "auto" monitor of unknown direction.
  explicit ReduceLROnPlateau(Options options);

  /// Resets the best value, the count and the cooldown. Throws ValueError when state.optimizer is null or a
  /// learning-rate schedule drives it.
  void on_train_begin(TrainingState& state) override;
  void on_epoch_logs(TrainingState& state, int epoch, Logs& logs) override;
  void on_epoch_end(TrainingState& state, int epoch, Logs& logs) override;

  /// The options it was made with.
  const Options& options() const { return options_; }
  /// The direction `mode` resolved to.
  MonitorMode monitor_mode() const { return mode_; }
  /// The best monitored value so far: infinity in min mode (-infinity in max mode) before the first.
  double best() const { return best_; }
  /// Epochs counted towards patience since the last improvement or reduction.
  int wait() const { return wait_; }
  /// Cooldown epochs left; 0 when not cooling down.
  int cooldown_counter() const { return cooldown_counter_; }

 private:
  void reset();
  bool is_improvement(double value) const;
  void reduce(TrainingState& state, int epoch);

  Options options_;
  MonitorMode mode_;
  double best_ = 0.0;
  int wait_ = 0;
  int cooldown_counter_ = 0;
};

/// Streams each epoch's logs to a CSV file: a header `epoch,<log keys sorted>` fixed by the first epoch,
/// then one row per epoch (0-based epoch), flushed at once so a crashed run keeps its rows. A key missing
/// from a later epoch is written NA; values round-trip exactly (shortest form that reads back the same).
class CSVLogger : public Callback {
 public:
  /// CSVLogger's arguments besides the file name, with Keras's names and defaults.
  struct Options {
    /// Between fields (default ','). A key holding it, a quote or a line break is written quoted.
    char separator = ',';
    bool append = false;  ///< keep an existing file's rows (and its header, if it has one)
  };

  /// Writes to `filename`, replaced at each fit() (see Options::append). Nothing is opened before
  /// on_train_begin.
  explicit CSVLogger(std::string filename);
  /// Writes to `filename` with the given separator and append mode.
  CSVLogger(std::string filename, Options options);
  ~CSVLogger() override;

  /// Opens the file (through a symbolic link, to its target). SerializationError naming it when it cannot be
  /// opened or is a folder, device, FIFO or socket.
  void on_train_begin(TrainingState& state) override;
  /// Writes the epoch's row, after the header when it is the first and the file needs one. SerializationError
  /// when the row cannot be written or would pass the file-size limit (ulimit -f); ValueError before
  /// on_train_begin.
  void on_epoch_end(TrainingState& state, int epoch, Logs& logs) override;
  /// Closes the file.
  void on_train_end(TrainingState& state, const Logs& logs) override;

  /// The path given to the constructor.
  const std::string& filename() const { return filename_; }
  /// The options it was made with.
  const Options& options() const { return options_; }

 private:
  std::string field(const std::string& text) const;  ///< quoted when it holds the separator, a quote or a newline
  std::string header_line() const;

  std::string filename_;
  Options options_;
  std::unique_ptr<std::ofstream> file_;
  std::vector<std::string> keys_;
  bool keys_fixed_ = false;
  bool chief_ = true;  // from on_train_begin: false on a distributed fit's ranks other than 0
  bool write_header_ = true;
};

/// Stops training when a batch's "loss" is NaN or infinite, printing `Epoch E, batch B: Invalid loss,
/// terminating training` (to std::cerr unless redirected), E and B counted from 1 as the progress bar and fit's
/// own warning count them. With raise_error it throws ValueError instead, so that no
/// other callback's on_train_end runs (e.g. one that would save the broken model).
class TerminateOnNaN : public ReportingCallback {
 public:
  /// TerminateOnNaN's argument, with Keras's name and default.
  struct Options {
    /// Throw ValueError at the first NaN or infinite loss instead of stopping after the batch (default false).
    bool raise_error = false;
  };
  /// Stops training after the batch, with a warning (the default Options).
  TerminateOnNaN();
  /// Stops training, or throws with options.raise_error.
  explicit TerminateOnNaN(Options options) : options_(options) {}

  /// Notes the epoch, for the message.
  void on_epoch_begin(TrainingState&, int epoch) override { epoch_ = epoch; }
  /// Checks logs["loss"], the epoch's running mean; logs without a "loss" pass.
  void on_batch_end(TrainingState& state, std::int64_t batch, const Logs& logs) override;

 private:
  Options options_;
  int epoch_ = 0;
};

/// A callback made of functions, for code that does not want a subclass; unset hooks do nothing.
///
///   kiln::LambdaCallback::Options hooks;
///   hooks.on_epoch_end = [](kiln::TrainingState&, int epoch, kiln::Logs& logs) { ... };
///   auto callback = std::make_shared<kiln::LambdaCallback>(hooks);
class LambdaCallback : public Callback {
 public:
  /// One function per Callback hook, called with the hook's arguments; an empty one is skipped.
  struct Options {
    /// Called by on_train_begin (Callback::on_train_begin).
    std::function<void(TrainingState&)> on_train_begin;
    /// Called by on_train_end (Callback::on_train_end).
    std::function<void(TrainingState&, const Logs&)> on_train_end;
    /// Called by on_epoch_begin (Callback::on_epoch_begin).
    std::function<void(TrainingState&, int)> on_epoch_begin;
    /// Called by on_epoch_logs (Callback::on_epoch_logs): the place to add a value to the epoch's logs.
    std::function<void(TrainingState&, int, Logs&)> on_epoch_logs;
    /// Called by on_epoch_end (Callback::on_epoch_end).
    std::function<void(TrainingState&, int, Logs&)> on_epoch_end;
    /// Called by on_batch_end (Callback::on_batch_end).
    std::function<void(TrainingState&, std::int64_t, const Logs&)> on_batch_end;
  };
  /// Calls the hooks that are set; it keeps copies of the functions.
  explicit LambdaCallback(Options hooks) : hooks_(std::move(hooks)) {}

  /// Calls hooks.on_train_begin if set.
  void on_train_begin(TrainingState& state) override;
  /// Calls hooks.on_train_end if set.
  void on_train_end(TrainingState& state, const Logs& logs) override;
  /// Calls hooks.on_epoch_begin if set.
  void on_epoch_begin(TrainingState& state, int epoch) override;
  /// Calls hooks.on_epoch_logs if set.
  void on_epoch_logs(TrainingState& state, int epoch, Logs& logs) override;
  /// Calls hooks.on_epoch_end if set.
  void on_epoch_end(TrainingState& state, int epoch, Logs& logs) override;
  /// Calls hooks.on_batch_end if set.
  void on_batch_end(TrainingState& state, std::int64_t batch, const Logs& logs) override;

 private:
  Options hooks_;
};

// ---- the registry ---------------------------------------------------------------------------------------

/// A registered callback class: how to make one from its config (Keras's constructor arguments).
using CallbackFactory = std::function<CallbackPtr(const Config&)>;

/// Every callback class by key ("kiln>EarlyStopping", "kiln>ModelCheckpoint", ...); "EarlyStopping" finds it
/// too (core/registry.hpp). LambdaCallback holds functions and has no config, so it is not registered.
Registry<CallbackFactory>& callback_registry();

/// create_callback("EarlyStopping", {{"patience", 3}, {"restore_best_weights", true}}): the arguments are
/// Keras's (EarlyStopping: monitor, min_delta, patience, verbose, mode, baseline, restore_best_weights,
/// start_from_epoch; ReduceLROnPlateau: monitor, factor, patience, verbose, mode, min_delta, cooldown,
/// min_lr; CSVLogger: filename, separator, append; TerminateOnNaN: raise_error; ModelCheckpoint: filepath,
/// monitor, verbose, save_best_only, save_weights_only, mode, save_freq, initial_value_threshold).
/// ConfigError for an unknown class or argument, with the nearest names.
CallbackPtr create_callback(const std::string& name, const Config& config = {});

}  // namespace kiln

// Registers a callback factory under "Package>Name": KILN_REGISTER_CALLBACK("acme>Notify", [](const kiln::Config&
// config) -> kiln::CallbackPtr { ... });
#define KILN_REGISTER_CALLBACK(key, ...) KILN_AT_STARTUP(::kiln::callback_registry().add(key, __VA_ARGS__))
