// Sample weights, class weights and weighted metrics in fit and evaluate, with Keras's semantics: the loss
// is sum(loss · weight) over the number of losses (sum_over_batch_size), a weighted metric the weighted mean,
// and the plain metrics are not weighed. References are computed here from predict()'s outputs.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/layers/core/dense.hpp>
#include <kiln/layers/core/embedding.hpp>
#include <kiln/ops/ops.hpp>
#include <kiln/optim/losses.hpp>
#include <kiln/serialize/saving.hpp>
#include <kiln/models/loading.hpp>
#include <kiln/models/model.hpp>
#include "support/gradcheck.hpp"
#include "support/temp_dir.hpp"

using namespace kiln;

namespace {

constexpr std::int64_t None = Shape::unknown;

Array uniform(const Shape& shape, Rng& rng, double low = -1.0, double high = 1.0) {
  Array array(shape, DType::float64);
  for (std::size_t i = 0; i < array.size(); ++i) array.set_flat(i, rng.uniform(low, high));
  return array;
}

// Fixed starting weights: a weight's flat index i starts at sin(i + 1) / 2, so two models train alike.
Model with_fixed_weights(Model model) {
  std::vector<Array> weights = model.get_weights();
  for (Array& weight : weights)
    for (std::size_t i = 0; i < weight.size(); ++i) weight.set_flat(i, std::sin(static_cast<double>(i + 1)) / 2);
  model.set_weights(weights);
  return model;
}

Model regression_model() {
  const Tensor x = Input({None, 3}, DType::float64);
  return with_fixed_weights(Model(x, Dense(2)(x)));
}

bool bitwise_equal(const std::vector<Array>& a, const std::vector<Array>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (a[i].nbytes() != b[i].nbytes() || std::memcmp(a[i].raw(), b[i].raw(), a[i].nbytes()) != 0) return false;
  return true;
}

}  // namespace

TEST_CASE("a weighted loss is sum(loss * weight) over the number of losses, as Keras's sum_over_batch_size",
          "[train][weights]") {
  Rng rng(1);
  const Array y_true = uniform({5, 3}, rng), y_pred = uniform({5, 3}, rng), weights = uniform({5}, rng, 0.0, 2.0);
  double expected = 0;
  for (std::size_t r = 0; r < 5; ++r) {
    double squares = 0;
    for (std::size_t c = 0; c < 3; ++c) squares += std::pow(y_true.flat(3 * r + c) - y_pred.flat(3 * r + c), 2) / 3;
    expected += squares * weights.flat(r) / 5;
  }
  const double value = testing::evaluate(
                           [](const std::vector<Tensor>& in) { return Loss("mse")(in[0], in[1], in[2]); },
                           {y_true, y_pred, weights})
                           .flat(0);
  CHECK(value == Approx(expected).epsilon(1e-13));
  // A custom loss function has no per-sample form to weigh.
  const Loss custom("sum", [](const Tensor& t, const Tensor& p) { return ops::sum(p - t); });
  CHECK_THROWS_AS(testing::evaluate([&](const std::vector<Tensor>& in) { return custom(in[0], in[1], in[2]); },
                                    {y_true, y_pred, weights}),
                  ValueError);
  // Weights of another shape than the loss of each sample.
  CHECK_THROWS_AS(testing::evaluate([](const std::vector<Tensor>& in) { return Loss("mse")(in[0], in[1], in[2]); },
                                    {y_true, y_pred, uniform({5, 3}, rng)}),
                  ShapeError);
}

TEST_CASE("evaluate weighs the loss and the weighted metrics, not the plain ones", "[train][weights]") {
  Rng rng(2);
  const Array x = uniform({23, 3}, rng), y = uniform({23, 2}, rng), weights = uniform({23}, rng, 0.0, 3.0);
  Model model = regression_model();
  model.compile("sgd", "mse", {"mae"}, {"mae", "mse"});
  const Array predictions = model.predict(x);
  double loss = 0, weighted_mae = 0, plain_mae = 0, weight_sum = 0, weighted_mse = 0;
  for (std::size_t r = 0; r < 23; ++r) {
    double squares = 0, absolute = 0;
    for (std::size_t c = 0; c < 2; ++c) {
      const double e = predictions.flat(2 * r + c) - y.flat(2 * r + c);
      squares += e * e / 2;
      absolute += std::abs(e) / 2;
    }
    const double w = weights.flat(r);
    loss += squares * w / 23;
    weighted_mse += squares * w;
    weighted_mae += absolute * w;
    plain_mae += absolute / 23;
    weight_sum += w;
  }
  const Logs logs = model.evaluate(x, y, EvaluateOptions().batch_size(7).sample_weight(weights));
  CHECK(logs.at("loss") == Approx(loss).epsilon(1e-12));
  CHECK(logs.at("mae") == Approx(plain_mae).epsilon(1e-12));
  CHECK(logs.at("weighted_mae") == Approx(weighted_mae / weight_sum).epsilon(1e-12));  // "mae" was taken
  CHECK(logs.at("mse") == Approx(weighted_mse / weight_sum).epsilon(1e-12));
  // Without weights, a weighted metric is the plain one.
  const Logs plain = model.evaluate(x, y, 7);
  CHECK(plain.at("weighted_mae") == Approx(plain_mae).epsilon(1e-12));
}

TEST_CASE("fit: samples of weight 0 do not move the weights, and the weights split with validation_split",
          "[train][weights]") {
  Rng rng(3);
  const Array x = uniform({40, 3}, rng), y = uniform({40, 2}, rng);
  Array weights({40}, DType::float64);
  for (std::size_t r = 0; r < 40; ++r) weights.set_flat(r, r % 3 == 0 ? 0.0 : 1.0 + 0.1 * static_cast<double>(r % 4));
  // Other targets where the weight is 0: the same training.
  Array other = y.copy();
  for (std::size_t r = 0; r < 40; r += 3) other.set_flat(2 * r, 100.0);
  auto train = [&](const Array& targets) {
    Model model = regression_model();
    model.compile(create_optimizer("sgd", {{"learning_rate", 0.05}}), "mse");
    const History history = model.fit(
        x, targets, FitOptions().epochs(3).batch_size(8).sample_weight(weights).validation_split(0.25).verbose(0));
    return std::make_pair(model.get_weights(), history);
  };
  const auto [first, history_first] = train(y);
  const auto [second, history_second] = train(other);
  CHECK(bitwise_equal(first, second));
  // Rows 30..39 validate, their weights with them: row 30 and 33 and 36 and 39 weigh 0, so val_loss agrees too.
  CHECK(history_first["val_loss"] == history_second["val_loss"]);
  CHECK(history_first["loss"] == history_second["loss"]);
}

TEST_CASE("fit: class_weight equals the sample weights Keras makes of it", "[train][weights]") {
  Rng rng(4);
  const std::int64_t rows = 30;
  const Array x = uniform({rows, 3}, rng);
  Array labels({rows}, DType::float64), one_hot({rows, 2}, DType::float64), by_class({rows}, DType::float64);
  const std::map<std::int64_t, double> class_weight = {{0, 0.5}, {1, 3.0}};
  for (std::int64_t r = 0; r < rows; ++r) {
    const int label = rng.uniform(0.0, 1.0) < 0.3 ? 1 : 0;
    labels.set_flat(static_cast<std::size_t>(r), label);
    one_hot.set_flat(static_cast<std::size_t>(2 * r + label), 1.0);
    by_class.set_flat(static_cast<std::size_t>(r), class_weight.at(label));
  }
  auto train = [&](const Array& y, const std::string& loss, bool use_class_weight) {
    const Tensor input = Input({None, 3}, DType::float64);
    Model model = with_fixed_weights(Model(input, Dense(2, "softmax")(input)));
    model.compile(create_optimizer("sgd", {{"learning_rate", 0.1}}), loss);
    FitOptions options = FitOptions().epochs(2).batch_size(8).verbose(0);
    if (use_class_weight)
      options.class_weight(class_weight);
    else
      options.sample_weight(by_class);
    model.fit(x, y, options);
    return model.get_weights();
  };
  CHECK(bitwise_equal(train(labels, "sparse_categorical_crossentropy", true),
                      train(labels, "sparse_categorical_crossentropy", false)));
  CHECK(bitwise_equal(train(one_hot, "categorical_crossentropy", true),
                      train(one_hot, "categorical_crossentropy", false)));
}

TEST_CASE("per-step sample weights weigh each step of a sequence output", "[train][weights]") {
  Rng rng(5);
  const Tensor input = Input({None, 4, 2}, DType::float64);
  Model model(input, Dense(3)(input));
  model.compile("sgd", "mse");
  const Array x = uniform({6, 4, 2}, rng), y = uniform({6, 4, 3}, rng), steps = uniform({6, 4}, rng, 0.0, 2.0);
  const Array predictions = model.predict(x);
  double expected = 0;
  for (std::size_t i = 0; i < 24; ++i) {
    double squares = 0;
    for (std::size_t c = 0; c < 3; ++c) squares += std::pow(predictions.flat(3 * i + c) - y.flat(3 * i + c), 2) / 3;
    expected += squares * steps.flat(i) / 24;
  }
  CHECK(model.evaluate(x, y, EvaluateOptions().batch_size(6).sample_weight(steps)).at("loss") ==
        Approx(expected).epsilon(1e-12));
}

TEST_CASE("bad sample and class weights are refused before the first step, the model untouched",
          "[train][weights][errors]") {
  Rng rng(6);
  const Array x = uniform({10, 3}, rng), y = uniform({10, 2}, rng);
  Model model = regression_model();
  model.compile("sgd", "mse");
  const std::vector<Array> before = model.get_weights();
  auto fit_with = [&](const FitOptions& options) { model.fit(x, y, FitOptions(options).verbose(0)); };
  Array negative = Array::full({10}, 1.0, DType::float64);
  negative.set_flat(4, -1.0);
  CHECK_THROWS_WITH(fit_with(FitOptions().sample_weight(negative)), Catch::Contains("index 4"));
  Array nan = Array::full({10}, 1.0, DType::float64);
  nan.set_flat(2, std::numeric_limits<double>::quiet_NaN());
  CHECK_THROWS_AS(fit_with(FitOptions().sample_weight(nan)), ValueError);
  CHECK_THROWS_AS(fit_with(FitOptions().sample_weight(Array::full({9}, 1.0))), ValueError);
  CHECK_THROWS_AS(fit_with(FitOptions().sample_weight(Array::full({10, 3}, 1.0))), ShapeError);
  CHECK_THROWS_AS(fit_with(FitOptions().sample_weight(std::vector<Array>{Array::full({10}, 1.0), Array::full({10}, 1.0)})),
                  ValueError);
  // class_weight on a regression loss, with sample weights, or naming a class there is not.
  CHECK_THROWS_WITH(fit_with(FitOptions().class_weight({{0, 2.0}})), Catch::Contains("compares no classes"));
  CHECK_THROWS_WITH(fit_with(FitOptions().class_weight({{0, 2.0}}).sample_weight(Array::full({10}, 1.0))),
                    Catch::Contains("cannot be given together"));
  CHECK(bitwise_equal(model.get_weights(), before));

  const Tensor input = Input({None, 3}, DType::float64);
  Model classifier(input, Dense(3, "softmax")(input));
  classifier.compile("sgd", "sparse_categorical_crossentropy");
  const Array labels = Array::full({10}, 1.0, DType::float64);
  const std::vector<Array> classifier_before = classifier.get_weights();
  CHECK_THROWS_WITH(classifier.fit(x, labels, FitOptions().class_weight({{5, 2.0}}).verbose(0)),
                    Catch::Contains("class 5"));
  CHECK_THROWS_AS(classifier.fit(x, labels, FitOptions().class_weight({{1, -2.0}}).verbose(0)), ValueError);
  CHECK(bitwise_equal(classifier.get_weights(), classifier_before));
}

TEST_CASE("weighted_metrics save with the compiled model and reload", "[train][weights][saving]") {
  testing::TempDir dir;
  Model model = regression_model();
  model.compile("sgd", "mse", {"mae"}, {"mae"});
  const std::string path = dir.file("weighted.kiln");
  model.save(path);
  Model loaded = load_model(path);
  Rng rng(7);
  const Array x = uniform({8, 3}, rng), y = uniform({8, 2}, rng), weights = uniform({8}, rng, 0.0, 1.0);
  const Logs original = model.evaluate(x, y, EvaluateOptions().sample_weight(weights));
  const Logs reloaded = loaded.evaluate(x, y, EvaluateOptions().sample_weight(weights));
  CHECK(reloaded.at("weighted_mae") == original.at("weighted_mae"));
  CHECK(reloaded.at("loss") == original.at("loss"));
}
