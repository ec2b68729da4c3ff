#include <kiln/train/callbacks.hpp>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>

#include <kiln/core/detail/files.hpp>
#include <kiln/core/detail/python_float.hpp>
#include <kiln/core/error.hpp>
#include <kiln/layers/model_base.hpp>
#include <kiln/optim/optimizer.hpp>

namespace kiln {

using detail::python_float;

namespace {

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Keras asks the compiled metric objects for their direction; kiln's callbacks see only names, so the
// direction comes from the name's last word. Suffixes let prefixed names work too: "dense_1_loss",
// "sparse_categorical_accuracy", "mean_squared_error".
std::optional<MonitorMode> infer_direction(const std::string& name) {
  static const char* const minimized[] = {"loss",  "error",        "mae",   "mse",     "rmse",       "mape",   "msle",
                                          "hinge", "crossentropy", "huber", "poisson", "divergence", "logcosh"};
  static const char* const maximized[] = {"accuracy", "acc",   "auc",        "precision",
                                          "recall",   "score", "similarity", "iou"};
  const auto matches = [&name](const std::string& word) { return name == word || ends_with(name, "_" + word); };
  for (const char* word : minimized)
    if (matches(word)) return MonitorMode::min;
  for (const char* word : maximized)
    if (matches(word)) return MonitorMode::max;
  return std::nullopt;
}

std::string available_keys(const Logs& logs) {
  std::string keys;
  for (const auto& [key, value] : logs) keys += (keys.empty() ? "" : ",") + key;
  return keys;
}

}  // namespace

MonitorMode resolve_monitor_mode(const std::string& who, const std::string& monitor, const std::string& mode) {
  if (mode == "min") return MonitorMode::min;
  if (mode == "max") return MonitorMode::max;
  if (mode != "auto") throw ConfigError(who + ": mode '" + mode + "' is not one of \"auto\", \"min\", \"max\"");
  const std::string name = monitor.rfind("val_", 0) == 0 ? monitor.substr(4) : monitor;
  if (const auto direction = infer_direction(name)) return *direction;
  throw ConfigError(who + " received monitor='" + monitor +
                    "', but kiln cannot tell whether that quantity should be minimized or maximized. Pass "
                    "mode \"min\" to monitor its lowest value or mode \"max\" for its highest.");
}

std::string Logs::keys() const {
  std::string text;
  for (const auto& [key, value] : *this) text += (text.empty() ? "" : ", ") + key;
  return text;
}

const double& Logs::at(const std::string& key) const {
  const auto found = find(key);
  if (found == end())
    throw KeyError("Logs have no '" + key + "'" +
                   (empty() ? std::string(" (they are empty)") : " (they have " + keys() + ")"));
  return found->second;
}

double& Logs::at(const std::string& key) { return const_cast<double&>(static_cast<const Logs&>(*this).at(key)); }

namespace {
// Where a silenced callback's messages go: a stream without a buffer writes nothing.
std::ostream& nowhere() {
  static std::ostream stream(nullptr);
  return stream;
}
}  // namespace

std::ostream& ReportingCallback::messages() const {
  if (silent_) return nowhere();
  return messages_ ? *messages_ : std::cout;
}
std::ostream& ReportingCallback::warnings() const { return warnings_ ? *warnings_ : std::cerr; }

// ---- EarlyStopping ----------------------------------------------------------------------------------------

// (A default argument `Options options = {}` cannot use the nested struct's member initializers inside the
// class, hence the separate default constructors.)
EarlyStopping::EarlyStopping() : EarlyStopping(Options{}) {}

EarlyStopping::EarlyStopping(Options options)
    : options_(std::move(options)), mode_(resolve_monitor_mode("EarlyStopping", options_.monitor, options_.mode)) {}

namespace {

ModelBase& model_of(const TrainingState& state) {
  if (!state.model) throw ValueError("EarlyStopping(restore_best_weights=true) needs TrainingState::model");
  return *state.model;
}

}  // namespace

void EarlyStopping::on_train_begin(TrainingState& state) {
  if (options_.restore_best_weights) model_of(state);  // fail before the first epoch, not after it
  // Reset everything, so one instance can serve several fit() calls (and models).
  wait_ = 0;
  stopped_epoch_ = 0;
  best_epoch_ = 0;
  best_.reset();
  best_weights_.clear();
  has_best_weights_ = false;
}

bool EarlyStopping::is_improvement(double value, double reference) const {
  const double delta = std::abs(options_.min_delta);
  return mode_ == MonitorMode::min ? value + delta < reference : value - delta > reference;
}

void EarlyStopping::on_epoch_end(TrainingState& state, int epoch, Logs& logs) {
  const auto found = logs.find(options_.monitor);
  if (found == logs.end()) {
    warnings() << "Warning: Early stopping conditioned on metric `" << options_.monitor
               << "` which is not available. Available metrics are: " << available_keys(logs) << '\n';
    return;
  }
  if (epoch < options_.start_from_epoch) return;
  const double current = found->second;
  ++wait_;
  // The first monitored epoch always counts as the best so far, so a snapshot exists from then on.
  if (!best_ || is_improvement(current, *best_)) {
    best_ = current;
    best_epoch_ = epoch;
    if (options_.restore_best_weights) {
      best_weights_ = model_of(state).get_weights();
      has_best_weights_ = true;
    }
    // A new best that still misses the baseline keeps counting towards patience.
    if (!options_.baseline || is_improvement(current, *options_.baseline)) wait_ = 0;
    return;
  }
  if (wait_ >= options_.patience && epoch > 0) {
    stopped_epoch_ = epoch;
    state.stop_training = true;
  }
}

void EarlyStopping::on_train_end(TrainingState& state, const Logs&) {
  if (stopped_epoch_ > 0 && options_.verbose > 0) messages() << "Epoch " << stopped_epoch_ + 1 << ": early stopping\n";
  // Keras 3 restores whenever it has a snapshot, also when training ran to the last epoch.
  if (!options_.restore_best_weights || !has_best_weights_) return;
  if (options_.verbose > 0)
    messages() << "Restoring model weights from the end of the best epoch: " << best_epoch_ + 1 << ".\n";
  model_of(state).set_weights(best_weights_);
}

// ---- learning-rate callbacks ----------------------------------------------------------------------------------

namespace {

// The optimizer of the fit `state` belongs to; ValueError naming the callback `who` when it has none.
Optimizer& training_optimizer(const TrainingState& state, const char* who = "ReduceLROnPlateau") {
  if (!state.optimizer) throw ValueError(std::string(who) + " needs TrainingState::optimizer");
  return *state.optimizer;
}

}  // namespace

LearningRateScheduler::LearningRateScheduler(Schedule schedule, int verbose)
    : schedule_(std::move(schedule)), verbose_(verbose) {
  if (!schedule_) throw ValueError("LearningRateScheduler: the schedule is an empty function");
}

void LearningRateScheduler::on_train_begin(TrainingState& state) {
  const Optimizer& optimizer = training_optimizer(state, "LearningRateScheduler");
  if (optimizer.schedule())
    throw ValueError("LearningRateScheduler cannot set the learning rate of " + optimizer.describe() +
                     ": a learning-rate schedule drives it");
}

void LearningRateScheduler::on_epoch_begin(TrainingState& state, int epoch) {
  Optimizer& optimizer = training_optimizer(state, "LearningRateScheduler");
  const double rate = schedule_(epoch, optimizer.current_learning_rate());
  if (!std::isfinite(rate) || rate < 0.0)
    throw ValueError("LearningRateScheduler: the schedule gave epoch " + std::to_string(epoch) + " the learning rate " +
                     python_float(rate) + "; it must be a finite number >= 0");
  optimizer.set_learning_rate(rate);
  if (verbose_ > 0)
    messages() << "\nEpoch " << epoch + 1 << ": LearningRateScheduler setting learning rate to " << python_float(rate)
               << ".\n";
}

void LearningRateScheduler::on_epoch_logs(TrainingState& state, int, Logs& logs) {
  logs["learning_rate"] = training_optimizer(state, "LearningRateScheduler").current_learning_rate();
}

// ---- ReduceLROnPlateau --------------------------------------------------------------------------------------

ReduceLROnPlateau::ReduceLROnPlateau() : ReduceLROnPlateau(Options{}) {}

ReduceLROnPlateau::ReduceLROnPlateau(Options options)
    : options_(std::move(options)), mode_(resolve_monitor_mode("ReduceLROnPlateau", options_.monitor, options_.mode)) {
  if (!(options_.factor < 1.0))
    throw ConfigError("ReduceLROnPlateau does not support a factor >= 1.0. Received factor=" +
                      python_float(options_.factor));
  reset();
}

void ReduceLROnPlateau::reset() {
  best_ =
      mode_ == MonitorMode::min ? std::numeric_limits<double>::infinity() : -std::numeric_limits<double>::infinity();
  wait_ = 0;
  cooldown_counter_ = 0;
}

void ReduceLROnPlateau::on_train_begin(TrainingState& state) {
  // Fail before the first epoch rather than at the first plateau, possibly hours in.
  const Optimizer& optimizer = training_optimizer(state);
  if (optimizer.schedule())
    throw ValueError("ReduceLROnPlateau cannot change the learning rate of " + optimizer.describe() +
                     ": a learning-rate schedule drives it");
  reset();
}

bool ReduceLROnPlateau::is_improvement(double value) const {
  return mode_ == MonitorMode::min ? value < best_ - options_.min_delta : value > best_ + options_.min_delta;
}

void ReduceLROnPlateau::on_epoch_logs(TrainingState& state, int, Logs& logs) {
  logs["learning_rate"] = training_optimizer(state).current_learning_rate();
}

void ReduceLROnPlateau::on_epoch_end(TrainingState& state, int epoch, Logs& logs) {
  const auto found = logs.find(options_.monitor);
  if (found == logs.end()) {
    warnings() << "Warning: Learning rate reduction is conditioned on metric `" << options_.monitor
               << "` which is not available. Available metrics are: " << available_keys(logs) << ".\n";
    return;
  }
  if (cooldown_counter_ > 0) {
    --cooldown_counter_;
    wait_ = 0;
  }
  if (is_improvement(found->second)) {
    best_ = found->second;
    wait_ = 0;
    return;
  }
  if (cooldown_counter_ > 0) return;  // epochs in cooldown do not count towards patience
  ++wait_;
  if (wait_ >= options_.patience) reduce(state, epoch);
}

void ReduceLROnPlateau::reduce(TrainingState& state, int epoch) {
  Optimizer& optimizer = training_optimizer(state);
  const double old_lr = optimizer.current_learning_rate();
  // At min_lr already: keep waiting (and counting) without touching the rate, as Keras does.
  if (!(old_lr > options_.min_lr)) return;
  const double new_lr = std::max(old_lr * options_.factor, options_.min_lr);
  optimizer.set_learning_rate(new_lr);
  if (options_.verbose > 0)
    messages() << "\nEpoch " << epoch + 1 << ": ReduceLROnPlateau reducing learning rate to " << python_float(new_lr)
               << ".\n";
  cooldown_counter_ = options_.cooldown;
  wait_ = 0;
}

// ---- CSVLogger ----------------------------------------------------------------------------------------------

CSVLogger::CSVLogger(std::string filename) : CSVLogger(std::move(filename), Options{}) {}

CSVLogger::CSVLogger(std::string filename, Options options) : filename_(std::move(filename)), options_(options) {}

CSVLogger::~CSVLogger() = default;

void CSVLogger::on_train_begin(TrainingState& state) {
  chief_ = state.chief;
  if (!chief_) return;  // rank 0 of a distributed fit writes the file
  // Appending to a file that has content keeps its header: a resumed run continues the same table.
  write_header_ = true;
  if (options_.append) {
    std::ifstream existing(filename_);
    write_header_ = !existing || existing.peek() == std::char_traits<char>::eof();
  }
  file_.reset();
  // A link is written through (std::ofstream follows it); a device, FIFO, socket or folder is refused
  // before opening it (opening a FIFO would wait for a reader).
  detail::write_target(filename_);
  auto file =
      std::make_unique<std::ofstream>(filename_, std::ios::out | (options_.append ? std::ios::app : std::ios::trunc));
  if (!file->is_open())
    throw SerializationError("CSVLogger: cannot open '" + filename_ + "' for writing: " + std::strerror(errno));
  file_ = std::move(file);
  keys_.clear();
  keys_fixed_ = false;
}

std::string CSVLogger::field(const std::string& text) const {
  if (text.find_first_of(std::string{options_.separator, '"', '\n', '\r'}) == std::string::npos) return text;
  std::string quoted = "\"";
  for (const char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

std::string CSVLogger::header_line() const {
  std::string line = "epoch";
  for (const std::string& key : keys_) line += options_.separator + field(key);
  return line + '\n';
}

void CSVLogger::on_epoch_end(TrainingState&, int epoch, Logs& logs) {
  if (!chief_) return;
  if (!file_) throw ValueError("CSVLogger '" + filename_ + "': on_epoch_end before on_train_begin");
  std::string text;
  if (!keys_fixed_) {
    for (const auto& [key, value] : logs) keys_.push_back(key);  // a std::map: already sorted
    keys_fixed_ = true;
    if (write_header_) text = header_line();
  }
  text += std::to_string(epoch);
  for (const std::string& key : keys_) {
    const auto found = logs.find(key);
    text += options_.separator + (found == logs.end() ? std::string("NA") : python_float(found->second));
  }
  text += '\n';
  // Past the file-size limit (ulimit -f) the kernel would kill the process with SIGXFSZ.
  // Every earlier row was flushed, so the file's size is what it holds (tellp says 0 in append mode).
  std::error_code unknown;
  const std::uintmax_t size = std::filesystem::file_size(filename_, unknown);
  detail::check_file_size_limit(filename_, (unknown ? 0 : size) + text.size());
  *file_ << text;
  file_->flush();
  if (!*file_) throw SerializationError("CSVLogger: writing '" + filename_ + "' failed");
}

void CSVLogger::on_train_end(TrainingState&, const Logs&) { file_.reset(); }

// ---- TerminateOnNaN -------------------------------------------------------------------------------------------

TerminateOnNaN::TerminateOnNaN() : TerminateOnNaN(Options{}) {}

void TerminateOnNaN::on_batch_end(TrainingState& state, std::int64_t batch, const Logs& logs) {
  const auto loss = logs.find("loss");
  if (loss == logs.end() || std::isfinite(loss->second)) return;
  // Counted from 1, as the progress bar ("Epoch 1/3", "12/47") and fit's own warning count them.
  const std::string where = "epoch " + std::to_string(epoch_ + 1) + ", batch " + std::to_string(batch + 1);
  if (options_.raise_error)
    throw ValueError("NaN or Inf loss encountered at " + where + ". Loss value: " + python_float(loss->second) +
                     ". Terminating training immediately.");
  warnings() << "Epoch " << epoch_ + 1 << ", batch " << batch + 1 << ": Invalid loss, terminating training\n";
  state.stop_training = true;
}

// ---- LambdaCallback -------------------------------------------------------------------------------------------

void LambdaCallback::on_train_begin(TrainingState& state) {
  if (hooks_.on_train_begin) hooks_.on_train_begin(state);
}
void LambdaCallback::on_train_end(TrainingState& state, const Logs& logs) {
  if (hooks_.on_train_end) hooks_.on_train_end(state, logs);
}
void LambdaCallback::on_epoch_begin(TrainingState& state, int epoch) {
  if (hooks_.on_epoch_begin) hooks_.on_epoch_begin(state, epoch);
}
void LambdaCallback::on_epoch_logs(TrainingState& state, int epoch, Logs& logs) {
  if (hooks_.on_epoch_logs) hooks_.on_epoch_logs(state, epoch, logs);
}
void LambdaCallback::on_epoch_end(TrainingState& state, int epoch, Logs& logs) {
  if (hooks_.on_epoch_end) hooks_.on_epoch_end(state, epoch, logs);
}
void LambdaCallback::on_batch_end(TrainingState& state, std::int64_t batch, const Logs& logs) {
  if (hooks_.on_batch_end) hooks_.on_batch_end(state, batch, logs);
}

// ---- the registry -------------------------------------------------------------------------------------------

namespace {

EarlyStopping::Options early_stopping_options(const Config& config) {
  ConfigReader args(config, "EarlyStopping");
  EarlyStopping::Options options;
  options.monitor = args.text("monitor", options.monitor);
  options.min_delta = args.number("min_delta", options.min_delta);
  options.patience = static_cast<int>(args.integer("patience", options.patience));
  options.verbose = static_cast<int>(args.integer("verbose", options.verbose));
  options.mode = args.text("mode", options.mode);
  if (args.has("baseline")) options.baseline = args.number("baseline", 0.0);
  options.restore_best_weights = args.boolean("restore_best_weights", options.restore_best_weights);
  options.start_from_epoch = static_cast<int>(args.integer("start_from_epoch", options.start_from_epoch));
  args.finish();
  return options;
}

ReduceLROnPlateau::Options reduce_lr_options(const Config& config) {
  ConfigReader args(config, "ReduceLROnPlateau");
  ReduceLROnPlateau::Options options;
  options.monitor = args.text("monitor", options.monitor);
  options.factor = args.number("factor", options.factor);
  options.patience = static_cast<int>(args.integer("patience", options.patience));
  options.verbose = static_cast<int>(args.integer("verbose", options.verbose));
  options.mode = args.text("mode", options.mode);
  options.min_delta = args.number("min_delta", options.min_delta);
  options.cooldown = static_cast<int>(args.integer("cooldown", options.cooldown));
  options.min_lr = args.number("min_lr", options.min_lr);
  args.finish();
  return options;
}

CallbackPtr csv_logger(const Config& config) {
  ConfigReader args(config, "CSVLogger");
  const std::string filename = args.text("filename", "");
  if (filename.empty()) args.fail("filename is required");
  CSVLogger::Options options;
  const std::string separator = args.text("separator", std::string(1, options.separator));
  if (separator.size() != 1) args.fail("separator must be one character, got '" + separator + "'");
  options.separator = separator.front();
  options.append = args.boolean("append", options.append);
  args.finish();
  return std::make_shared<CSVLogger>(filename, options);
}

CallbackPtr terminate_on_nan(const Config& config) {
  ConfigReader args(config, "TerminateOnNaN");
  TerminateOnNaN::Options options;
  options.raise_error = args.boolean("raise_error", options.raise_error);
  args.finish();
  return std::make_shared<TerminateOnNaN>(options);
}

}  // namespace

Registry<CallbackFactory>& callback_registry() {
  static Registry<CallbackFactory> registry("callback");
  return registry;
}

CallbackPtr create_callback(const std::string& name, const Config& config) {
  return callback_registry().get(name)(config);
}

KILN_REGISTER_CALLBACK("kiln>EarlyStopping", [](const Config& config) -> CallbackPtr {
  return std::make_shared<EarlyStopping>(early_stopping_options(config));
});
KILN_REGISTER_CALLBACK("kiln>ReduceLROnPlateau", [](const Config& config) -> CallbackPtr {
  return std::make_shared<ReduceLROnPlateau>(reduce_lr_options(config));
});
KILN_REGISTER_CALLBACK("kiln>CSVLogger", csv_logger);
KILN_REGISTER_CALLBACK("kiln>TerminateOnNaN", terminate_on_nan);

}  // namespace kiln
