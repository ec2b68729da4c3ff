#include <catch2/catch.hpp>

#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/optim/metrics.hpp>
#include "support/gradcheck.hpp"

using namespace kiln;

namespace {

constexpr std::int64_t None = Shape::unknown;

Array doubles(const std::vector<double>& values, const Shape& shape) { return Array::from_vector(values, shape); }

double metric_value(const Metric& metric, const Array& y_true, const Array& y_pred) {
  return testing::evaluate([&](const std::vector<Tensor>& in) { return metric(in[0], in[1]); }, {y_true, y_pred})
      .flat(0);
}

// Row 1 ties classes 0 and 1 (true class 0: the first maximum, so correct); row 2 ties classes 0 and 2
// (true class 2: not the first maximum, so wrong, as with NumPy's argmax).
const Array class_scores = doubles({0.1, 0.8, 0.1, 0.4, 0.4, 0.2, 0.5, 0.2, 0.5}, {3, 3});
const Array one_hot = doubles({0, 1, 0, 1, 0, 0, 0, 0, 1}, {3, 3});
const Array indices = doubles({1, 0, 2}, {3});

}  // namespace

TEST_CASE("binary accuracy thresholds strictly above 0.5", "[optim][metrics]") {
  const Array y_true = doubles({1, 0, 1, 0}, {4, 1});
  const Array y_pred = doubles({0.7, 0.5, 0.5, 0.2}, {4, 1});  // predicted 1, 0, 0, 0
  CHECK(metric_value("binary_accuracy", y_true, y_pred) == 0.75);
  const Metric low = Metric::from_config(Config{{"class_name", "BinaryAccuracy"}, {"config", {{"threshold", 0.1}}}});
  CHECK(low.threshold() == 0.1);
  CHECK(metric_value(low, y_true, y_pred) == 0.5);
  CHECK(metric_value("binary_accuracy", doubles({1, 0, 1, 0}, {4}), y_pred) == 0.75);  // (batch,) targets
}

TEST_CASE("categorical and sparse accuracy take the first maximum on ties", "[optim][metrics]") {
  CHECK(metric_value("categorical_accuracy", one_hot, class_scores) == Approx(2.0 / 3.0).epsilon(1e-15));
  CHECK(metric_value("sparse_categorical_accuracy", indices, class_scores) == Approx(2.0 / 3.0).epsilon(1e-15));
  CHECK(metric_value("SparseCategoricalAccuracy", doubles({1, 0, 2}, {3, 1}), class_scores) ==
        Approx(2.0 / 3.0).epsilon(1e-15));
  CHECK(metric_value("sparse_categorical_accuracy", doubles({1, 1, 0}, {3}), class_scores) ==
        Approx(2.0 / 3.0).epsilon(1e-15));
}

TEST_CASE("accuracy resolves like Keras's compile, from the shapes", "[optim][metrics]") {
  const Metric accuracy = "accuracy";
  CHECK_FALSE(accuracy.resolved());
  CHECK(accuracy.resolve({None, 1}, {None, 1}).class_name() == "BinaryAccuracy");
  CHECK(accuracy.resolve({None}, {None, 1}).class_name() == "BinaryAccuracy");
  CHECK(accuracy.resolve({None}, {None, 4}).class_name() == "SparseCategoricalAccuracy");
  CHECK(accuracy.resolve({None, 1}, {None, 4}).class_name() == "SparseCategoricalAccuracy");
  CHECK(accuracy.resolve({None, 4}, {None, 4}).class_name() == "CategoricalAccuracy");
  CHECK(accuracy.resolve({None, 4}, {None, 4}).name() == "accuracy");
  CHECK(Metric("acc").resolve({None}, {None, 4}).name() == "acc");
  CHECK(metric_value(accuracy, indices, class_scores) == Approx(2.0 / 3.0).epsilon(1e-15));
  CHECK(metric_value(accuracy, one_hot, class_scores) == Approx(2.0 / 3.0).epsilon(1e-15));
  CHECK_THROWS_AS(accuracy.get_config(), ValueError);
}

TEST_CASE("mae and mse metrics are the batch means of the errors", "[optim][metrics]") {
  const Array y_true = doubles({1, 2, 3, 4}, {2, 2});
  const Array y_pred = doubles({1.5, 1, 3, 6}, {2, 2});
  CHECK(metric_value("mae", y_true, y_pred) == Approx(3.5 / 4).epsilon(1e-15));
  CHECK(metric_value("mean_squared_error", y_true, y_pred) == Approx(5.25 / 4).epsilon(1e-15));
  CHECK(Metric("mae").name() == "mae");
  CHECK(Metric("mae").class_name() == "MeanAbsoluteError");
  CHECK(Metric("MSE").get_config() == Config{{"name", "MSE"}, {"dtype", Config()}});
}

TEST_CASE("a NaN prediction row counts as wrong", "[optim][metrics]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const Array scores = doubles({nan, 0.1, 0.2, 0.9, 0.05, 0.05}, {2, 3});
  for (double label : {0.0, 1.0, 2.0})
    CHECK(metric_value("sparse_categorical_accuracy", doubles({label, 0}, {2}), scores) == 0.5);
}

TEST_CASE("metric names and shapes are checked, naming the metric", "[optim][metrics][errors]") {
  CHECK_THROWS_WITH(Metric("acuracy"), Catch::Contains("unknown metric 'acuracy'") && Catch::Contains("'accuracy'"));
  CHECK_THROWS_AS(Metric::from_config(Config{{"class_name", "BinaryAccuracy"}, {"config", {{"treshold", 0.5}}}}),
                  ConfigError);
  CHECK_NOTHROW(Metric("categorical_accuracy").check({None, 3}, {None, 3}));
  CHECK_THROWS_WITH(Metric("sparse_categorical_accuracy").check({None, 3}, {None, 3}),
                    Catch::Contains("SparseCategoricalAccuracy") && Catch::Contains("(None, 3)"));
  CHECK_THROWS_AS(Metric("categorical_accuracy").check({None}, {None, 3}), ShapeError);
  CHECK_THROWS_AS(Metric("mae").check({None, 2}, {None, 3}), ShapeError);
  CHECK_THROWS_WITH(Metric("accuracy").check({None, 2}, {None, 3}),
                    Catch::Contains("CategoricalAccuracy metric 'accuracy'"));
}

TEST_CASE("a masked prediction's metric counts its kept steps only, as Keras's mean with the mask as weight",
          "[optim][metrics][masking]") {
  // Predictions (2, 4, 3) whose mask keeps 5 of the 8 steps; the reference is the metric of those 5 steps
  // alone, as rows (5, 3).
  const std::vector<double> keep = {1, 1, 0, 1, 1, 0, 1, 0};
  Rng rng(8);
  const Array y_pred = testing::random_array({2, 4, 3}, rng, DType::float64, 0.0, 1.0);
  const Array y_dense = testing::random_array({2, 4, 3}, rng, DType::float64, 0.0, 1.0);
  Array y_indices({2, 4}, DType::float64);
  for (std::size_t i = 0; i < 8; ++i) y_indices.set_flat(i, static_cast<double>((i * 7) % 3));
  const Array mask = doubles(keep, {2, 4});
  auto kept_rows = [&](const Array& full, std::int64_t width) {
    Array rows = width > 0 ? Array({5, width}, DType::float64) : Array({5}, DType::float64);
    const std::size_t w = static_cast<std::size_t>(std::max<std::int64_t>(width, 1));
    std::size_t out = 0;
    for (std::size_t i = 0; i < 8; ++i) {
      if (keep[i] == 0) continue;
      for (std::size_t j = 0; j < w; ++j) rows.set_flat(out * w + j, full.flat(i * w + j));
      ++out;
    }
    return rows;
  };
  for (const std::string name :
       {"mae", "mse", "binary_accuracy", "categorical_accuracy", "sparse_categorical_accuracy"}) {
    INFO(name);
    const Metric metric(name);
    const bool sparse = name == "sparse_categorical_accuracy";
    const Array& y_true = sparse ? y_indices : y_dense;
    auto part = [&](int which) {
      return testing::evaluate(
                 [&](const std::vector<Tensor>& in) {
                   in[1].graph().set_mask(in[1], in[1].graph().constant(mask.copy(), "mask"));
                   const MetricSums parts = metric.accumulated(in[0], in[1]);
                   REQUIRE(parts.statistics.size() == 2);
                   return parts.statistics[static_cast<std::size_t>(which)];
                 },
                 {y_true, y_pred})
          .flat(0);
    };
    const double expected = metric_value(metric, kept_rows(y_true, sparse ? 0 : 3), kept_rows(y_pred, 3));
    CHECK(part(1) == 5.0);
    CHECK(part(0) / part(1) == Approx(expected).epsilon(1e-12));
  }
  // Without a mask: the batch mean times the batch's rows, over the rows.
  for (int which : {0, 1}) {
    const double part = testing::evaluate(
                            [&](const std::vector<Tensor>& in) {
                              return Metric("mae").accumulated(in[0], in[1]).statistics.at(
                                  static_cast<std::size_t>(which));
                            },
                            {y_dense, y_pred})
                            .flat(0);
    CHECK(part == Approx(which == 1 ? 2.0 : 2.0 * metric_value(Metric("mae"), y_dense, y_pred)).epsilon(1e-12));
  }
}

// ---- top-k, percentage error, cosine similarity (values computed here, independently) ------------------------

namespace {

// How many of a row's scores are strictly above the true class's: below k means a hit (NumPy in_top_k).
double top_k_hits(const std::vector<std::vector<double>>& scores, const std::vector<int>& truth, int k) {
  double hits = 0;
  for (std::size_t r = 0; r < scores.size(); ++r) {
    const double target = scores[r][static_cast<std::size_t>(truth[r])];
    const auto above = std::count_if(scores[r].begin(), scores[r].end(), [&](double s) { return s > target; });
    hits += above < k ? 1 : 0;
  }
  return hits / static_cast<double>(scores.size());
}

}  // namespace

TEST_CASE("top-k accuracies count the true class among the k highest scores, ties at the boundary in",
          "[optim][metrics]") {
  const std::vector<std::vector<double>> scores = {
      {0.1, 0.4, 0.6, 0.9, 0.5}, {0.1, 0.7, 0.9, 0.8, 0.3}, {0.1, 0.6, 0.9, 0.9, 0.5}, {0.3, 0.2, 0.1, 0.0, 0.4}};
  const std::vector<int> truth = {2, 0, 3, 4};  // Keras's docstring example, plus a top-1 hit
  std::vector<double> flat, labels, hot(20, 0.0);
  for (std::size_t r = 0; r < scores.size(); ++r) {
    flat.insert(flat.end(), scores[r].begin(), scores[r].end());
    labels.push_back(truth[r]);
    hot[r * 5 + static_cast<std::size_t>(truth[r])] = 1.0;
  }
  const Array y_pred = doubles(flat, {4, 5});
  for (const int k : {1, 2, 3, 5}) {
    INFO("k = " << k);
    const Metric sparse = Metric::from_config(
        Config{{"class_name", "SparseTopKCategoricalAccuracy"}, {"config", Config{{"k", k}}}});
    const Metric categorical =
        Metric::from_config(Config{{"class_name", "TopKCategoricalAccuracy"}, {"config", Config{{"k", k}}}});
    CHECK(metric_value(sparse, doubles(labels, {4}), y_pred) == Approx(top_k_hits(scores, truth, k)));
    CHECK(metric_value(categorical, doubles(hot, {4, 5}), y_pred) == Approx(top_k_hits(scores, truth, k)));
  }
  // Keras's example: k = 3 gives [True, False, True] on its three rows.
  CHECK(top_k_hits({scores[0], scores[1], scores[2]}, {2, 0, 3}, 3) == Approx(2.0 / 3.0));
  CHECK(metric_value("sparse_top_k_categorical_accuracy", doubles(labels, {4}), y_pred) == 1.0);  // default k = 5
  CHECK(Metric("top_k_categorical_accuracy").get_config().get_int("k") == 5);
  // A row holding a NaN, or a label that is no class, is a miss.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  CHECK(metric_value("sparse_top_k_categorical_accuracy", doubles({0, 7}, {2}),
                     doubles({nan, 0.1, 0.2, 0.3, 0.4, 0.1, 0.2, 0.3, 0.4, 0.5}, {2, 5})) == 0.0);
  CHECK_THROWS_AS(Metric::from_config(Config{{"class_name", "SparseTopKCategoricalAccuracy"},
                                             {"config", Config{{"from_sorted_ids", true}}}}),
                  ConfigError);
}

TEST_CASE("mean absolute percentage error and cosine similarity as Keras defines them", "[optim][metrics]") {
  const std::vector<double> truth = {1, 2, 0, -4}, predicted = {1.5, 1, 0.5, -4};
  double percentage = 0;
  for (std::size_t i = 0; i < truth.size(); ++i)
    percentage += std::abs(truth[i] - predicted[i]) / std::max(std::abs(truth[i]), 1e-7);
  CHECK(metric_value("mape", doubles(truth, {2, 2}), doubles(predicted, {2, 2})) ==
        Approx(100.0 * percentage / 4.0));

  // Row by row: the cosine of the angle between the two vectors, then the mean over rows.
  const std::vector<double> a = {1, 0, 1, 3, 4, 0}, b = {2, 0, 2, -3, 4, 1};
  double cosines = 0;
  for (int r = 0; r < 2; ++r) {
    double dot = 0, na = 0, nb = 0;
    for (int j = 0; j < 3; ++j) {
      const double x = a[r * 3 + j], y = b[r * 3 + j];
      dot += x * y, na += x * x, nb += y * y;
    }
    cosines += dot / std::sqrt(na * nb);
  }
  CHECK(metric_value("cosine_similarity", doubles(a, {2, 3}), doubles(b, {2, 3})) == Approx(cosines / 2.0));
  CHECK(Metric("CosineSimilarity").get_config().get_int("axis") == -1);
}
