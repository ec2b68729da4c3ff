#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/ops/ops.hpp>
#include <kiln/optim/losses.hpp>
#include "support/gradcheck.hpp"

using namespace kiln;

namespace {

constexpr std::int64_t None = Shape::unknown;

Array doubles(const std::vector<double>& values, const Shape& shape) { return Array::from_vector(values, shape); }

// The loss evaluated once on concrete targets and predictions.
double loss_value(const Loss& loss, const Array& y_true, const Array& y_pred) {
  return testing::evaluate([&](const std::vector<Tensor>& in) { return loss(in[0], in[1]); }, {y_true, y_pred}).flat(0);
}

double log_sum_exp(const std::vector<double>& z) {
  double total = 0.0;
  for (double v : z) total += std::exp(v);
  return std::log(total);
}

const Array regression_true = doubles({1, 2, 3, 4}, {2, 2});
const Array regression_pred = doubles({1.5, 1, 3, 6}, {2, 2});  // errors 0.5, -1, 0, 2

}  // namespace

TEST_CASE("regression losses are batch means of Keras's per-element losses", "[optim][losses]") {
  CHECK(loss_value("mse", regression_true, regression_pred) == Approx((0.25 + 1 + 0 + 4) / 4).epsilon(1e-14));
  CHECK(loss_value("mae", regression_true, regression_pred) == Approx((0.5 + 1 + 0 + 2) / 4).epsilon(1e-14));
  // Huber: ½e² within delta, delta·|e| − ½delta² beyond.
  CHECK(loss_value("huber", regression_true, regression_pred) == Approx((0.125 + 0.5 + 0 + 1.5) / 4).epsilon(1e-14));
  const Loss wide = Loss::from_config(Config{{"class_name", "Huber"}, {"config", {{"delta", 2.0}}}});
  CHECK(wide.delta() == 2.0);
  CHECK(loss_value(wide, regression_true, regression_pred) == Approx((0.125 + 0.5 + 0 + 2) / 4).epsilon(1e-14));
}

TEST_CASE("a batch mean over many elements and a ragged tail is the plain sum's mean", "[optim][losses]") {
  // 32 × 31 + 7 elements: whole blocks of the kernel's running partial sums and a partial one.
  const std::int64_t rows = 31, columns = 32;
  std::vector<double> truth, prediction;
  for (std::int64_t i = 0; i < rows * columns + 7; ++i) {
    truth.push_back(std::sin(0.37 * static_cast<double>(i)));
    prediction.push_back(std::cos(0.11 * static_cast<double>(i)) * 2.0);
  }
  double squared = 0.0, absolute = 0.0;
  for (std::size_t i = 0; i < truth.size(); ++i) {
    squared += (prediction[i] - truth[i]) * (prediction[i] - truth[i]);
    absolute += std::abs(prediction[i] - truth[i]);
  }
  const auto size = static_cast<std::int64_t>(truth.size());
  const double count = static_cast<double>(size);
  CHECK(loss_value("mse", doubles(truth, {size}), doubles(prediction, {size})) ==
        Approx(squared / count).epsilon(1e-13));
  CHECK(loss_value("mae", doubles(truth, {size}), doubles(prediction, {size})) ==
        Approx(absolute / count).epsilon(1e-13));
}

TEST_CASE("targets one axis short of a (batch, 1) prediction are compared elementwise", "[optim][losses]") {
  const Array flat_true = doubles({1, 0, 1}, {3});
  const Array column_pred = doubles({0.5, 0.25, 2}, {3, 1});
  CHECK(loss_value("mse", flat_true, column_pred) == Approx((0.25 + 0.0625 + 1) / 3).epsilon(1e-14));
  CHECK(loss_value("MeanAbsoluteError", column_pred, flat_true) == Approx((0.5 + 0.25 + 1) / 3).epsilon(1e-14));
}

TEST_CASE("binary crossentropy on probabilities and on logits", "[optim][losses]") {
  const Array y_true = doubles({1, 0}, {2, 1});
  CHECK(loss_value("binary_crossentropy", y_true, doubles({0.8, 0.3}, {2, 1})) ==
        Approx(-(std::log(0.8) + std::log(0.7)) / 2).epsilon(1e-12));
  const Loss logits =
      Loss::from_config(Config{{"class_name", "BinaryCrossentropy"}, {"config", {{"from_logits", true}}}});
  CHECK(logits.from_logits());
  CHECK(loss_value(logits, y_true, doubles({2.0, -1.0}, {2, 1})) ==
        Approx((std::log1p(std::exp(-2.0)) + std::log1p(std::exp(-1.0))) / 2).epsilon(1e-12));
}

TEST_CASE("categorical and sparse crossentropy agree on the same labels", "[optim][losses]") {
  const Array one_hot = doubles({0, 1, 0, 1, 0, 0}, {2, 3});
  const Array indices = doubles({1, 0}, {2});
  const Array probabilities = doubles({0.2, 0.7, 0.1, 0.5, 0.25, 0.25}, {2, 3});
  const double expected = -(std::log(0.7) + std::log(0.5)) / 2;
  CHECK(loss_value("categorical_crossentropy", one_hot, probabilities) == Approx(expected).epsilon(1e-12));
  CHECK(loss_value("sparse_categorical_crossentropy", indices, probabilities) == Approx(expected).epsilon(1e-12));
  CHECK(loss_value("SparseCategoricalCrossentropy", doubles({1, 0}, {2, 1}), probabilities) ==
        Approx(expected).epsilon(1e-12));

  const Array logits = doubles({1.0, 2.0, -1.0, 0.5, 0.0, 3.0}, {2, 3});
  const double expected_logits = ((log_sum_exp({1.0, 2.0, -1.0}) - 2.0) + (log_sum_exp({0.5, 0.0, 3.0}) - 0.5)) / 2;
  const Loss sparse_logits = Loss::from_config(Config{{"class_name", "SparseCategoricalCrossentropy"},
                                                      {"config", {{"from_logits", true}, {"ignore_class", nullptr}}}});
  CHECK(loss_value(sparse_logits, indices, logits) == Approx(expected_logits).epsilon(1e-12));
  const Loss categorical_logits =
      Loss::from_config(Config{{"class_name", "CategoricalCrossentropy"}, {"config", {{"from_logits", true}}}});
  CHECK(loss_value(categorical_logits, one_hot, logits) == Approx(expected_logits).epsilon(1e-12));
}

TEST_CASE("losses are found by every Keras spelling", "[optim][losses][config]") {
  CHECK(Loss("mse").class_name() == "MeanSquaredError");
  CHECK(Loss("MSE").name() == "mean_squared_error");
  CHECK(Loss("mean_absolute_error").class_name() == "MeanAbsoluteError");
  CHECK(Loss("huber").name() == "huber_loss");
  CHECK(Loss("BinaryCrossentropy").name() == "binary_crossentropy");
  CHECK(Loss::from_config(Config("categorical_crossentropy")).class_name() == "CategoricalCrossentropy");
  CHECK_THROWS_AS(Loss("msee"), ConfigError);
  CHECK_THROWS_WITH(Loss("sparse_categorical_crossentropie"),
                    Catch::Contains("unknown loss") && Catch::Contains("'sparse_categorical_crossentropy'"));
}

TEST_CASE("loss configs use Keras's keys and round-trip", "[optim][losses][config]") {
  for (const std::string name :
       {"mse", "mae", "huber", "binary_crossentropy", "categorical_crossentropy", "sparse_categorical_crossentropy"}) {
    INFO(name);
    Config arguments = {{"name", "custom_name"}};
    if (name.find("crossentropy") != std::string::npos) arguments.set("from_logits", true);
    const Loss loss = Loss::from_config(Config{{"class_name", Loss(name).class_name()}, {"config", arguments}});
    CHECK(loss.name() == "custom_name");
    const Loss copy = Loss::from_config(loss.serialize());
    CHECK(copy.get_config() == loss.get_config());
    CHECK(copy.class_name() == loss.class_name());
    CHECK(copy.from_logits() == loss.from_logits());
  }
  CHECK(Loss("binary_crossentropy").get_config().keys() ==
        std::vector<std::string>{"name", "reduction", "from_logits", "label_smoothing", "axis"});
  CHECK(Loss("huber").get_config().get_double("delta") == 1.0);
  CHECK(Loss("mse").serialize().get_string("module") == "keras.losses");
  CHECK_THROWS_WITH(Loss::from_config(Config{{"class_name", "MeanSquaredError"}, {"config", {{"reduction", "sum"}}}}),
                    Catch::Contains("reduction 'sum'"));
  CHECK_THROWS_AS(
      Loss::from_config(Config{{"class_name", "CategoricalCrossentropy"}, {"config", {{"label_smoothing", 0.1}}}}),
      ConfigError);
  CHECK_THROWS_AS(Loss::from_config(Config{{"class_name", "Huber"}, {"config", {{"delta", -1.0}}}}), ConfigError);
  CHECK_THROWS_WITH(Loss::from_config(Config{{"class_name", "Huber"}, {"config", {{"detla", 2.0}}}}),
                    Catch::Contains("'delta'"));
}

TEST_CASE("check names the loss and both shapes when the targets cannot fit", "[optim][losses][errors]") {
  CHECK_NOTHROW(Loss("mse").check({None, 2}, {None, 2}));
  CHECK_NOTHROW(Loss("mse").check({100, 2}, {None, 2}));
  CHECK_NOTHROW(Loss("binary_crossentropy").check({None}, {None, 1}));
  CHECK_NOTHROW(Loss("sparse_categorical_crossentropy").check({None}, {None, 10}));
  CHECK_NOTHROW(Loss("sparse_categorical_crossentropy").check({None, 1}, {None, 10}));
  CHECK_THROWS_WITH(Loss("mse").check({None, 3}, {None, 2}), Catch::Contains("MeanSquaredError 'mean_squared_error'") &&
                                                                 Catch::Contains("(None, 3)") &&
                                                                 Catch::Contains("(None, 2)"));
  CHECK_THROWS_AS(Loss("mse").check({None}, {None, 2}), ShapeError);
  CHECK_THROWS_WITH(Loss("sparse_categorical_crossentropy").check({None, 10}, {None, 10}),
                    Catch::Contains("SparseCategoricalCrossentropy") && Catch::Contains("class indices"));
  CHECK_THROWS_AS(Loss("categorical_crossentropy").check({None}, {None, 10}), ShapeError);
  CHECK_THROWS_AS(Loss("mae").check({None}, {}), ShapeError);

  Graph graph;
  const Tensor y_true = graph.placeholder({None, 3}, DType::float64, "y_true");
  const Tensor y_pred = graph.placeholder({None, 2}, DType::float64, "y_pred");
  CHECK_THROWS_WITH(Loss("huber")(y_true, y_pred), Catch::Contains("Huber 'huber_loss'"));
}

TEST_CASE("a custom loss function is called and must return a scalar", "[optim][losses]") {
  const Loss total("total_error", [](const Tensor& y_true, const Tensor& y_pred) { return ops::sum(y_pred - y_true); });
  CHECK(total.name() == "total_error");
  CHECK(loss_value(total, regression_true, regression_pred) == Approx(0.5 - 1 + 0 + 2));
  const Loss broken("broken", [](const Tensor& y_true, const Tensor& y_pred) { return y_pred - y_true; });
  CHECK_THROWS_WITH(loss_value(broken, regression_true, regression_pred),
                    Catch::Contains("broken") && Catch::Contains("scalar"));
}

TEST_CASE("a masked prediction's loss is the loss over its kept steps only, with gradients", "[optim][losses][masking]") {
  // Predictions (2, 4, 3) whose mask keeps 5 of the 8 steps; the reference is the same loss on those 5
  // steps alone, as rows (5, 3).
  const std::vector<std::vector<double>> keep = {{1, 1, 0, 1}, {1, 0, 1, 0}};
  Rng rng(4);
  struct Case {
    std::string loss;
    bool probabilities;  // y_pred in (0, 1) rows summing to 1, or free values
    bool indices;        // y_true holds class indices
  };
  for (const Case& c : {Case{"mse", false, false}, Case{"mae", false, false}, Case{"huber", false, false},
                        Case{"binary_crossentropy", true, false}, Case{"categorical_crossentropy", true, false},
                        Case{"sparse_categorical_crossentropy", true, true}}) {
    for (const bool logits : {false, true}) {
      if (logits && !c.probabilities) continue;
      INFO(c.loss << (logits ? " from logits" : ""));
      Loss loss = Loss::from_config(
          logits ? Config{{"class_name", c.loss}, {"config", Config{{"from_logits", true}}}} : Config(c.loss));
      Array y_pred = testing::random_array({2, 4, 3}, rng, DType::float64, 0.05, 1.0);
      if (c.probabilities && !logits)
        for (std::size_t row = 0; row < 8; ++row) {
          double total = 0;
          for (std::size_t j = 0; j < 3; ++j) total += y_pred.flat(row * 3 + j);
          for (std::size_t j = 0; j < 3; ++j) y_pred.set_flat(row * 3 + j, y_pred.flat(row * 3 + j) / total);
        }
      Array y_true = c.indices ? Array({2, 4}, DType::float64) : testing::random_array({2, 4, 3}, rng, DType::float64, 0.0, 1.0);
      if (c.indices)
        for (std::size_t i = 0; i < 8; ++i) y_true.set_flat(i, static_cast<double>(i % 3));
      Array mask({2, 4}, DType::float64);
      std::vector<std::size_t> kept;
      for (std::size_t b = 0; b < 2; ++b)
        for (std::size_t t = 0; t < 4; ++t) {
          mask.set_flat(b * 4 + t, keep[b][t]);
          if (keep[b][t] != 0) kept.push_back(b * 4 + t);
        }
      const auto n = static_cast<std::int64_t>(kept.size());
      Array kept_pred({n, 3}, DType::float64), kept_true = c.indices ? Array({n}, DType::float64) : Array({n, 3}, DType::float64);
      for (std::size_t i = 0; i < kept.size(); ++i) {
        for (std::size_t j = 0; j < 3; ++j) kept_pred.set_flat(i * 3 + j, y_pred.flat(kept[i] * 3 + j));
        if (c.indices)
          kept_true.set_flat(i, y_true.flat(kept[i]));
        else
          for (std::size_t j = 0; j < 3; ++j) kept_true.set_flat(i * 3 + j, y_true.flat(kept[i] * 3 + j));
      }
      auto masked = [&](const std::vector<Tensor>& in) {
        in[1].graph().set_mask(in[1], in[1].graph().constant(mask.copy(), "mask"));
        return loss(in[0], in[1]);
      };
      const double expected = loss_value(loss, kept_true, kept_pred);
      CHECK(testing::evaluate(masked, {y_true, y_pred}).flat(0) == Approx(expected).epsilon(1e-6));
      testing::GradcheckOptions options;
      options.wrt = {1};
      const auto report = testing::gradcheck(masked, {y_true, y_pred}, options);
      INFO(report.worst_entry());
      CHECK(report.max_relative_error <= 1e-6);
    }
  }
}
