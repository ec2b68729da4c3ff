// ModelCheckpoint: its Python-style file-name fields, when it saves (every epoch, every N batches, only
// the best), what it saves (whole models or weights only, atomically), its messages and its errors, and
// that training resumed from one of its files matches an uninterrupted run bit for bit.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <kiln/kiln.hpp>
#include <kiln/serialize/checkpoint.hpp>
#include <kiln/serialize/detail/container.hpp>
#include <kiln/serialize/saving.hpp>
#include "support/layer_check.hpp"
#include "support/temp_dir.hpp"

using kiln::Array;
using kiln::Config;
using kiln::ConfigError;
using kiln::FieldValues;
using kiln::FitOptions;
using kiln::format_field;
using kiln::format_fields;
using kiln::Logs;
using kiln::Model;
using kiln::ModelCheckpoint;
using kiln::Shape;
using kiln::Tensor;
using kiln::TrainingState;
using kiln::testing::random_input;
using kiln::testing::TempDir;

namespace {

constexpr std::int64_t None = Shape::unknown;
const double infinity = std::numeric_limits<double>::infinity();

FieldValues values(std::initializer_list<std::pair<const std::string, kiln::FieldValue>> list) {
  return FieldValues(list);
}

std::string formatted(const std::string& pattern, double value) {
  return format_fields(pattern, values({{"x", value}}));
}
std::string formatted(const std::string& pattern, std::int64_t value) {
  return format_fields(pattern, values({{"x", value}}));
}

// Dense(8, relu) -> [Dropout] -> Dense(2), compiled with Adam and MSE (+ MAE).
Model small_model(bool dropout = false, double learning_rate = 0.01) {
  Tensor x = kiln::Input({None, 4});
  Tensor h = kiln::Dense(8, "relu")(x);
  if (dropout) h = kiln::Dropout(0.3, Config{{"seed", 3}})(h);
  Model model(x, kiln::Dense(2)(h));
  model.compile(kiln::create_optimizer("adam", Config{{"learning_rate", learning_rate}}), "mse", {"mae"});
  return model;
}

struct Data {
  Array x = random_input({40, 4}, 21), y = random_input({40, 2}, 22);
  Array val_x = random_input({16, 4}, 23), val_y = random_input({16, 2}, 24);
};

// batch 8 on 40 rows: 5 batches per epoch.
FitOptions fit_options(int epochs) { return FitOptions().epochs(epochs).batch_size(8).seed(17).verbose(0); }

std::shared_ptr<ModelCheckpoint> checkpoint(ModelCheckpoint::Options options) {
  return std::make_shared<ModelCheckpoint>(std::move(options));
}

// A callback that writes a made-up metric into each epoch's logs: a monitored sequence the test chooses.
kiln::CallbackPtr scripted_metric(const std::string& name, std::vector<double> per_epoch) {
  kiln::LambdaCallback::Options hooks;
  hooks.on_epoch_end = [name, per_epoch](TrainingState&, int epoch, Logs& logs) {
    logs[name] = per_epoch.at(static_cast<std::size_t>(epoch));
  };
  return std::make_shared<kiln::LambdaCallback>(hooks);
}

// Records the model's weights at every epoch end.
struct WeightRecorder {
  std::vector<std::vector<Array>> epochs;
  std::vector<std::vector<Array>> batches;
  kiln::CallbackPtr callback() {
    kiln::LambdaCallback::Options hooks;
    hooks.on_epoch_end = [this](TrainingState& state, int, Logs&) {
      epochs.push_back(copies(state.model->get_weights()));
    };
    hooks.on_batch_end = [this](TrainingState& state, std::int64_t, const Logs&) {
      batches.push_back(copies(state.model->get_weights()));
    };
    return std::make_shared<kiln::LambdaCallback>(hooks);
  }
  static std::vector<Array> copies(const std::vector<Array>& weights) {
    std::vector<Array> out;
    for (const Array& weight : weights) out.push_back(weight.copy());
    return out;
  }
};

bool same_weights(const std::vector<Array>& a, const std::vector<Array>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!a[i].bitwise_equal(b[i])) return false;
  return true;
}

kiln::CallbackPtr stop_after_epoch(int last) {
  kiln::LambdaCallback::Options hooks;
  hooks.on_epoch_end = [last](TrainingState& state, int epoch, Logs&) {
    if (epoch == last) state.stop_training = true;
  };
  return std::make_shared<kiln::LambdaCallback>(hooks);
}

}  // namespace

// ---- the formatter ------------------------------------------------------------------------------------------

TEST_CASE("format fields fill integers as Python's str.format does", "[serialize][checkpoint]") {
  CHECK(format_fields("model-{epoch:02d}.kiln", values({{"epoch", std::int64_t{3}}})) == "model-03.kiln");
  CHECK(format_fields("model-{epoch:02d}.kiln", values({{"epoch", std::int64_t{123}}})) == "model-123.kiln");
  CHECK(formatted("{x}", std::int64_t{7}) == "7");
  CHECK(formatted("{x:d}", std::int64_t{-7}) == "-7");
  CHECK(formatted("{x:3d}", std::int64_t{7}) == "  7");
  CHECK(formatted("{x:<3d}|", std::int64_t{7}) == "7  |");
  CHECK(formatted("{x:^5}", std::int64_t{7}) == "  7  ");
  CHECK(formatted("{x:*^6d}", std::int64_t{7}) == "**7***");
  CHECK(formatted("{x:+d}", std::int64_t{7}) == "+7");
  CHECK(formatted("{x: d}", std::int64_t{7}) == " 7");
  CHECK(formatted("{x:05d}", std::int64_t{-7}) == "-0007");
  CHECK(formatted("{x:>05d}", std::int64_t{-7}) == "000-7");
  CHECK(formatted("{x:d}", std::numeric_limits<std::int64_t>::min()) == "-9223372036854775808");
  // Integers take the number types too.
  CHECK(formatted("{x:.2f}", std::int64_t{3}) == "3.00");
  CHECK(formatted("{x:e}", std::int64_t{3}) == "3.000000e+00");
  CHECK(formatted("{x:.0%}", std::int64_t{1}) == "100%");
}

TEST_CASE("format fields fill numbers as Python's str.format does", "[serialize][checkpoint]") {
  // f, e, g, % with their default precisions, width, zero padding, alignment and signs.
  CHECK(formatted("{x:.4f}", 0.498765) == "0.4988");
  CHECK(formatted("{x:f}", 0.5) == "0.500000");
  CHECK(formatted("{x:.0f}", 2.5) == "2");
  CHECK(formatted("{x:.3e}", 0.000123456) == "1.235e-04");
  CHECK(formatted("{x:e}", 12345.678) == "1.234568e+04");
  CHECK(formatted("{x:.2E}", 12345.678) == "1.23E+04");
  CHECK(formatted("{x:g}", 0.0001) == "0.0001");
  CHECK(formatted("{x:g}", 0.00001) == "1e-05");
  CHECK(formatted("{x:g}", 123456789.0) == "1.23457e+08");
  CHECK(formatted("{x:.3g}", 1234.5) == "1.23e+03");
  CHECK(formatted("{x:.3g}", 2.0) == "2");
  CHECK(formatted("{x:G}", 1e-10) == "1E-10");
  CHECK(formatted("{x:.1%}", 0.25) == "25.0%");
  CHECK(formatted("{x:010.4f}", -1.5) == "-0001.5000");
  CHECK(formatted("{x:>10.2f}", 1.5) == "      1.50");
  CHECK(formatted("{x:<8.2f}|", 1.5) == "1.50    |");
  CHECK(formatted("{x:_^9.1f}", 1.5) == "___1.5___");
  CHECK(formatted("{x:+.2f}", 1.5) == "+1.50");
  CHECK(formatted("{x:.1f}", -0.0) == "-0.0");
  // No type: Python's str(), or with a precision its general format that keeps a ".0".
  CHECK(formatted("{x}", 0.1) == "0.1");
  CHECK(formatted("{x}", 2.0) == "2.0");
  CHECK(formatted("{x}", 0.00001) == "1e-05");
  CHECK(formatted("{x}", 1e16) == "1e+16");
  CHECK(formatted("{x}", 123456.789) == "123456.789");
  CHECK(formatted("{x}", -0.25) == "-0.25");
  CHECK(formatted("{x:8}", 0.25) == "    0.25");
  CHECK(formatted("{x:.3}", 0.0123) == "0.0123");
  CHECK(formatted("{x:.3}", 10.0) == "10.0");
  CHECK(formatted("{x:.3}", 100.0) == "1e+02");
  CHECK(formatted("{x:.3}", 1.0) == "1.0");
  CHECK(formatted("{x:.3}", 12.345) == "12.3");
  // Not a number, infinities.
  CHECK(formatted("{x:.2f}", infinity) == "inf");
  CHECK(formatted("{x:.2f}", -infinity) == "-inf");
  CHECK(formatted("{x:.2F}", infinity) == "INF");
  CHECK(formatted("{x:.4f}", std::nan("")) == "nan");
  CHECK(formatted("{x}", -std::nan("")) == "nan");
  // One call for one value, as Python's format(value, spec).
  CHECK(format_field(0.5, ".2f") == "0.50");
  CHECK(format_field(std::int64_t{4}, "03d") == "004");
}

TEST_CASE("format patterns keep literal text, escaped braces and repeated fields", "[serialize][checkpoint]") {
  const FieldValues logs = values({{"epoch", std::int64_t{2}}, {"loss", 0.125}, {"val_loss", 0.5}});
  CHECK(format_fields("plain.kiln", logs) == "plain.kiln");
  CHECK(format_fields("", logs).empty());
  CHECK(format_fields("{{epoch}}-{epoch}", logs) == "{epoch}-2");
  CHECK(format_fields("a}}b{{", logs) == "a}b{");
  CHECK(format_fields("{epoch}/{epoch:03d}-{loss:.3f}-{val_loss}", logs) == "2/002-0.125-0.5");
  const kiln::FormatPattern pattern("ckpt-{epoch:02d}-{val_loss:.4f}-{epoch}.kiln");
  CHECK(pattern.fields() == std::vector<std::string>{"epoch", "val_loss", "epoch"});
}

TEST_CASE("malformed patterns and specs are ConfigErrors naming the field", "[serialize][checkpoint]") {
  const FieldValues logs = values({{"epoch", std::int64_t{1}}, {"loss", 0.5}});
  const auto fails_with = [&logs](const std::string& pattern, const std::string& part) {
    INFO(pattern);
    REQUIRE_THROWS_AS(format_fields(pattern, logs), ConfigError);
    REQUIRE_THROWS_WITH(format_fields(pattern, logs), Catch::Contains(part));
  };
  fails_with("ckpt-{epoch", "never closed");
  fails_with("ckpt-}", "single '}'");
  fails_with("ckpt-{}", "no name");
  fails_with("ckpt-{loss!r}", "conversion");
  fails_with("ckpt-{loss.real}", "plain names");
  fails_with("ckpt-{loss[0]}", "plain names");
  fails_with("ckpt-{loss:{width}}", "nest");
  fails_with("ckpt-{loss:.2q}", "unknown type 'q'");
  fails_with("ckpt-{loss:.2q}", "{loss:.2q}");
  fails_with("ckpt-{loss:,.2f}", "groups digits");
  fails_with("ckpt-{loss:#x}", "'#'");
  fails_with("ckpt-{loss:.f}", "without a precision");
  fails_with("ckpt-{loss:.2fx}", "after its type");
  fails_with("ckpt-{loss:99999f}", "width");
  // Types that do not fit the value, as Python refuses them.
  fails_with("ckpt-{loss:d}", "'d' is for integers");
  fails_with("ckpt-{loss:5d}", "{loss:5d}");
  fails_with("ckpt-{epoch:.2d}", "takes no precision");
  fails_with("ckpt-{epoch:.2}", "takes no precision");
  // A field without a value names it and every key there is.
  fails_with("ckpt-{val_los:.4f}", "{val_los:.4f}");
  fails_with("ckpt-{val_los:.4f}", "the keys are: epoch, loss");
  REQUIRE_THROWS_AS(format_field(0.5, "d"), ConfigError);
  REQUIRE_THROWS_AS(format_field(0.5, ".2z"), ConfigError);
}

// ---- construction -------------------------------------------------------------------------------------------

TEST_CASE("ModelCheckpoint refuses bad options when it is made", "[serialize][checkpoint]") {
  const auto refused = [](ModelCheckpoint::Options options, const std::string& part) {
    INFO(options.filepath);
    REQUIRE_THROWS_AS(ModelCheckpoint(options), ConfigError);
    REQUIRE_THROWS_WITH(ModelCheckpoint(options), Catch::Contains("ModelCheckpoint") && Catch::Contains(part));
  };
  ModelCheckpoint::Options options;
  refused(options, "filepath is empty");
  options.filepath = "ckpt-{epoch";
  refused(options, "never closed");
  options.filepath = "ckpt-{epoch}-{batch}.kiln";
  refused(options, "{batch}");
  options.filepath = "ckpt-{val_loss:d}.kiln";
  refused(options, "'d' is for integers");
  options.filepath = "ckpt-{epoch:.3}.kiln";
  refused(options, "takes no precision");

  options.filepath = "ckpt.kiln";
  options.save_freq = std::string("batch");
  refused(options, "unrecognized save_freq 'batch'");
  options.save_freq = std::int64_t{0};
  refused(options, "positive number of batches");
  options.save_freq = std::string("epoch");
  options.mode = "sideways";
  refused(options, "sideways");
  options.mode = "auto";
  options.monitor = "val_wiggle";
  options.save_best_only = true;
  refused(options, "val_wiggle");
  // The monitor's direction matters only with save_best_only.
  options.save_best_only = false;
  CHECK_NOTHROW(ModelCheckpoint(options));

  // The defaults are Keras's; {batch} is fine with a number of batches.
  const ModelCheckpoint defaults("model.kiln");
  CHECK(defaults.options().monitor == "val_loss");
  CHECK(defaults.options().verbose == 0);
  CHECK_FALSE(defaults.options().save_best_only);
  CHECK_FALSE(defaults.options().save_weights_only);
  CHECK(defaults.options().mode == "auto");
  CHECK(std::get<std::string>(defaults.options().save_freq) == "epoch");
  CHECK_FALSE(defaults.options().initial_value_threshold);
  CHECK(defaults.monitor_mode() == kiln::MonitorMode::min);
  CHECK(defaults.best() == infinity);
  ModelCheckpoint::Options batches;
  batches.filepath = "ckpt-{epoch}-{batch:03d}.kiln";
  batches.save_freq = std::int64_t{10};
  CHECK_NOTHROW(ModelCheckpoint(batches));
  ModelCheckpoint::Options accuracy;
  accuracy.filepath = "best.kiln";
  accuracy.monitor = "val_accuracy";
  accuracy.save_best_only = true;
  CHECK(ModelCheckpoint(accuracy).monitor_mode() == kiln::MonitorMode::max);
  CHECK(ModelCheckpoint(accuracy).best() == -infinity);
}

// ---- when it saves ----------------------------------------------------------------------------------------

TEST_CASE("ModelCheckpoint saves every epoch under names made from the epoch and the logs", "[serialize][checkpoint]") {
  TempDir dir;
  const Data data;
  Model model = small_model();
  ModelCheckpoint::Options options;
  options.filepath = dir.file("ckpt-{epoch:02d}-{val_loss:.4f}.kiln");
  auto saver = checkpoint(options);
  const kiln::History history =
      model.fit(data.x, data.y, fit_options(3).validation_data(data.val_x, data.val_y).callback(saver));

  std::vector<std::string> expected;
  for (int epoch = 0; epoch < 3; ++epoch)
    expected.push_back("ckpt-0" + std::to_string(epoch + 1) + "-" +
                       format_field(history["val_loss"][static_cast<std::size_t>(epoch)], ".4f") + ".kiln");
  REQUIRE(dir.entries() == expected);
  REQUIRE(saver->saved_paths().size() == 3);
  for (int epoch = 0; epoch < 3; ++epoch) {
    const Model loaded = kiln::load_model(dir.file(expected[static_cast<std::size_t>(epoch)]));
    CHECK(loaded.epochs_trained() == epoch + 1);
  }
  // The last file holds the model as fit() left it.
  CHECK(same_weights(kiln::load_model(dir.file(expected.back())).get_weights(), model.get_weights()));
}

TEST_CASE("ModelCheckpoint without fields overwrites one file, and {epoch} names are 1-based",
          "[serialize][checkpoint]") {
  TempDir dir;
  const Data data;
  Model model = small_model();
  model.fit(data.x, data.y, fit_options(2).callback(std::make_shared<ModelCheckpoint>(dir.file("last.kiln"))));
  CHECK(dir.entries() == std::vector<std::string>{"last.kiln"});
  CHECK(kiln::load_model(dir.file("last.kiln")).epochs_trained() == 2);

  TempDir named;
  ModelCheckpoint::Options options;
  options.filepath = named.file("e{epoch}-loss{loss:.2e}-mae{mae:.3f}.kiln");
  Model again = small_model();
  const kiln::History history = again.fit(data.x, data.y, fit_options(1).callback(checkpoint(options)));
  CHECK(named.entries() == std::vector<std::string>{"e1-loss" + format_field(history["loss"][0], ".2e") + "-mae" +
                                                    format_field(history["mae"][0], ".3f") + ".kiln"});
}

TEST_CASE("ModelCheckpoint with save_best_only keeps the best epoch's weights", "[serialize][checkpoint]") {
  TempDir dir;
  const Data data;
  // A high learning rate, so that the validation loss goes up as well as down.
  Model model = small_model(false, 0.2);
  WeightRecorder recorder;
  auto saver = std::make_shared<ModelCheckpoint>(dir.file("best.kiln"), /*save_best_only=*/true);
  const kiln::History history =
      model.fit(data.x, data.y,
                fit_options(8).validation_data(data.val_x, data.val_y).callback(saver).callback(recorder.callback()));

  const std::vector<double>& val_loss = history["val_loss"];
  std::size_t best = 0, improvements = 1;
  for (std::size_t epoch = 1; epoch < val_loss.size(); ++epoch)
    if (val_loss[epoch] < val_loss[best]) {
      best = epoch;
      ++improvements;
    }
  INFO("best epoch " << best + 1 << ", " << improvements << " improvements");
  CHECK(saver->saved_paths().size() == improvements);
  CHECK(saver->best() == val_loss[best]);
  REQUIRE(dir.entries() == std::vector<std::string>{"best.kiln"});
  const Model loaded = kiln::load_model(dir.file("best.kiln"));
  CHECK(loaded.epochs_trained() == static_cast<int>(best) + 1);
  CHECK(same_weights(loaded.get_weights(), recorder.epochs[best]));
}

TEST_CASE("ModelCheckpoint with save_best_only saves only on improvement, by mode and threshold",
          "[serialize][checkpoint]") {
  TempDir dir;
  const Data data;
  const std::vector<double> scores = {0.5, 0.3, 0.4, 0.2, 0.35};

  SECTION("min") {
    Model model = small_model();
    WeightRecorder recorder;
    ModelCheckpoint::Options options;
    options.filepath = dir.file("best-{epoch}.kiln");
    options.monitor = "score";
    options.mode = "min";
    options.save_best_only = true;
    auto saver = checkpoint(options);
    model.fit(data.x, data.y,
              fit_options(5).callback(scripted_metric("score", scores)).callback(saver).callback(recorder.callback()));
    CHECK(dir.entries() == std::vector<std::string>{"best-1.kiln", "best-2.kiln", "best-4.kiln"});
    CHECK(saver->best() == 0.2);
    CHECK(same_weights(kiln::load_model(dir.file("best-4.kiln")).get_weights(), recorder.epochs[3]));
    CHECK(same_weights(kiln::load_model(dir.file("best-2.kiln")).get_weights(), recorder.epochs[1]));
  }
  SECTION("max, inferred from the name") {
    Model model = small_model();
    ModelCheckpoint::Options options;
    options.filepath = dir.file("best-{epoch}.kiln");
    options.monitor = "val_score";
    options.save_best_only = true;
    model.fit(data.x, data.y,
              fit_options(5).callback(scripted_metric("val_score", scores)).callback(checkpoint(options)));
    CHECK(dir.entries() == std::vector<std::string>{"best-1.kiln"});
  }
  SECTION("an initial value threshold to beat") {
    Model model = small_model();
    ModelCheckpoint::Options options;
    options.filepath = dir.file("best-{epoch}.kiln");
    options.monitor = "score";
    options.mode = "min";
    options.save_best_only = true;
    options.initial_value_threshold = 0.25;
    auto saver = checkpoint(options);
    CHECK(saver->best() == 0.25);
    model.fit(data.x, data.y, fit_options(5).callback(scripted_metric("score", scores)).callback(saver));
    CHECK(dir.entries() == std::vector<std::string>{"best-4.kiln"});
  }
}

TEST_CASE("ModelCheckpoint with save_best_only warns once and skips when the monitor is missing",
          "[serialize][checkpoint]") {
  TempDir dir;
  const Data data;
  Model model = small_model();
  auto saver = std::make_shared<ModelCheckpoint>(dir.file("best.kiln"), true);  // monitors val_loss
  std::ostringstream messages, warnings;
  saver->redirect(messages, warnings);
  model.fit(data.x, data.y, fit_options(3).callback(saver));  // no validation data
  CHECK(dir.entries().empty());
  CHECK(warnings.str() ==
        "Warning: Can save best model only with val_loss available, skipping. Available metrics are: loss,mae\n");
  CHECK(messages.str().empty());
}

TEST_CASE("ModelCheckpoint with an integer save_freq saves every N batches across epochs", "[serialize][checkpoint]") {
  TempDir dir;
  const Data data;
  Model model = small_model();
  WeightRecorder recorder;
  ModelCheckpoint::Options options;
  options.filepath = dir.file("ckpt-{epoch}-{batch:02d}.kiln");
  options.save_freq = std::int64_t{3};
  auto saver = checkpoint(options);
  // 5 batches an epoch: the 3rd, 6th and 9th batches are epoch 1's 3rd and epoch 2's 1st and 4th.
  model.fit(data.x, data.y, fit_options(2).callback(saver).callback(recorder.callback()));
  REQUIRE(dir.entries() == std::vector<std::string>{"ckpt-1-03.kiln", "ckpt-2-01.kiln", "ckpt-2-04.kiln"});
  REQUIRE(recorder.batches.size() == 10);
  CHECK(same_weights(kiln::load_model(dir.file("ckpt-1-03.kiln")).get_weights(), recorder.batches[2]));
  CHECK(same_weights(kiln::load_model(dir.file("ckpt-2-01.kiln")).get_weights(), recorder.batches[5]));
  CHECK(same_weights(kiln::load_model(dir.file("ckpt-2-04.kiln")).get_weights(), recorder.batches[8]));
  // Batch logs are running means of the epoch: a batch checkpoint's name can use them.
  TempDir named;
  options.filepath = named.file("b{batch}-{loss:.3f}.kiln");
  options.save_freq = std::int64_t{5};
  Model again = small_model();
  const kiln::History history = again.fit(data.x, data.y, fit_options(1).callback(checkpoint(options)));
  CHECK(named.entries() == std::vector<std::string>{"b5-" + format_field(history["loss"][0], ".3f") + ".kiln"});
}

// ---- what it saves ------------------------------------------------------------------------------------------

TEST_CASE("ModelCheckpoint with save_weights_only writes files for load_weights, not load_model",
          "[serialize][checkpoint]") {
  TempDir dir;
  const Data data;
  Model model = small_model();
  ModelCheckpoint::Options options;
  options.filepath = dir.file("weights-{epoch}.kiln");
  options.save_weights_only = true;
  model.fit(data.x, data.y, fit_options(2).callback(checkpoint(options)));
  REQUIRE(dir.entries() == std::vector<std::string>{"weights-1.kiln", "weights-2.kiln"});

  Model fresh = kiln::model_from_json(model.to_json());
  CHECK_FALSE(same_weights(fresh.get_weights(), model.get_weights()));
  fresh.load_weights(dir.file("weights-2.kiln"));
  CHECK(same_weights(fresh.get_weights(), model.get_weights()));
  CHECK_THROWS_AS(kiln::load_model(dir.file("weights-2.kiln")), kiln::SerializationError);
  CHECK_THROWS_WITH(kiln::load_model(dir.file("weights-2.kiln")), Catch::Contains("no config section"));
}

TEST_CASE("a checkpoint saved mid-run resumes to the same weights as an uninterrupted run, bitwise",
          "[serialize][checkpoint]") {
  TempDir dir;
  const Data data;
  Model straight = small_model(/*dropout=*/true);
  Model interrupted = small_model(/*dropout=*/true);
  interrupted.set_weights(straight.get_weights());
  straight.fit(data.x, data.y, fit_options(4));

  // The same run with a checkpoint every epoch, stopped (as by a crash) after epoch 2.
  ModelCheckpoint::Options options;
  options.filepath = dir.file("ckpt-{epoch:02d}.kiln");
  interrupted.fit(data.x, data.y, fit_options(4).callback(checkpoint(options)).callback(stop_after_epoch(1)));
  REQUIRE(dir.entries() == std::vector<std::string>{"ckpt-01.kiln", "ckpt-02.kiln"});

  Model resumed = kiln::load_model(dir.file("ckpt-02.kiln"));
  REQUIRE(resumed.epochs_trained() == 2);
  REQUIRE(resumed.optimizer().iterations() == interrupted.optimizer().iterations());
  resumed.fit(data.x, data.y, fit_options(4).initial_epoch(resumed.epochs_trained()).callback(checkpoint(options)));
  CHECK(same_weights(resumed.get_weights(), straight.get_weights()));
  CHECK(dir.entries() == std::vector<std::string>{"ckpt-01.kiln", "ckpt-02.kiln", "ckpt-03.kiln", "ckpt-04.kiln"});
  CHECK(same_weights(kiln::load_model(dir.file("ckpt-04.kiln")).get_weights(), straight.get_weights()));
  CHECK(kiln::load_model(dir.file("ckpt-04.kiln")).epochs_trained() == 4);
}

TEST_CASE("a checkpoint that fails to save stops fit and leaves the previous file whole", "[serialize][checkpoint]") {
  TempDir dir;
  const Data data;
  Model model = small_model();
  // Before the checkpoint runs at the end of epoch 2, make its save fail as a full disk would.
  kiln::LambdaCallback::Options hooks;
  hooks.on_epoch_end = [](TrainingState&, int epoch, Logs&) {
    if (epoch == 1) kiln::detail::fail_next_write_after_for_testing(20);
  };
  auto saver = std::make_shared<ModelCheckpoint>(dir.file("last.kiln"));
  REQUIRE_THROWS_AS(
      model.fit(data.x, data.y, fit_options(3).callback(std::make_shared<kiln::LambdaCallback>(hooks)).callback(saver)),
      kiln::SerializationError);
  CHECK(dir.entries() == std::vector<std::string>{"last.kiln"});
  CHECK(kiln::load_model(dir.file("last.kiln")).epochs_trained() == 1);
  CHECK(saver->saved_paths().size() == 1);
}

TEST_CASE("ModelCheckpoint creates a missing folder, as Keras does", "[serialize][checkpoint]") {
  TempDir dir;
  const Data data;
  Model model = small_model();
  ModelCheckpoint::Options options;
  options.filepath = dir.file("runs/one/ckpt-{epoch}.kiln");
  model.fit(data.x, data.y, fit_options(1).callback(checkpoint(options)));
  CHECK(kiln::load_model(dir.file("runs/one/ckpt-1.kiln")).epochs_trained() == 1);
  std::filesystem::remove_all(dir.file("runs"));
}

// ---- messages and errors ---------------------------------------------------------------------------------

TEST_CASE("ModelCheckpoint with verbose 1 prints Keras's messages", "[serialize][checkpoint]") {
  TempDir dir;
  const Data data;
  std::ostringstream messages, warnings;

  SECTION("save_best_only") {
    Model model = small_model();
    ModelCheckpoint::Options options;
    options.filepath = dir.file("best.kiln");
    options.monitor = "score";
    options.mode = "min";
    options.save_best_only = true;
    options.verbose = 1;
    auto saver = checkpoint(options);
    saver->redirect(messages, warnings);
    model.fit(data.x, data.y,
              fit_options(5).callback(scripted_metric("score", {0.51234, 0.49876, 0.5, 0.4, 0.4})).callback(saver));
    const std::string path = dir.file("best.kiln");
    CHECK(messages.str() == "\nEpoch 1: score improved from inf to 0.51234, saving model to " + path + "\n" +
                                "\nEpoch 2: score improved from 0.51234 to 0.49876, saving model to " + path + "\n" +
                                "\nEpoch 3: score did not improve from 0.49876\n" +
                                "\nEpoch 4: score improved from 0.49876 to 0.40000, saving model to " + path + "\n" +
                                "\nEpoch 5: score did not improve from 0.40000\n");
  }
  SECTION("every epoch") {
    Model model = small_model();
    ModelCheckpoint::Options options;
    options.filepath = dir.file("ckpt-{epoch}.kiln");
    options.verbose = 1;
    auto saver = checkpoint(options);
    saver->redirect(messages, warnings);
    model.fit(data.x, data.y, fit_options(2).callback(saver));
    CHECK(messages.str() == "\nEpoch 1: saving model to " + dir.file("ckpt-1.kiln") + "\n" +
                                "\nEpoch 2: saving model to " + dir.file("ckpt-2.kiln") + "\n");
  }
  SECTION("verbose 0 is silent") {
    Model model = small_model();
    auto saver = std::make_shared<ModelCheckpoint>(dir.file("ckpt.kiln"));
    saver->redirect(messages, warnings);
    model.fit(data.x, data.y, fit_options(2).callback(saver));
    CHECK(messages.str().empty());
  }
  CHECK(warnings.str().empty());
}

TEST_CASE("an unknown log key in the file name fails at the first epoch's end, naming the keys",
          "[serialize][checkpoint]") {
  TempDir dir;
  const Data data;
  Model model = small_model();
  ModelCheckpoint::Options options;
  options.filepath = dir.file("ckpt-{epoch:02d}-{val_los:.4f}.kiln");
  int epochs_begun = 0;
  kiln::LambdaCallback::Options hooks;
  hooks.on_epoch_begin = [&epochs_begun](TrainingState&, int) { ++epochs_begun; };
  try {
    model.fit(data.x, data.y,
              fit_options(3)
                  .validation_data(data.val_x, data.val_y)
                  .callback(std::make_shared<kiln::LambdaCallback>(hooks))
                  .callback(checkpoint(options)));
    FAIL("an unknown field was accepted");
  } catch (const ConfigError& error) {
    const std::string message = error.what();
    CHECK_THAT(message, Catch::Contains("ModelCheckpoint") && Catch::Contains("{val_los:.4f}") &&
                            Catch::Contains("epoch, loss, mae, val_loss, val_mae"));
  }
  CHECK(epochs_begun == 1);
  CHECK(dir.entries().empty());

  // With save_best_only too: the name is made before the decision to save.
  options.save_best_only = true;
  options.filepath = dir.file("best-{lr}.kiln");
  Model again = small_model();
  CHECK_THROWS_WITH(
      again.fit(data.x, data.y, fit_options(2).validation_data(data.val_x, data.val_y).callback(checkpoint(options))),
      Catch::Contains("{lr}"));
}

TEST_CASE("ModelCheckpoint needs a model in the training state", "[serialize][checkpoint]") {
  ModelCheckpoint saver("ckpt.kiln");
  TrainingState state;
  CHECK_THROWS_AS(saver.on_train_begin(state), kiln::ValueError);
}

TEST_CASE("after TerminateOnNaN, ModelCheckpoint keeps the last good file and says so",
          "[serialize][checkpoint][nan]") {
  for (const bool best_only : {false, true}) {
    INFO("save_best_only " << best_only);
    TempDir dir;
    const Data data;
    Model model = small_model();
    WeightRecorder recorder;
    // As epoch 2 begins, a weight turns NaN (as a NaN batch would make it): its first batch's loss is NaN.
    kiln::LambdaCallback::Options hooks;
    hooks.on_epoch_begin = [](TrainingState& state, int epoch) {
      if (epoch == 1) state.model->weights().front().value.set_flat(0, std::numeric_limits<double>::quiet_NaN());
    };
    auto terminate = std::make_shared<kiln::TerminateOnNaN>();
    std::ostringstream messages, warnings;
    terminate->redirect(messages, warnings);
    ModelCheckpoint::Options options;
    options.filepath = dir.file("last.kiln");
    options.monitor = "loss";
    options.save_best_only = best_only;
    auto saver = checkpoint(options);
    saver->redirect(messages, warnings);
    model.fit(data.x, data.y,
              fit_options(4)
                  .shuffle(false)
                  .callback(std::make_shared<kiln::LambdaCallback>(hooks))
                  .callback(terminate)
                  .callback(recorder.callback())
                  .callback(saver));
    REQUIRE(recorder.epochs.size() == 2);  // stopped in epoch 2
    CHECK(saver->saved_paths().size() == 1);
    CHECK(std::isfinite(saver->best()) == best_only);
    CHECK_THAT(warnings.str(),
               Catch::Contains("Epoch 2: ModelCheckpoint is not saving the model to " + dir.file("last.kiln") +
                               ": loss is nan; the previous file, if any, is kept"));
    const Model loaded = kiln::load_model(dir.file("last.kiln"));
    CHECK(loaded.epochs_trained() == 1);
    CHECK(same_weights(loaded.get_weights(), recorder.epochs[0]));
  }
}

TEST_CASE("ModelCheckpoint refuses weights that are no longer finite, whatever the loss says",
          "[serialize][checkpoint][nan]") {
  TempDir dir;
  const Data data;
  Model model = small_model();
  kiln::LambdaCallback::Options hooks;
  hooks.on_epoch_end = [](TrainingState& state, int epoch, Logs&) {
    if (epoch == 1) state.model->weights().front().value.set_flat(3, std::numeric_limits<double>::infinity());
  };
  std::ostringstream messages, warnings;
  auto saver = std::make_shared<ModelCheckpoint>(dir.file("last.kiln"));
  saver->redirect(messages, warnings);
  model.fit(data.x, data.y, fit_options(2).callback(std::make_shared<kiln::LambdaCallback>(hooks)).callback(saver));
  CHECK(saver->saved_paths().size() == 1);
  CHECK_THAT(warnings.str(), Catch::Contains("Epoch 2: ModelCheckpoint is not saving") &&
                                 Catch::Contains("weight 'dense/kernel' is not finite"));
  CHECK(kiln::load_model(dir.file("last.kiln")).epochs_trained() == 1);
}

TEST_CASE("ModelCheckpoint by name, from Keras's arguments", "[serialize][checkpoint][registry]") {
  auto saver = std::dynamic_pointer_cast<ModelCheckpoint>(
      kiln::create_callback("ModelCheckpoint", Config{{"filepath", "best-{epoch:02d}.kiln"},
                                                      {"save_best_only", true},
                                                      {"monitor", "loss"},
                                                      {"save_freq", 5},
                                                      {"initial_value_threshold", 0.25}}));
  REQUIRE(saver);
  CHECK(saver->options().filepath == "best-{epoch:02d}.kiln");
  CHECK(saver->options().save_best_only);
  CHECK(std::get<std::int64_t>(saver->options().save_freq) == 5);
  CHECK(saver->best() == 0.25);
  CHECK_THROWS_AS(kiln::create_callback("ModelCheckpoint", Config{{"filepath", "x.kiln"}, {"save_freq", "batch"}}),
                  ConfigError);
}
