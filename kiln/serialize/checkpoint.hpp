#pragma once
// ModelCheckpoint: saves the model (or its weights) while fit() runs, as Keras 3's callback does.
//
//   kiln::ModelCheckpoint::Options every;
//   every.filepath = "checkpoints/forecast-{epoch:02d}-{val_loss:.4f}.kiln";
//   fit_options.callback(std::make_shared<kiln::ModelCheckpoint>(every));
//
//   // Only the best epoch so far, by validation loss:
//   fit_options.callback(std::make_shared<kiln::ModelCheckpoint>("best.kiln", /*save_best_only=*/true));
//
//   // Resuming after a crash: the file holds the optimizer's state and the epoch count.
//   kiln::Model model = kiln::load_model("checkpoints/forecast-07-0.0123.kiln");
//   model.fit(x, y, kiln::FitOptions().initial_epoch(model.epochs_trained()).epochs(20));
//
// Every save is kiln's atomic save (serialize/saving.hpp): a failure throws SerializationError out of
// fit() and leaves the previous file of that name whole. A save point whose loss or monitored value is
// not finite, or whose model has a weight that is not, saves nothing: it warns and keeps the previous file
// (after TerminateOnNaN stops a run, the last good checkpoint survives).
//
// It lives in serialize/, the room above train/, because it writes files.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <kiln/serialize/saving.hpp>  // load_model, to resume from a checkpoint
#include <kiln/train/callbacks.hpp>

namespace kiln {

// ---- file names with Python format fields --------------------------------------------------------------
//
// Keras fills `filepath` with Python's str.format(epoch=..., **logs); kiln reads the same fields:
//
//   "model-{epoch:02d}-{val_loss:.4f}.kiln"  ->  "model-03-0.4988.kiln"
//
// A field is {name} or {name:spec}; "{{" and "}}" are literal braces. The spec is Python's format
// mini-language without grouping, '#' and 'z': [[fill]align][sign][0][width][.precision][type], with
// align one of < > ^ =, sign one of + - space, and type one of
//   d        an integer                            {epoch:03d}     -> "007"
//   f F      fixed point, precision 6 by default   {loss:.4f}      -> "0.0123"
//   e E      scientific, precision 6 by default    {loss:.2e}      -> "1.23e-02"
//   g G      general (C's %g; Python's 'g')        {loss:g}        -> "0.0123"
//   %        times 100, fixed, then '%'            {acc:.1%}       -> "97.5%"
//   (none)   an integer as is; a number as Python's str() ("0.0123", "1e-05"), or with .precision as
//            Python's general format that keeps a ".0"  ({loss:.3} -> "0.0123")
// Integers take every type (f, e, g and % convert them); numbers do not take 'd', as in Python.

/// A field's value: an integer ({epoch}, {batch}) or a number (a log value).
using FieldValue = std::variant<std::int64_t, double>;
/// What a pattern's fields are filled from, by field name: {"epoch": 3, "val_loss": 0.4988}.
using FieldValues = std::map<std::string, FieldValue>;

namespace detail {
/// A parsed spec: [[fill]align][sign][0][width][.precision][type].
struct FormatSpec {
  char fill = ' ';
  char align = '\0';  ///< '<', '>', '^', '=' or none (right-aligned, as Python aligns numbers)
  char sign = '-';    ///< '+', '-' or ' '
  int width = 0;
  int precision = -1;  ///< none
  char type = '\0';    ///< none
};
struct FormatPiece {
  std::string text;       ///< the literal text before the field, braces unescaped
  std::string field;      ///< empty for the trailing text
  std::string spec_text;  ///< as written after ':'
  FormatSpec spec;
};
}  // namespace detail

/// A parsed pattern. ConfigError naming the field for malformed text or a spec kiln cannot format: an
/// unclosed '{', a single '}', an empty or nested field, a conversion ("{loss!r}"), an unknown type, ...
class FormatPattern {
 public:
  /// Parses `pattern` once, so that a malformed one fails where it is given, not at the first save.
  explicit FormatPattern(std::string pattern);

  const std::string& pattern() const { return pattern_; }  ///< as given, braces still escaped
  /// The names of the fields, in order of appearance (repeats included).
  std::vector<std::string> fields() const;
  /// Checks that `name` may be formatted as an integer (or as a number, when !integer), without a value:
  /// ConfigError naming the field when its spec does not take that kind ({val_loss:d}).
  void check_kind(const std::string& name, bool integer) const;
  /// The pattern with every field filled in. ConfigError naming the field and the known keys for a field
  /// that `values` lacks, or a spec that does not fit the value's type.
  std::string format(const FieldValues& values) const;

 private:
  std::string pattern_;
  std::vector<detail::FormatPiece> pieces_;
};

/// Formats `pattern` in one call: FormatPattern(pattern).format(values).
std::string format_fields(const std::string& pattern, const FieldValues& values);

/// One value by a spec's text, as Python's format(value, spec) does: format_field(0.5, ".2f") == "0.50".
/// ConfigError for a spec kiln cannot read or a type that does not fit the value.
std::string format_field(const FieldValue& value, const std::string& spec);

// ---- the callback -----------------------------------------------------------------------------------------

/// Keras 3's ModelCheckpoint callback: saves the model (or only its weights) at the end of every epoch or
/// every save_freq batches, to a file name that may hold the epoch and log values, and with save_best_only
/// only when the monitored value improves.
class ModelCheckpoint : public ReportingCallback {
 public:
  /// "epoch", or a number of batches: save after every that many batches, counted across epochs.
  using SaveFreq = std::variant<std::string, std::int64_t>;

  /// Keras's arguments, by its names and with its defaults.
  struct Options {
    /// Where to save, with format fields: {epoch} (1-based, as Keras writes it), {batch} (1-based within
    /// the epoch; only with an integer save_freq), and any log key ({loss}, {val_loss:.4f}, {mae:.3e}).
    /// Log keys are known only when the logs are: a name the logs lack fails (ConfigError listing the
    /// keys there are) at the first save point, the end of the first epoch. A missing folder is created,
    /// as Keras does.
    std::string filepath;
    /// The log key that save_best_only compares: "val_loss", "loss", "val_accuracy", ... With save_best_only,
    /// a save point whose logs lack it saves nothing (warning once, as Keras does). A non-finite value of it
    /// saves nothing either.
    std::string monitor = "val_loss";
    /// 1 prints Keras's message at each save point ("Epoch 3: val_loss improved from 0.51234 to 0.49876,
    /// saving model to best.kiln") to std::cout unless redirected; like Keras's, each message starts with
    /// a newline, so that a live progress bar keeps its line.
    int verbose = 0;
    /// Save only when `monitor` improves on the best value so far (strictly, by mode); a file name without
    /// fields then always holds the best model. The best is kept across fit() calls, as in Keras.
    bool save_best_only = false;
    /// save_weights (a file load_weights reads) instead of save_model (a file load_model reads).
    bool save_weights_only = false;
    std::string mode = "auto";  ///< "min", "max", or "auto" (from the monitor's name: see resolve_monitor_mode)
    /// A checkpoint saved mid-epoch records only the epochs finished before it (epochs_trained), so a run
    /// resumed from it starts that epoch over; resume from epoch-end checkpoints to match an
    /// uninterrupted run exactly. Batch logs are the epoch's running means and have no val_* values.
    SaveFreq save_freq = std::string("epoch");
    /// With save_best_only: the value to beat before the first save (e.g. the best of an earlier run).
    std::optional<double> initial_value_threshold;
  };

  /// ConfigError for an empty or malformed filepath, {batch} with save_freq "epoch", a spec that does not
  /// fit its field ({epoch:.2e} is fine, {loss:d} is not), a save_freq other than "epoch" or a positive
  /// integer, an unknown mode, or (with save_best_only) an "auto" monitor whose direction is unknown.
  explicit ModelCheckpoint(Options options);
  /// Every other option at its default: saves after every epoch, or with save_best_only at each new low of
  /// val_loss.
  /// Throws as the constructor from Options does.
  explicit ModelCheckpoint(std::string filepath, bool save_best_only = false);

  /// Needs state.model (ValueError before the first epoch otherwise).
  void on_train_begin(TrainingState& state) override;
  /// Notes the epoch, which names the saves made after batches.
  void on_epoch_begin(TrainingState& state, int epoch) override;
  /// With save_freq "epoch": a save point. ConfigError when the logs lack a field of filepath,
  /// SerializationError when the file cannot be written.
  void on_epoch_end(TrainingState& state, int epoch, Logs& logs) override;
  /// With an integer save_freq: a save point after every save_freq batches, counted across epochs. Throws
  /// as on_epoch_end does.
  void on_batch_end(TrainingState& state, std::int64_t batch, const Logs& logs) override;

  const Options& options() const { return options_; }  ///< as given
  /// The direction `monitor` improves in: `mode` as given, or inferred from the name for "auto" (min when
  /// the name tells nothing and save_best_only is off, since nothing then compares it).
  MonitorMode monitor_mode() const { return mode_; }
  /// The best monitored value so far (the threshold, or +-inf, before a save_best_only save).
  double best() const { return best_; }
  /// Every file written, in order (a name written twice appears twice).
  const std::vector<std::string>& saved_paths() const { return saved_; }
  /// The path the next save of (epoch, batch) with these logs would write: ConfigError naming the field
  /// and the available keys when the logs lack one. `batch` counts from 0; negative means none.
  std::string file_path(int epoch, std::int64_t batch, const Logs& logs) const;

 private:
  bool saves_per_epoch() const { return std::holds_alternative<std::string>(options_.save_freq); }
  void save_point(TrainingState& state, int epoch, std::int64_t batch, const Logs& logs);
  void write(TrainingState& state, const std::string& path);

  Options options_;
  FormatPattern path_format_;
  MonitorMode mode_ = MonitorMode::min;
  double best_ = 0.0;
  int current_epoch_ = 0;
  std::int64_t batches_since_save_ = 0;
  bool warned_missing_monitor_ = false;
  std::vector<std::string> saved_;
};

}  // namespace kiln
