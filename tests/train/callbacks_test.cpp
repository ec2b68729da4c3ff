#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/error.hpp>
#include <kiln/layers/core/dense.hpp>
#include <kiln/layers/model_base.hpp>
#include <kiln/optim/optimizer.hpp>
#include <kiln/optim/schedules.hpp>
#include <kiln/train/callbacks.hpp>
#include <kiln/models/model.hpp>

namespace fs = std::filesystem;
using kiln::Array;
using kiln::Logs;
using kiln::TrainingState;

namespace {

const double not_a_number = std::numeric_limits<double>::quiet_NaN();
const double infinity = std::numeric_limits<double>::infinity();

// Dense(2) on 3 features: a real model whose 8 weights the callbacks snapshot and restore.
std::shared_ptr<kiln::SequentialModel> small_model() {
  auto model = std::make_shared<kiln::SequentialModel>();
  model->add(kiln::Dense(2));
  model->build_for(kiln::Shape{kiln::Shape::unknown, 3});
  return model;
}

// Weights that differ in every element from epoch to epoch, so a restore from the wrong epoch shows.
std::vector<Array> weights_of_epoch(const kiln::ModelBase& model, int epoch) {
  std::vector<Array> weights = model.get_weights();
  for (Array& weight : weights)
    for (std::size_t i = 0; i < weight.size(); ++i)
      weight.set_flat(i, 10.0 * epoch + 0.125 * static_cast<double>(i) + 0.1);
  return weights;
}

bool bitwise_equal(const std::vector<Array>& a, const std::vector<Array>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!a[i].bitwise_equal(b[i])) return false;
  return true;
}

// Drives a callback through fit()'s calls with one monitored value per epoch; the model gets the epoch's
// own weights before each on_epoch_end. Returns the number of epochs run.
struct FakeFit {
  std::shared_ptr<kiln::SequentialModel> model = small_model();
  kiln::OptimizerPtr optimizer = kiln::create_optimizer("sgd", kiln::Config{{"learning_rate", 1.0}});
  TrainingState state;
  std::vector<Logs> epoch_logs;  // what each epoch's logs held after the callback ran

  FakeFit() {
    state.model = model.get();
    state.optimizer = optimizer.get();
  }

  int run(kiln::Callback& callback, const std::string& monitor, const std::vector<double>& values,
          int external_stop_at = -1) {
    state.epochs = static_cast<int>(values.size());
    state.stop_training = false;
    epoch_logs.clear();
    callback.on_train_begin(state);
    int epochs_run = 0;
    for (int epoch = 0; epoch < static_cast<int>(values.size()); ++epoch) {
      callback.on_epoch_begin(state, epoch);
      model->set_weights(weights_of_epoch(*model, epoch));
      Logs logs{{monitor, values[static_cast<std::size_t>(epoch)]}};
      callback.on_epoch_logs(state, epoch, logs);
      callback.on_epoch_end(state, epoch, logs);
      epoch_logs.push_back(logs);
      ++epochs_run;
      if (epoch == external_stop_at) state.stop_training = true;
      if (state.stop_training) break;
    }
    callback.on_train_end(state, epoch_logs.empty() ? Logs{} : epoch_logs.back());
    return epochs_run;
  }
};

kiln::EarlyStopping early_stopping(const std::string& monitor, int patience) {
  kiln::EarlyStopping::Options options;
  options.monitor = monitor;
  options.patience = patience;
  return kiln::EarlyStopping(options);
}

// A fresh directory per test case; the random suffix keeps parallel CTest runs apart.
class TempDirectory {
 public:
  TempDirectory()
      : path_(fs::temp_directory_path() / ("kiln_callbacks_test_" + std::to_string(std::random_device{}()))) {
    fs::create_directories(path_);
  }
  ~TempDirectory() {
    std::error_code ignored;
    fs::remove_all(path_, ignored);
  }
  TempDirectory(const TempDirectory&) = delete;
  TempDirectory& operator=(const TempDirectory&) = delete;
  std::string path(const std::string& file_name) const { return (path_ / file_name).string(); }

 private:
  fs::path path_;
};

std::string read_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

}  // namespace

// ---- EarlyStopping ----------------------------------------------------------------------------------------

TEST_CASE("EarlyStopping stops after patience epochs without improvement", "[train][callbacks]") {
  // Keras's own case (early_stopping_test.py): the stop comes max(patience, 1) + 2 epochs in.
  const std::vector<double> losses = {10.0, 9.0, 8.0, 9.0, 8.9, 8.8, 8.7, 8.6, 8.5};
  for (int patience : {0, 1, 2, 3}) {
    INFO("patience " << patience);
    FakeFit fit;
    kiln::EarlyStopping stopper = early_stopping("loss", patience);
    fit.run(stopper, "loss", losses);
    CHECK(fit.state.stop_training);
    CHECK(stopper.stopped_epoch() == std::max(patience, 1) + 2);
    CHECK(stopper.best() == 8.0);
    CHECK(stopper.best_epoch() == 2);
  }
}

TEST_CASE("EarlyStopping counts only improvements larger than min_delta", "[train][callbacks]") {
  for (double min_delta : {0.05, -0.05}) {  // the sign is ignored, as in Keras
    INFO("min_delta " << min_delta);
    kiln::EarlyStopping::Options options;
    options.monitor = "val_loss";
    options.min_delta = min_delta;
    options.patience = 2;
    kiln::EarlyStopping stopper(options);
    FakeFit fit;
    // 0.97 is better than 1.0 but not by 0.05; 0.90 is; 0.88 and 0.87 are not better than 0.90 by 0.05.
    CHECK(fit.run(stopper, "val_loss", {1.0, 0.97, 0.90, 0.88, 0.87, 0.5}) == 5);
    CHECK(stopper.stopped_epoch() == 4);
    CHECK(stopper.best() == 0.90);
    CHECK(stopper.best_epoch() == 2);
  }
}

TEST_CASE("EarlyStopping maximizes accuracy and ignores ties", "[train][callbacks]") {
  FakeFit fit;
  kiln::EarlyStopping stopper = early_stopping("val_accuracy", 2);
  CHECK(stopper.monitor_mode() == kiln::MonitorMode::max);
  CHECK(fit.run(stopper, "val_accuracy", {0.5, 0.6, 0.6, 0.55, 0.9}) == 4);
  CHECK(stopper.stopped_epoch() == 3);
  CHECK(stopper.best() == 0.6);
  CHECK(stopper.best_epoch() == 1);
}

TEST_CASE("EarlyStopping restores the best epoch's weights bitwise when it stops", "[train][callbacks]") {
  kiln::EarlyStopping::Options options;
  options.patience = 2;
  options.restore_best_weights = true;
  options.verbose = 1;
  kiln::EarlyStopping stopper(options);
  std::ostringstream messages, warnings;
  stopper.redirect(messages, warnings);
  FakeFit fit;
  CHECK(fit.run(stopper, "val_loss", {0.2, 0.15, 0.1, 0.11, 0.12, 0.01}) == 5);
  CHECK(stopper.stopped_epoch() == 4);
  CHECK(bitwise_equal(fit.model->get_weights(), weights_of_epoch(*fit.model, 2)));
  CHECK(messages.str() == "Epoch 5: early stopping\nRestoring model weights from the end of the best epoch: 3.\n");
  CHECK(warnings.str().empty());
}

TEST_CASE("EarlyStopping restores the best weights even when training runs to the end", "[train][callbacks]") {
  kiln::EarlyStopping::Options options;
  options.monitor = "loss";
  options.patience = 10;
  options.restore_best_weights = true;
  kiln::EarlyStopping stopper(options);
  FakeFit fit;
  CHECK(fit.run(stopper, "loss", {0.5, 0.3, 0.4}) == 3);
  CHECK_FALSE(fit.state.stop_training);
  CHECK(stopper.stopped_epoch() == 0);
  CHECK(bitwise_equal(fit.model->get_weights(), weights_of_epoch(*fit.model, 1)));
}

TEST_CASE("EarlyStopping without restore_best_weights leaves the last weights", "[train][callbacks]") {
  FakeFit fit;
  kiln::EarlyStopping stopper = early_stopping("val_loss", 1);
  CHECK(fit.run(stopper, "val_loss", {0.1, 0.2, 0.3}) == 2);
  CHECK(bitwise_equal(fit.model->get_weights(), weights_of_epoch(*fit.model, 1)));
}

TEST_CASE("EarlyStopping with a baseline keeps counting until an epoch beats it", "[train][callbacks]") {
  kiln::EarlyStopping::Options options;
  options.patience = 5;
  options.baseline = 0.5;
  options.restore_best_weights = true;
  SECTION("no epoch beats the baseline: stop after patience epochs, restore the best of them") {
    kiln::EarlyStopping stopper(options);
    FakeFit fit;
    CHECK(fit.run(stopper, "val_loss", {0.9, 0.8, 0.7, 0.71, 0.72, 0.73}) == 5);
    CHECK(stopper.stopped_epoch() == 4);
    CHECK(bitwise_equal(fit.model->get_weights(), weights_of_epoch(*fit.model, 2)));
  }
  SECTION("another callback stops training: the best weights are still restored") {
    kiln::EarlyStopping stopper(options);
    FakeFit fit;
    CHECK(fit.run(stopper, "val_loss", {0.9, 0.8, 0.7, 0.71, 0.72, 0.73}, /*external_stop_at=*/3) == 4);
    CHECK(stopper.stopped_epoch() == 0);
    CHECK(bitwise_equal(fit.model->get_weights(), weights_of_epoch(*fit.model, 2)));
  }
  SECTION("an epoch below the baseline resets the count") {
    options.patience = 2;
    kiln::EarlyStopping stopper(options);
    FakeFit fit;
    CHECK(fit.run(stopper, "val_loss", {0.9, 0.4, 0.45, 0.46, 0.3}) == 4);
    CHECK(stopper.stopped_epoch() == 3);
    CHECK(bitwise_equal(fit.model->get_weights(), weights_of_epoch(*fit.model, 1)));
  }
}

TEST_CASE("EarlyStopping ignores the epochs before start_from_epoch", "[train][callbacks]") {
  kiln::EarlyStopping::Options options;
  options.monitor = "loss";
  options.start_from_epoch = 2;
  options.restore_best_weights = true;
  kiln::EarlyStopping stopper(options);
  FakeFit fit;
  // Epochs 0 and 1 are better but not watched; with patience 0 the first worse epoch after 2 stops.
  CHECK(fit.run(stopper, "loss", {0.1, 0.2, 3.0, 4.0, 1.0}) == 4);
  CHECK(stopper.stopped_epoch() == 3);
  CHECK(stopper.best() == 3.0);
  CHECK(bitwise_equal(fit.model->get_weights(), weights_of_epoch(*fit.model, 2)));

  kiln::EarlyStopping immediate = early_stopping("loss", 0);
  CHECK(fit.run(immediate, "loss", {0.1, 0.2, 3.0, 4.0, 1.0}) == 2);
}

TEST_CASE("EarlyStopping warns about a missing monitor and carries on", "[train][callbacks]") {
  kiln::EarlyStopping stopper = early_stopping("val_loss", 0);
  std::ostringstream messages, warnings;
  stopper.redirect(messages, warnings);
  FakeFit fit;
  CHECK(fit.run(stopper, "loss", {1.0, 2.0, 3.0}) == 3);
  CHECK_FALSE(fit.state.stop_training);
  CHECK_FALSE(stopper.best().has_value());
  CHECK(warnings.str().find("Early stopping conditioned on metric `val_loss` which is not available. "
                            "Available metrics are: loss\n") != std::string::npos);
  CHECK(messages.str().empty());
}

TEST_CASE("EarlyStopping resets its state at each on_train_begin", "[train][callbacks]") {
  kiln::EarlyStopping stopper = early_stopping("loss", 1);
  FakeFit fit;
  CHECK(fit.run(stopper, "loss", {0.1, 0.2, 0.3}) == 2);
  // A second fit whose losses are all worse than the first's best must not stop at once.
  CHECK(fit.run(stopper, "loss", {5.0, 4.0, 3.0}) == 3);
  CHECK(stopper.best() == 3.0);
  CHECK(stopper.stopped_epoch() == 0);
}

TEST_CASE("mode auto infers the direction from the monitored name", "[train][callbacks]") {
  using kiln::MonitorMode;
  const std::vector<std::pair<std::string, MonitorMode>> cases = {{"loss", MonitorMode::min},
                                                                  {"val_loss", MonitorMode::min},
                                                                  {"dense_1_loss", MonitorMode::min},
                                                                  {"val_mae", MonitorMode::min},
                                                                  {"mse", MonitorMode::min},
                                                                  {"mean_squared_error", MonitorMode::min},
                                                                  {"binary_crossentropy", MonitorMode::min},
                                                                  {"hinge", MonitorMode::min},
                                                                  {"accuracy", MonitorMode::max},
                                                                  {"val_accuracy", MonitorMode::max},
                                                                  {"acc", MonitorMode::max},
                                                                  {"sparse_categorical_accuracy", MonitorMode::max},
                                                                  {"val_auc", MonitorMode::max},
                                                                  {"f1_score", MonitorMode::max}};
  for (const auto& [monitor, expected] : cases) {
    INFO(monitor);
    CHECK(kiln::resolve_monitor_mode("EarlyStopping", monitor, "auto") == expected);
  }
  CHECK(kiln::resolve_monitor_mode("EarlyStopping", "val_accuracy", "min") == MonitorMode::min);
  CHECK(kiln::resolve_monitor_mode("EarlyStopping", "whatever", "max") == MonitorMode::max);
}

TEST_CASE("mode auto on an unknown name, or an unknown mode, is a ConfigError", "[train][callbacks]") {
  kiln::EarlyStopping::Options options;
  options.monitor = "val_widgets";
  CHECK_THROWS_WITH(kiln::EarlyStopping(options),
                    Catch::Contains("EarlyStopping received monitor='val_widgets'") && Catch::Contains("mode \"min\""));
  CHECK_THROWS_AS(kiln::EarlyStopping(options), kiln::ConfigError);
  options.mode = "max";
  CHECK_NOTHROW(kiln::EarlyStopping(options));
  options.mode = "minimum";
  CHECK_THROWS_AS(kiln::EarlyStopping(options), kiln::ConfigError);

  kiln::ReduceLROnPlateau::Options reduce;
  reduce.monitor = "learning_rate";
  CHECK_THROWS_WITH(kiln::ReduceLROnPlateau(reduce), Catch::Contains("ReduceLROnPlateau received monitor="));
}

// ---- LearningRateScheduler ------------------------------------------------------------------------------------

TEST_CASE("LearningRateScheduler sets schedule(epoch, rate) before each epoch and logs it", "[train][callbacks]") {
  std::vector<std::pair<int, double>> calls;
  kiln::LearningRateScheduler scheduler(
      [&](int epoch, double rate) {
        calls.emplace_back(epoch, rate);
        return epoch < 2 ? rate : rate * 0.5;
      },
      1);
  std::ostringstream messages, warnings;
  scheduler.redirect(messages, warnings);
  FakeFit fit;
  fit.run(scheduler, "loss", {1.0, 1.0, 1.0, 1.0});
  // Keras's: the schedule sees the epoch and the rate now; the logs carry the rate the epoch trained with.
  CHECK(calls == std::vector<std::pair<int, double>>{{0, 1.0}, {1, 1.0}, {2, 1.0}, {3, 0.5}});
  const std::vector<double> logged = {1.0, 1.0, 0.5, 0.25};
  for (std::size_t epoch = 0; epoch < logged.size(); ++epoch)
    CHECK(fit.epoch_logs[epoch].at("learning_rate") == logged[epoch]);
  CHECK(fit.optimizer->current_learning_rate() == 0.25);
  CHECK(messages.str().find("\nEpoch 3: LearningRateScheduler setting learning rate to 0.5.\n") != std::string::npos);

  // A real fit: the rate each epoch trained with is in the history.
  kiln::Sequential model({kiln::Dense(1)});
  model.build({kiln::Shape::unknown, 2});
  model.compile(kiln::create_optimizer("sgd", kiln::Config{{"learning_rate", 0.1}}), "mse");
  const kiln::Array x = kiln::Array::full({8, 2}, 0.5), y = kiln::Array::full({8, 1}, 0.25);
  const kiln::History history = model.fit(
      x, y,
      kiln::FitOptions().epochs(3).batch_size(4).verbose(0).callback(
          std::make_shared<kiln::LearningRateScheduler>([](int epoch, double) { return 0.1 / (1 + epoch); })));
  REQUIRE(history["learning_rate"].size() == 3);
  CHECK(history["learning_rate"][2] == Approx(0.1 / 3));
}

TEST_CASE("LearningRateScheduler refuses schedules that drive the optimizer and bad rates", "[train][callbacks]") {
  CHECK_THROWS_AS(kiln::LearningRateScheduler(nullptr), kiln::ValueError);
  kiln::LearningRateScheduler negative([](int epoch, double) { return epoch == 1 ? -0.1 : 0.1; });
  FakeFit fit;
  CHECK_THROWS_WITH(fit.run(negative, "loss", {1.0, 1.0}), Catch::Contains("epoch 1") && Catch::Contains("-0.1"));
  kiln::LearningRateScheduler constant([](int, double) { return 0.1; });
  const kiln::ExponentialDecay decay(0.1, 10, 0.5);
  kiln::OptimizerPtr scheduled = kiln::create_optimizer("sgd", kiln::Config{{"learning_rate", decay.serialize()}});
  fit.state.optimizer = scheduled.get();
  CHECK_THROWS_WITH(constant.on_train_begin(fit.state), Catch::Contains("schedule drives it"));
  TrainingState empty;
  CHECK_THROWS_WITH(constant.on_train_begin(empty),
                    Catch::Contains("LearningRateScheduler needs TrainingState::optimizer"));
}

// ---- ReduceLROnPlateau ----------------------------------------------------------------------------------------

TEST_CASE("ReduceLROnPlateau multiplies the rate by factor, waits out cooldown, stops at min_lr",
          "[train][callbacks]") {
  kiln::ReduceLROnPlateau::Options options;
  options.monitor = "loss";
  options.factor = 0.5;
  options.patience = 1;
  options.cooldown = 2;
  options.min_lr = 0.2;
  options.verbose = 1;
  kiln::ReduceLROnPlateau reduce(options);
  std::ostringstream messages, warnings;
  reduce.redirect(messages, warnings);
  FakeFit fit;
  fit.run(reduce, "loss", std::vector<double>(9, 1.0));  // a plateau from the first epoch on

  // The logs carry the rate the epoch trained with, before this epoch's reduction.
  const std::vector<double> logged = {1.0, 1.0, 0.5, 0.5, 0.25, 0.25, 0.2, 0.2, 0.2};
  REQUIRE(fit.epoch_logs.size() == logged.size());
  for (std::size_t epoch = 0; epoch < logged.size(); ++epoch) {
    INFO("epoch " << epoch);
    CHECK(fit.epoch_logs[epoch].at("learning_rate") == logged[epoch]);
  }
  CHECK(fit.optimizer->current_learning_rate() == 0.2);
  CHECK(messages.str() ==
        "\nEpoch 2: ReduceLROnPlateau reducing learning rate to 0.5.\n"
        "\nEpoch 4: ReduceLROnPlateau reducing learning rate to 0.25.\n"
        "\nEpoch 6: ReduceLROnPlateau reducing learning rate to 0.2.\n");
  CHECK(warnings.str().empty());
}

TEST_CASE("ReduceLROnPlateau needs an improvement larger than min_delta", "[train][callbacks]") {
  kiln::ReduceLROnPlateau::Options options;
  options.monitor = "val_loss";
  options.patience = 2;
  kiln::ReduceLROnPlateau reduce(options);
  FakeFit fit;
  // Epochs 1 and 2 beat 1.0 by less than the default min_delta of 1e-4: they count as a plateau.
  fit.run(reduce, "val_loss", {1.0, 0.99995, 0.99992, 0.5});
  CHECK(fit.epoch_logs[2].at("learning_rate") == 1.0);
  CHECK(fit.epoch_logs[3].at("learning_rate") == 0.1);
  CHECK(reduce.best() == 0.5);
  CHECK(reduce.wait() == 0);
}

TEST_CASE("ReduceLROnPlateau in max mode reduces when accuracy stalls", "[train][callbacks]") {
  kiln::ReduceLROnPlateau::Options options;
  options.monitor = "val_accuracy";
  options.patience = 1;
  options.min_delta = 0.0;
  kiln::ReduceLROnPlateau reduce(options);
  CHECK(reduce.monitor_mode() == kiln::MonitorMode::max);
  FakeFit fit;
  fit.run(reduce, "val_accuracy", {0.5, 0.7, 0.6});
  CHECK(fit.optimizer->current_learning_rate() == 0.1);
}

TEST_CASE("ReduceLROnPlateau rejects factor >= 1 and schedules, warns on a missing monitor", "[train][callbacks]") {
  kiln::ReduceLROnPlateau::Options options;
  options.factor = 1.0;
  CHECK_THROWS_AS(kiln::ReduceLROnPlateau(options), kiln::ConfigError);
  options.factor = 2.0;
  CHECK_THROWS_WITH(kiln::ReduceLROnPlateau(options), Catch::Contains("factor=2.0"));

  kiln::ReduceLROnPlateau reduce;
  FakeFit fit;
  const kiln::ExponentialDecay decay(0.1, 10, 0.5);
  kiln::OptimizerPtr scheduled = kiln::create_optimizer("sgd", kiln::Config{{"learning_rate", decay.serialize()}});
  fit.state.optimizer = scheduled.get();
  CHECK_THROWS_WITH(reduce.on_train_begin(fit.state), Catch::Contains("schedule"));

  fit.state.optimizer = fit.optimizer.get();
  std::ostringstream messages, warnings;
  reduce.redirect(messages, warnings);
  fit.run(reduce, "loss", {1.0, 1.0});
  CHECK(fit.epoch_logs[1].at("learning_rate") == 1.0);  // still logged
  CHECK(warnings.str().find("Learning rate reduction is conditioned on metric `val_loss` which is not "
                            "available. Available metrics are: learning_rate,loss.\n") != std::string::npos);
}

TEST_CASE("callbacks that need the model or the optimizer say so before the first epoch", "[train][callbacks]") {
  TrainingState empty;
  kiln::EarlyStopping::Options options;
  options.restore_best_weights = true;
  kiln::EarlyStopping stopper(options);
  CHECK_THROWS_WITH(stopper.on_train_begin(empty), Catch::Contains("needs TrainingState::model"));
  kiln::EarlyStopping plain;
  CHECK_NOTHROW(plain.on_train_begin(empty));  // without restoring, the model is never touched
  kiln::ReduceLROnPlateau reduce;
  CHECK_THROWS_WITH(reduce.on_train_begin(empty), Catch::Contains("needs TrainingState::optimizer"));
}

// ---- CSVLogger -------------------------------------------------------------------------------------------------

TEST_CASE("CSVLogger writes a sorted header and one flushed row per epoch", "[train][callbacks]") {
  TempDirectory directory;
  const std::string path = directory.path("history.csv");
  kiln::CSVLogger logger(path);
  TrainingState state;
  logger.on_train_begin(state);
  Logs first{{"val_loss", 0.25}, {"loss", 0.5}, {"mae", 0.1 + 0.2}};
  logger.on_epoch_end(state, 0, first);
  // Flushed: the row is on disk before training ends.
  CHECK(read_file(path) == "epoch,loss,mae,val_loss\n0,0.5,0.30000000000000004,0.25\n");
  Logs second{{"loss", 1e-05}, {"mae", 123.0}, {"learning_rate", 0.01}};  // a key dropped, one added
  logger.on_epoch_end(state, 1, second);
  Logs third{{"loss", not_a_number}, {"mae", 1e16}, {"val_loss", -infinity}};
  logger.on_epoch_end(state, 2, third);
  logger.on_train_end(state, third);
  CHECK(read_file(path) ==
        "epoch,loss,mae,val_loss\n"
        "0,0.5,0.30000000000000004,0.25\n"
        "1,1e-05,123.0,NA\n"
        "2,nan,1e+16,-inf\n");
}

TEST_CASE("CSVLogger appends without a second header, and honours the separator", "[train][callbacks]") {
  TempDirectory directory;
  const std::string path = directory.path("log.csv");
  kiln::CSVLogger::Options options;
  options.separator = ';';
  options.append = true;
  TrainingState state;
  for (int run = 0; run < 2; ++run) {
    kiln::CSVLogger logger(path, options);
    logger.on_train_begin(state);
    Logs logs{{"loss", 0.5 + run}, {"a;b", 2.0}};
    logger.on_epoch_end(state, 0, logs);
    logger.on_train_end(state, logs);
  }
  CHECK(read_file(path) == "epoch;\"a;b\";loss\n0;2.0;0.5\n0;2.0;1.5\n");

  kiln::CSVLogger overwrite(path);
  overwrite.on_train_begin(state);
  Logs logs{{"loss", 3.0}};
  overwrite.on_epoch_end(state, 0, logs);
  overwrite.on_train_end(state, logs);
  CHECK(read_file(path) == "epoch,loss\n0,3.0\n");
}

TEST_CASE("CSVLogger names the file it cannot open", "[train][callbacks]") {
  TempDirectory directory;
  const std::string path = directory.path("missing_directory/log.csv");
  kiln::CSVLogger logger(path);
  TrainingState state;
  CHECK_THROWS_AS(logger.on_train_begin(state), kiln::SerializationError);
  CHECK_THROWS_WITH(logger.on_train_begin(state), Catch::Contains(path));
}

// ---- TerminateOnNaN, LambdaCallback ------------------------------------------------------------------------------

TEST_CASE("TerminateOnNaN stops on a NaN or infinite batch loss", "[train][callbacks]") {
  for (double bad : {not_a_number, infinity, -infinity}) {
    kiln::TerminateOnNaN terminate;
    std::ostringstream messages, warnings;
    terminate.redirect(messages, warnings);
    TrainingState state;
    terminate.on_batch_end(state, 0, Logs{{"loss", 0.5}});
    terminate.on_batch_end(state, 1, Logs{{"mae", not_a_number}});  // only the loss counts
    CHECK_FALSE(state.stop_training);
    terminate.on_batch_end(state, 3, Logs{{"loss", bad}});
    CHECK(state.stop_training);
    CHECK(warnings.str() == "Epoch 1, batch 4: Invalid loss, terminating training\n");
    CHECK(messages.str().empty());
  }
  kiln::TerminateOnNaN::Options options;
  options.raise_error = true;
  kiln::TerminateOnNaN strict(options);
  TrainingState state;
  strict.on_epoch_begin(state, 2);
  CHECK_THROWS_WITH(strict.on_batch_end(state, 7, Logs{{"loss", not_a_number}}),
                    Catch::Contains("NaN or Inf loss encountered at epoch 3, batch 8"));
}

TEST_CASE("LambdaCallback forwards to the hooks that are set", "[train][callbacks]") {
  std::vector<std::string> calls;
  kiln::LambdaCallback::Options hooks;
  hooks.on_train_begin = [&](TrainingState&) { calls.push_back("train_begin"); };
  hooks.on_epoch_end = [&](TrainingState& state, int epoch, Logs& logs) {
    logs["seen"] = 1.0;
    state.stop_training = epoch == 1;
    calls.push_back("epoch_end " + std::to_string(epoch));
  };
  hooks.on_batch_end = [&](TrainingState&, std::int64_t batch, const Logs& logs) {
    calls.push_back("batch_end " + std::to_string(batch) + " " + std::to_string(logs.at("loss")));
  };
  kiln::LambdaCallback callback(hooks);
  TrainingState state;
  Logs logs;
  callback.on_train_begin(state);
  callback.on_epoch_begin(state, 0);  // not set: nothing happens
  callback.on_batch_end(state, 4, Logs{{"loss", 0.5}});
  callback.on_epoch_end(state, 1, logs);
  callback.on_train_end(state, logs);
  CHECK(calls == std::vector<std::string>{"train_begin", "batch_end 4 0.500000", "epoch_end 1"});
  CHECK(logs.at("seen") == 1.0);
  CHECK(state.stop_training);
}

// ---- callbacks by name ----------------------------------------------------------------------------------------

TEST_CASE("create_callback makes the built-in callbacks from Keras's arguments", "[train][callbacks][registry]") {
  auto stop = std::dynamic_pointer_cast<kiln::EarlyStopping>(kiln::create_callback(
      "EarlyStopping",
      kiln::Config{{"monitor", "loss"}, {"patience", 3}, {"restore_best_weights", true}, {"baseline", 0.5}}));
  REQUIRE(stop);
  CHECK(stop->options().monitor == "loss");
  CHECK(stop->options().patience == 3);
  CHECK(stop->options().restore_best_weights);
  CHECK(stop->options().baseline == 0.5);
  auto reduce = std::dynamic_pointer_cast<kiln::ReduceLROnPlateau>(
      kiln::create_callback("kiln>ReduceLROnPlateau", kiln::Config{{"factor", 0.5}, {"cooldown", 2}}));
  REQUIRE(reduce);
  CHECK(reduce->options().factor == 0.5);
  CHECK(reduce->options().cooldown == 2);
  CHECK(reduce->options().monitor == "val_loss");
  auto logger = std::dynamic_pointer_cast<kiln::CSVLogger>(
      kiln::create_callback("csv_logger", kiln::Config{{"filename", "log.csv"}, {"separator", ";"}, {"append", true}}));
  REQUIRE(logger);
  CHECK(logger->filename() == "log.csv");
  CHECK(logger->options().separator == ';');
  CHECK(logger->options().append);
  CHECK(std::dynamic_pointer_cast<kiln::TerminateOnNaN>(kiln::create_callback("TerminateOnNaN")));
  CHECK_NOTHROW(kiln::callback_registry().check());
}

TEST_CASE("create_callback refuses unknown callbacks and arguments, naming the nearest",
          "[train][callbacks][registry]") {
  CHECK_THROWS_AS(kiln::create_callback("EarlyStoping"), kiln::ConfigError);
  CHECK_THROWS_WITH(kiln::create_callback("EarlyStoping"), Catch::Contains("did you mean 'kiln>EarlyStopping'"));
  CHECK_THROWS_WITH(
      kiln::create_callback("EarlyStopping", kiln::Config{{"patiense", 3}}),
      Catch::Contains("EarlyStopping") && Catch::Contains("'patiense'") && Catch::Contains("did you mean 'patience'"));
  CHECK_THROWS_WITH(kiln::create_callback("CSVLogger"), Catch::Contains("filename is required"));
  CHECK_THROWS_WITH(kiln::create_callback("CSVLogger", kiln::Config{{"filename", "a.csv"}, {"separator", ";;"}}),
                    Catch::Contains("one character"));
}
