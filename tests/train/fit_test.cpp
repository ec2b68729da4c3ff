#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>
#include <sstream>

#include <kiln/core/error.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/layers/core/dense.hpp>
#include <kiln/layers/regularization/dropout.hpp>
#include <kiln/layers/core/embedding.hpp>
#include <kiln/layers/merging/merging.hpp>
#include <kiln/ops/ops.hpp>
#include <kiln/models/model.hpp>
#include "support/temp_dir.hpp"

using kiln::Array;
using kiln::Shape;
using kiln::Tensor;

namespace {

constexpr std::int64_t None = Shape::unknown;

// y = 2·a − 3·b + 1 on random (a, b).
void linear_problem(std::int64_t rows, Array& x, Array& y, std::uint64_t seed = 1) {
  kiln::Rng rng(seed);
  x = Array({rows, 2});
  y = Array({rows, 1});
  for (std::int64_t r = 0; r < rows; ++r) {
    const double a = rng.uniform(-1, 1), b = rng.uniform(-1, 1);
    x.set_flat(static_cast<std::size_t>(2 * r), a);
    x.set_flat(static_cast<std::size_t>(2 * r + 1), b);
    y.set_flat(static_cast<std::size_t>(r), 2 * a - 3 * b + 1);
  }
}

kiln::Model linear_model() {
  const Tensor x = kiln::Input({None, 2});
  return kiln::Model(x, kiln::Dense(1)(x));
}

struct CountBatches : kiln::Callback {
  std::vector<std::int64_t> batches;
  void on_batch_end(kiln::TrainingState&, std::int64_t batch, const kiln::Logs&) override { batches.push_back(batch); }
};

}  // namespace

TEST_CASE("fit: a tiny regression converges and History records every epoch", "[train][fit]") {
  Array x, y;
  linear_problem(64, x, y);
  kiln::Model model = linear_model();
  model.compile(kiln::create_optimizer("sgd", {{"learning_rate", 0.1}}), "mse", {"mae"});
  const double before = model.evaluate(x, y).at("loss");
  const kiln::History history =
      model.fit(x, y, kiln::FitOptions().epochs(40).batch_size(16).validation_split(0.25).verbose(0));
  REQUIRE(history.epochs.size() == 40);
  CHECK(history["loss"].size() == 40);
  CHECK(history["val_loss"].size() == 40);
  CHECK(history["mae"].size() == 40);
  CHECK(history["val_mae"].size() == 40);
  CHECK(history["loss"].back() < before / 10);
  CHECK(history["loss"].back() < history["loss"].front());
  const kiln::Logs after = model.evaluate(x, y);
  CHECK(after.at("loss") < before / 10);
  CHECK(after.count("mae") == 1);
  CHECK_THROWS_WITH(history["accuracy"], Catch::Contains("has no 'accuracy'"));
}

TEST_CASE("fit: a last batch smaller than batch_size is trained on, not dropped", "[train][fit]") {
  Array x, y;
  linear_problem(10, x, y);
  kiln::Model model = linear_model();
  model.compile("sgd", "mse");
  auto counter = std::make_shared<CountBatches>();
  model.fit(x, y, kiln::FitOptions().epochs(2).batch_size(4).verbose(0).callback(counter));
  CHECK(counter->batches == std::vector<std::int64_t>{0, 1, 2, 0, 1, 2});
  CHECK(kiln::trainer_of(*model) != nullptr);
}

TEST_CASE("fit: the same seeds give bitwise-identical training, with shuffling and dropout",
          "[train][fit][determinism]") {
  Array x, y;
  linear_problem(40, x, y);
  auto train = [&]() {
    const Tensor input = kiln::Input({None, 2});
    kiln::Model model(input, kiln::Dense(1)(kiln::Dropout(0.2)(kiln::Dense(8, "tanh")(input))));
    model.compile("adam", "mse");
    model.fit(x, y, kiln::FitOptions().epochs(3).batch_size(8).seed(7).verbose(0));
    return model.get_weights();
  };
  const std::vector<Array> first = train(), second = train();
  REQUIRE(first.size() == second.size());
  for (std::size_t i = 0; i < first.size(); ++i) CHECK(first[i].bitwise_equal(second[i]));
}

TEST_CASE("train_on_batch and test_on_batch return the batch's loss", "[train][fit]") {
  Array x, y;
  linear_problem(8, x, y);
  kiln::Model model = linear_model();
  model.compile(kiln::create_optimizer("sgd", {{"learning_rate", 0.05}}), "mse");
  const double tested = model.test_on_batch(x, y).at("loss");
  const double trained = model.train_on_batch(x, y).at("loss");
  CHECK(trained == Approx(tested).epsilon(1e-6));  // the loss before this step's update
  CHECK(model.test_on_batch(x, y).at("loss") < tested);
}

TEST_CASE("train_on_batch and test_on_batch take one array per input and per output", "[train][fit]") {
  Array x, y;
  linear_problem(8, x, y);
  const Tensor a = kiln::Input({None, 2}), b = kiln::Input({None, 2});
  const Tensor merged = kiln::Concatenate()({a, b});
  kiln::Model model({a, b}, {kiln::Dense(1)(merged), kiln::Dense(1)(merged)});
  model.compile(kiln::create_optimizer("sgd", {{"learning_rate", 0.05}}), "mse");
  const double tested = model.test_on_batch({x, x}, {y, y}).at("loss");
  CHECK(model.train_on_batch({x, x}, {y, y}).at("loss") == Approx(tested).epsilon(1e-6));
  CHECK(model.test_on_batch({x, x}, {y, y}).at("loss") < tested);
  CHECK_THROWS_AS(model.train_on_batch({x}, {y, y}), kiln::Error);  // one input missing
}

TEST_CASE("fit: a stop asked for in on_epoch_begin ends that epoch after one batch, as in Keras", "[train][fit]") {
  Array x, y;
  linear_problem(64, x, y);
  kiln::Model model = linear_model();
  model.compile("sgd", "mse");
  std::vector<std::int64_t> batches;
  kiln::LambdaCallback::Options hooks;
  hooks.on_epoch_begin = [](kiln::TrainingState& state, int epoch) { state.stop_training = epoch == 1; };
  hooks.on_batch_end = [&](kiln::TrainingState&, std::int64_t batch, const kiln::Logs&) { batches.push_back(batch); };
  const kiln::History history = model.fit(
      x, y,
      kiln::FitOptions().epochs(5).batch_size(16).verbose(0).callback(std::make_shared<kiln::LambdaCallback>(hooks)));
  CHECK(history.epochs == std::vector<int>{0, 1});
  CHECK(batches == std::vector<std::int64_t>{0, 1, 2, 3, 0});  // epoch 0 whole, epoch 1 one batch
  CHECK(history["loss"][1] != history["loss"][0]);             // epoch 1's own logs
  CHECK(model.epochs_trained() == 2);
}

TEST_CASE("fit: a negative initial_epoch is a ValueError", "[train][fit]") {
  Array x, y;
  linear_problem(8, x, y);
  kiln::Model model = linear_model();
  model.compile("sgd", "mse");
  const auto options = kiln::FitOptions().initial_epoch(-1).verbose(0);
  CHECK_THROWS_AS(model.fit(x, y, options), kiln::ValueError);
  CHECK_THROWS_WITH(model.fit(x, y, options), Catch::Contains("initial_epoch must not be negative, got -1"));
}

TEST_CASE("fit: classification with sparse labels reaches high accuracy", "[train][fit]") {
  kiln::Rng rng(3);
  const std::int64_t rows = 200;
  Array x({rows, 2}), labels({rows});
  for (std::int64_t r = 0; r < rows; ++r) {
    const double a = rng.uniform(-1, 1), b = rng.uniform(-1, 1);
    x.set_flat(static_cast<std::size_t>(2 * r), a);
    x.set_flat(static_cast<std::size_t>(2 * r + 1), b);
    labels.set_flat(static_cast<std::size_t>(r), a + b > 0 ? (a > b ? 2 : 1) : 0);
  }
  const Tensor input = kiln::Input({None, 2});
  kiln::Model model(input, kiln::Dense(3, "softmax")(kiln::Dense(16, "relu")(input)));
  model.compile(kiln::create_optimizer("adam", {{"learning_rate", 0.02}}), "sparse_categorical_crossentropy",
                {"accuracy"});
  model.fit(x, labels, kiln::FitOptions().epochs(60).batch_size(32).verbose(0));
  CHECK(model.evaluate(x, labels).at("accuracy") > 0.9);
}

TEST_CASE("fit: bad data is refused before any step, naming what is wrong", "[train][fit][errors]") {
  Array x, y;
  linear_problem(10, x, y);
  kiln::Model model = linear_model();
  CHECK_THROWS_AS(model.fit(x, y), kiln::LayerStateError);  // not compiled
  model.compile("sgd", "mse");
  const std::vector<Array> before = model.get_weights();

  Array fewer, fewer_y;
  linear_problem(9, fewer, fewer_y);
  CHECK_THROWS_WITH(model.fit(x, fewer_y, kiln::FitOptions().verbose(0)),
                    Catch::Contains("x has 10 samples but y[0] has 9"));
  CHECK_THROWS_AS(model.fit(Array({10, 3}), y, kiln::FitOptions().verbose(0)), kiln::ShapeError);
  CHECK_THROWS_AS(model.fit(x, Array({10, 2}), kiln::FitOptions().verbose(0)), kiln::ShapeError);  // loss vs output

  const Tensor input = kiln::Input({None, 2});
  kiln::Model classifier(input, kiln::Dense(3, "softmax")(input));
  classifier.compile("adam", "sparse_categorical_crossentropy");
  Array labels = Array::full({10}, 1.0);
  labels.set_flat(4, 3.0);
  CHECK_THROWS_WITH(classifier.fit(x, labels, kiln::FitOptions().verbose(0)),
                    Catch::Contains("sparse label 3") && Catch::Contains("[0, 3)"));
  labels.set_flat(4, 1.5);
  CHECK_THROWS_WITH(classifier.fit(x, labels, kiln::FitOptions().verbose(0)),
                    Catch::Contains("sparse label 1.5 at index 4 is not an integer"));
  CHECK_THROWS_AS(model.fit(x, y, kiln::FitOptions().batch_size(0)), kiln::ValueError);
  CHECK_THROWS_AS(model.fit(x, y, kiln::FitOptions().validation_split(1.5)), kiln::ValueError);

  const std::vector<Array> after = model.get_weights();
  for (std::size_t i = 0; i < before.size(); ++i) CHECK(after[i].bitwise_equal(before[i]));
}

TEST_CASE("fit: without a terminal, verbose 1 prints one summary line per epoch", "[train][fit][progress]") {
  Array x, y;
  linear_problem(12, x, y);
  kiln::Model model = linear_model();
  model.compile("sgd", "mse");
  std::ostringstream captured;
  std::streambuf* original = std::cout.rdbuf(captured.rdbuf());
  model.fit(x, y, kiln::FitOptions().epochs(2).batch_size(5).verbose(1));
  std::cout.rdbuf(original);
  const std::string text = captured.str();
  INFO(text);
  CHECK(text.find("Epoch 1/2\n") != std::string::npos);
  CHECK(text.find("Epoch 2/2\n") != std::string::npos);
  CHECK(text.find("3/3") != std::string::npos);
  CHECK(text.find(" - loss: ") != std::string::npos);
  CHECK(text.find('\r') == std::string::npos);
}

TEST_CASE("fit: EarlyStopping stops a diverging run and restores its best epoch's weights", "[train][fit][callbacks]") {
  Array x, y, val_x, val_y;
  linear_problem(32, x, y, 1);
  linear_problem(16, val_x, val_y, 2);
  kiln::Model model = linear_model();
  model.compile(kiln::create_optimizer("sgd", {{"learning_rate", 0.2}, {"momentum", 0.9}}), "mse");
  kiln::EarlyStopping::Options options;
  options.patience = 2;
  options.restore_best_weights = true;
  auto stopper = std::make_shared<kiln::EarlyStopping>(options);
  const kiln::History history = model.fit(
      x, y, kiln::FitOptions().epochs(50).batch_size(4).validation_data(val_x, val_y).verbose(0).callback(stopper));
  const std::vector<double>& val_loss = history["val_loss"];
  INFO("epochs run: " << val_loss.size());
  REQUIRE(val_loss.size() < 50);  // stopped early
  const auto best = static_cast<std::size_t>(std::min_element(val_loss.begin(), val_loss.end()) - val_loss.begin());
  CHECK(stopper->best_epoch() == static_cast<int>(best));
  CHECK(val_loss.size() == best + 1 + 2);  // patience 2 after the best
  CHECK(model.evaluate(val_x, val_y).at("loss") == Approx(val_loss[best]).epsilon(1e-6));
}

TEST_CASE("fit: a run resumed from weights and optimizer state matches an uninterrupted run bitwise",
          "[train][fit][resume]") {
  Array x, y;
  linear_problem(40, x, y);
  auto make_model = []() {
    const Tensor input = kiln::Input({None, 2});
    return kiln::Model(input, kiln::Dense(1)(kiln::Dropout(0.3)(kiln::Dense(8, "tanh")(input))));
  };
  const kiln::FitOptions options = kiln::FitOptions().batch_size(8).seed(3).verbose(0);

  kiln::Model uninterrupted = make_model();
  uninterrupted.compile("adam", "mse");
  uninterrupted.fit(x, y, kiln::FitOptions(options).epochs(4));

  kiln::Model first_half = make_model();
  first_half.compile("adam", "mse");
  first_half.fit(x, y, kiln::FitOptions(options).epochs(2));
  // What a checkpoint holds: the config, the weights, the optimizer's state.
  const kiln::LayerPtr rebuilt = kiln::layer_from_config(kiln::serialize_layer(*first_half));
  kiln::Model resumed(std::static_pointer_cast<kiln::ModelBase>(rebuilt));
  resumed.set_weights(first_half.get_weights());
  resumed.compile("adam", "mse");
  resumed.optimizer().set_variables(first_half.optimizer().variables());
  resumed.fit(x, y, kiln::FitOptions(options).epochs(4).initial_epoch(2));

  const std::vector<Array> expected = uninterrupted.get_weights(), actual = resumed.get_weights();
  REQUIRE(expected.size() == actual.size());
  for (std::size_t i = 0; i < expected.size(); ++i) CHECK(actual[i].bitwise_equal(expected[i]));
  CHECK(resumed.optimizer().iterations() == uninterrupted.optimizer().iterations());
}

TEST_CASE("fit: a NaN in the inputs makes the loss NaN through every activation, and TerminateOnNaN stops",
          "[train][fit][nan]") {
  Array x, y;
  linear_problem(16, x, y);
  x.set_flat(5, std::numeric_limits<double>::quiet_NaN());  // row 2 of the first batch
  for (const std::string& activation : kiln::ops::activation_names()) {
    INFO("activation " << activation);
    const Tensor input = kiln::Input({None, 2});
    kiln::Model model(input, kiln::Dense(1)(kiln::Dense(4, activation)(input)));
    model.compile("sgd", "mse");
    auto terminate = std::make_shared<kiln::TerminateOnNaN>();
    std::ostringstream messages, warnings;
    terminate->redirect(messages, warnings);
    auto batches = std::make_shared<CountBatches>();
    std::streambuf* cerr = std::cerr.rdbuf(warnings.rdbuf());  // fit's own non-finite warning
    const kiln::History history = model.fit(
        x, y,
        kiln::FitOptions().epochs(3).batch_size(8).shuffle(false).verbose(0).callback(terminate).callback(batches));
    std::cerr.rdbuf(cerr);
    CHECK(std::isnan(history["loss"].at(0)));
    CHECK(batches->batches == std::vector<std::int64_t>{0});
    // One numbering: fit's warning and the callback's both say epoch 1, batch 1.
    CHECK_THAT(warnings.str(), Catch::Contains("the loss is nan at epoch 1, batch 1"));
    CHECK_THAT(warnings.str(), Catch::Contains("Epoch 1, batch 1: Invalid loss, terminating training"));
  }
}

TEST_CASE("fit: an infinite loss is reported as inf or nan, never as printf's -nan", "[train][fit][nan]") {
  Array x, y;
  linear_problem(16, x, y);
  for (std::size_t i = 0; i < x.size(); ++i) x.set_flat(i, 1e30);  // (1e30 w)^2 overflows float32
  kiln::Model model = linear_model();
  model.compile("sgd", "mse");
  std::ostringstream out, err;
  std::streambuf* cout = std::cout.rdbuf(out.rdbuf());
  std::streambuf* cerr = std::cerr.rdbuf(err.rdbuf());
  const kiln::History history = model.fit(x, y, kiln::FitOptions().epochs(2).batch_size(8).verbose(2));
  std::cout.rdbuf(cout);
  std::cerr.rdbuf(cerr);
  CHECK_FALSE(std::isfinite(history["loss"].at(0)));
  CHECK_THAT(err.str(), Catch::Contains("the loss is inf at epoch 1, batch 1; add kiln::TerminateOnNaN to stop on it"));
  CHECK_THAT(err.str() + out.str(), !Catch::Contains("-nan"));
}

TEST_CASE("fit: a missing log or History key is a KeyError naming the keys there are", "[train][fit]") {
  Array x, y;
  linear_problem(16, x, y);
  kiln::Model model = linear_model();
  model.compile("sgd", "mse", {"mae"});
  const kiln::Logs scores = model.evaluate(x, y);
  CHECK_THROWS_AS(scores.at("acc"), kiln::KeyError);
  CHECK_THROWS_WITH(scores.at("acc"), "Logs have no 'acc' (they have loss, mae)");
  CHECK_THROWS_AS(kiln::Logs().at("loss"), kiln::Error);
  CHECK(scores.at("mae") >= 0);
  const kiln::History history = model.fit(x, y, kiln::FitOptions().epochs(1).verbose(0));
  CHECK_THROWS_AS(history["val_loss"], kiln::KeyError);
  CHECK_THROWS_WITH(history["val_loss"], Catch::Contains("History has no 'val_loss'") && Catch::Contains("loss, mae"));
}

TEST_CASE("fit: CSVLogger records ReduceLROnPlateau's learning_rate whichever comes first", "[train][fit][callbacks]") {
  Array x, y;
  linear_problem(16, x, y);
  for (const bool logger_first : {true, false}) {
    INFO("CSVLogger first: " << logger_first);
    kiln::testing::TempDir dir;
    kiln::Model model = linear_model();
    model.compile(kiln::create_optimizer("sgd", {{"learning_rate", 0.05}}), "mse");
    kiln::ReduceLROnPlateau::Options reduce;
    reduce.monitor = "loss";
    auto logger = std::make_shared<kiln::CSVLogger>(dir.file("log.csv"));
    auto plateau = std::make_shared<kiln::ReduceLROnPlateau>(reduce);
    kiln::FitOptions options = kiln::FitOptions().epochs(2).batch_size(8).verbose(0);
    if (logger_first)
      options.callback(logger).callback(plateau);
    else
      options.callback(plateau).callback(logger);
    model.fit(x, y, options);
    const std::string text = kiln::testing::read_bytes(dir.file("log.csv"));
    CHECK_THAT(text, Catch::StartsWith("epoch,learning_rate,loss\n0,0.05,"));
  }
}

TEST_CASE("evaluate: masked steps count neither in the loss nor in the metrics, over batches of any size",
          "[train][fit][masking]") {
  // Token ids (3 rows, 4 steps), 0 padding; per-step labels. Keras's loss: each batch's mean over its kept
  // steps, averaged over batches by rows; its metrics: kept steps correct / kept steps, over all batches.
  const Tensor tokens = kiln::Input({None, 4});
  kiln::Model model(tokens, kiln::Dense(3, "softmax")(kiln::Embedding(6, 5, {{"mask_zero", true}})(tokens)));
  model.compile("sgd", "sparse_categorical_crossentropy", {"accuracy"});
  const Array x = Array::from_vector(std::vector<float>{1, 2, 0, 0, 3, 4, 5, 1, 2, 0, 0, 0}, {3, 4});
  const Array y = Array::from_vector(std::vector<float>{0, 1, 2, 2, 1, 1, 0, 2, 0, 1, 1, 1}, {3, 4});
  const Array probabilities = model.predict(x);
  double correct = 0, kept = 0, loss_rows = 0;
  for (std::size_t r = 0; r < 3; ++r) {
    double row_loss = 0, row_kept = 0;
    for (std::size_t t = 0; t < 4; ++t) {
      if (x.flat(r * 4 + t) == 0) continue;
      const std::size_t at = (r * 4 + t) * 3;
      const auto label = static_cast<std::size_t>(y.flat(r * 4 + t));
      std::size_t best = 0;
      for (std::size_t c = 1; c < 3; ++c)
        if (probabilities.flat(at + c) > probabilities.flat(at + best)) best = c;
      correct += best == label ? 1 : 0;
      row_loss -= std::log(probabilities.flat(at + label));
      row_kept += 1;
    }
    kept += row_kept;
    loss_rows += row_loss / row_kept;
  }
  const kiln::Logs logs = model.evaluate(x, y, 1);
  CHECK(logs.at("accuracy") == Approx(correct / kept).epsilon(1e-12));
  CHECK(logs.at("loss") == Approx(loss_rows / 3).epsilon(1e-5));
  // One batch of all three: the accuracy is the same count, the loss the mean over all kept steps.
  CHECK(model.evaluate(x, y, 3).at("accuracy") == Approx(correct / kept).epsilon(1e-12));
}
