// The streaming metrics (Precision, Recall, AUC, F1Score/FBetaScore, R2Score, RootMeanSquaredError), each
// against values computed here from the same data with plain loops, and streamed through evaluate() in
// batches of 7 rows so that only correct accumulation across batches gives the whole set's value.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/layers/activations/activation.hpp>
#include <kiln/ops/ops.hpp>
#include <kiln/optim/metrics.hpp>
#include <kiln/models/model.hpp>
#include "support/gradcheck.hpp"

using namespace kiln;

namespace {

constexpr std::int64_t None = Shape::unknown;
constexpr double kEpsilon = 1e-7;

// A model whose predictions are its inputs: evaluate() streams the given scores through the metrics.
Logs streamed(const std::vector<Metric>& metrics, const Array& y_true, const Array& scores,
              std::int64_t batch_size = 7) {
  const Tensor x = Input({None, scores.shape()[1]}, DType::float64);
  Model model(x, Activation("linear")(x));
  model.compile("sgd", "mse", metrics);
  return model.evaluate(scores, y_true, batch_size);
}

Array uniform(const Shape& shape, Rng& rng, double low = 0.0, double high = 1.0) {
  Array array(shape, DType::float64);
  for (std::size_t i = 0; i < array.size(); ++i) array.set_flat(i, rng.uniform(low, high));
  return array;
}

Array coin_flips(const Shape& shape, Rng& rng) {
  Array array(shape, DType::float64);
  for (std::size_t i = 0; i < array.size(); ++i) array.set_flat(i, rng.uniform(0.0, 1.0) < 0.4 ? 1.0 : 0.0);
  return array;
}

// One random class per row, one-hot.
Array one_hot_rows(std::int64_t rows, std::int64_t classes, Rng& rng) {
  Array array({rows, classes}, DType::float64);
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto c = std::min<std::int64_t>(classes - 1, static_cast<std::int64_t>(rng.uniform(0.0, 1.0) * classes));
    array.set_flat(static_cast<std::size_t>(r * classes + c), 1.0);
  }
  return array;
}

std::vector<double> values_of(const Array& array) {
  std::vector<double> values(array.size());
  for (std::size_t i = 0; i < values.size(); ++i) values[i] = array.flat(i);
  return values;
}

struct Counts {
  double tp = 0, fp = 0, tn = 0, fn = 0;
};

// The confusion counts of every element whose index passes `keep`, a score above `threshold` being positive.
template <class Keep>
Counts counts_at(const std::vector<double>& truth, const std::vector<double>& scores, double threshold, Keep keep,
                 const std::vector<double>& weights = {}) {
  Counts counts;
  for (std::size_t i = 0; i < truth.size(); ++i) {
    if (!keep(i)) continue;
    const double w = weights.empty() ? 1.0 : weights[i];
    const bool positive = scores[i] > threshold, is_true = truth[i] != 0.0;
    (is_true ? (positive ? counts.tp : counts.fn) : (positive ? counts.fp : counts.tn)) += w;
  }
  return counts;
}

Counts counts_at(const std::vector<double>& truth, const std::vector<double>& scores, double threshold) {
  return counts_at(truth, scores, threshold, [](std::size_t) { return true; });
}

// The area under the exact ROC curve: the chance that a positive outscores a negative, a tie counting half
// (the trapezoid over the curve through every distinct score, sorted).
double exact_roc_auc(const std::vector<double>& truth, const std::vector<double>& scores) {
  double pairs = 0, wins = 0;
  for (std::size_t p = 0; p < truth.size(); ++p)
    for (std::size_t n = 0; n < truth.size(); ++n)
      if (truth[p] != 0.0 && truth[n] == 0.0) {
        pairs += 1;
        wins += scores[p] > scores[n] ? 1.0 : scores[p] == scores[n] ? 0.5 : 0.0;
      }
  return wins / pairs;
}

}  // namespace

TEST_CASE("Precision and Recall count over every batch, at any thresholds, classes and top k",
          "[optim][metrics][streaming]") {
  Rng rng(11);
  const Array y_true = coin_flips({50, 3}, rng);
  const Array scores = uniform({50, 3}, rng);
  const std::vector<double> truth = values_of(y_true), score = values_of(scores);
  auto precision = [](const Counts& c) { return c.tp / (c.tp + c.fp); };
  auto recall = [](const Counts& c) { return c.tp / (c.tp + c.fn); };

  const Logs logs = streamed({"precision", "recall"}, y_true, scores);
  CHECK(logs.at("precision") == Approx(precision(counts_at(truth, score, 0.5))).epsilon(1e-12));
  CHECK(logs.at("recall") == Approx(recall(counts_at(truth, score, 0.5))).epsilon(1e-12));

  // Several thresholds: one value each, logged as precision_0, precision_1, ...
  const Config thresholds = Config::list({0.25, 0.5, 0.75});
  const Logs several = streamed(
      {Metric::from_config({{"class_name", "Precision"}, {"config", {{"thresholds", thresholds}}}}),
       Metric::from_config({{"class_name", "Recall"}, {"config", {{"thresholds", thresholds}}}})},
      y_true, scores);
  for (std::size_t t = 0; t < 3; ++t) {
    const Counts counts = counts_at(truth, score, 0.25 * static_cast<double>(t + 1));
    CHECK(several.at("precision_" + std::to_string(t)) == Approx(precision(counts)).epsilon(1e-12));
    CHECK(several.at("recall_" + std::to_string(t)) == Approx(recall(counts)).epsilon(1e-12));
  }

  // class_id: only the second column counts.
  const Logs one_class =
      streamed({Metric::from_config({{"class_name", "Precision"}, {"config", {{"class_id", 1}}}})}, y_true, scores);
  const Counts column = counts_at(truth, score, 0.5, [](std::size_t i) { return i % 3 == 1; });
  CHECK(one_class.at("precision") == Approx(precision(column)).epsilon(1e-12));

  // top_k 1: each row's highest score is its positive prediction, whatever its value.
  std::vector<double> top(score.size(), 0.0);
  for (std::size_t r = 0; r < 50; ++r) {
    const auto first = score.begin() + static_cast<std::ptrdiff_t>(3 * r);
    top[3 * r + static_cast<std::size_t>(std::max_element(first, first + 3) - first)] = 1.0;
  }
  const Logs top_one =
      streamed({Metric::from_config({{"class_name", "Recall"}, {"config", {{"top_k", 1}}}})}, y_true, scores);
  CHECK(top_one.at("recall") == Approx(recall(counts_at(truth, top, 0.5))).epsilon(1e-12));
}

TEST_CASE("Precision weighs each sample's counts by its weight", "[optim][metrics][streaming]") {
  Rng rng(12);
  const Array y_true = coin_flips({20, 2}, rng);
  const Array scores = uniform({20, 2}, rng);
  const Array weights = uniform({20}, rng, 0.0, 2.0);
  std::vector<double> element_weights;
  for (double w : values_of(weights)) element_weights.insert(element_weights.end(), {w, w});
  const Counts counts =
      counts_at(values_of(y_true), values_of(scores), 0.5, [](std::size_t) { return true; }, element_weights);
  const Metric metric = "Precision";
  const double value = testing::evaluate(
                           [&](const std::vector<Tensor>& in) {
                             const MetricSums sums = metric.accumulated(in[0], in[1], in[2]);
                             return sums.result(sums.statistics);
                           },
                           {y_true, scores, weights})
                           .flat(0);
  CHECK(value == Approx(counts.tp / (counts.tp + counts.fp)).epsilon(1e-12));
}

TEST_CASE("AUC equals the exact ROC area when every bucket holds one score, and approximates it otherwise",
          "[optim][metrics][streaming]") {
  Rng rng(13);
  const std::int64_t rows = 60;
  const Array y_true = coin_flips({rows, 1}, rng);
  // Scores at bucket centres: between two of the 200 thresholds there is only ever one distinct score, so
  // the thresholded curve has the exact curve's corners and the trapezoids agree to rounding.
  Array centred({rows, 1}, DType::float64);
  for (std::size_t i = 0; i < centred.size(); ++i)
    centred.set_flat(i, (std::floor(rng.uniform(0.0, 40.0)) * 4.0 + 0.5) / 199.0);
  CHECK(streamed({"auc"}, y_true, centred).at("auc") ==
        Approx(exact_roc_auc(values_of(y_true), values_of(centred))).epsilon(1e-12));
  const Array scores = uniform({rows, 1}, rng);
  CHECK(std::abs(streamed({"AUC"}, y_true, scores).at("AUC") -
                 exact_roc_auc(values_of(y_true), values_of(scores))) < 0.01);

  // from_logits: the same scores given as logits.
  Array logits({rows, 1}, DType::float64);
  for (std::size_t i = 0; i < logits.size(); ++i) logits.set_flat(i, std::log(centred.flat(i) / (1 - centred.flat(i))));
  const Metric from_logits = Metric::from_config({{"class_name", "AUC"}, {"config", {{"from_logits", true}}}});
  CHECK(streamed({from_logits}, y_true, logits).at("auc") ==
        Approx(exact_roc_auc(values_of(y_true), values_of(centred))).epsilon(1e-9));

  // A perfect ranking: 1.
  Array perfect({rows, 1}, DType::float64);
  for (std::size_t i = 0; i < perfect.size(); ++i) perfect.set_flat(i, y_true.flat(i) != 0 ? 0.9 : 0.1);
  CHECK(streamed({"auc"}, y_true, perfect).at("auc") == Approx(1.0).epsilon(1e-12));
}

TEST_CASE("multi-label AUC averages each label's area, weighted by label_weights", "[optim][metrics][streaming]") {
  Rng rng(14);
  const std::int64_t rows = 40;
  const Array y_true = coin_flips({rows, 2}, rng);
  Array scores({rows, 2}, DType::float64);
  for (std::size_t i = 0; i < scores.size(); ++i) scores.set_flat(i, (std::floor(rng.uniform(0.0, 99.0)) * 2 + 0.5) / 199.0);
  std::vector<double> areas;
  for (std::size_t label = 0; label < 2; ++label) {
    std::vector<double> truth, score;
    for (std::size_t r = 0; r < static_cast<std::size_t>(rows); ++r) {
      truth.push_back(y_true.flat(2 * r + label));
      score.push_back(scores.flat(2 * r + label));
    }
    areas.push_back(exact_roc_auc(truth, score));
  }
  const Metric plain = Metric::from_config({{"class_name", "AUC"}, {"config", {{"multi_label", true}}}});
  CHECK(streamed({plain}, y_true, scores).at("auc") == Approx((areas[0] + areas[1]) / 2).epsilon(1e-12));
  const Metric weighted = Metric::from_config(
      {{"class_name", "AUC"},
       {"config", {{"multi_label", true}, {"num_labels", 2}, {"label_weights", Config::list({1.0, 3.0})}}}});
  CHECK(streamed({weighted}, y_true, scores).at("auc") == Approx((areas[0] + 3 * areas[1]) / 4).epsilon(1e-12));
}

TEST_CASE("PR AUC follows Keras's interpolation and its Riemann sums", "[optim][metrics][streaming]") {
  Rng rng(15);
  const Array y_true = coin_flips({45, 1}, rng);
  const Array scores = uniform({45, 1}, rng);
  const std::vector<double> truth = values_of(y_true), score = values_of(scores);
  const int n = 200;
  std::vector<Counts> at(n);
  for (int i = 0; i < n; ++i)
    at[static_cast<std::size_t>(i)] =
        counts_at(truth, score, i == 0 ? -kEpsilon : i == n - 1 ? 1 + kEpsilon : static_cast<double>(i) / (n - 1));
  auto safe = [](double a, double b) { return b == 0 ? 0.0 : a / b; };
  // Davis & Goadrich: precision interpolated between thresholds as TP/P varies linearly in P.
  double interpolated = 0, majoring = 0;
  for (std::size_t i = 0; i + 1 < at.size(); ++i) {
    const Counts &a = at[i], &b = at[i + 1];
    const double dtp = a.tp - b.tp, pa = a.tp + a.fp, pb = b.tp + b.fp, dp = pa - pb;
    const double slope = safe(dtp, std::max(dp, 0.0));
    const double intercept = b.tp - slope * pb;
    const double ratio = pa > 0 && pb > 0 ? safe(pa, std::max(pb, 0.0)) : 1.0;
    interpolated += safe(slope * (dtp + intercept * std::log(ratio)), std::max(b.tp + b.fn, 0.0));
    const double recall_a = safe(a.tp, a.tp + a.fn), recall_b = safe(b.tp, b.tp + b.fn);
    majoring += (recall_a - recall_b) * std::max(safe(a.tp, a.tp + a.fp), safe(b.tp, b.tp + b.fp));
  }
  const Logs logs = streamed(
      {Metric::from_config({{"class_name", "AUC"}, {"config", {{"curve", "PR"}, {"name", "pr"}}}}),
       Metric::from_config(
           {{"class_name", "AUC"}, {"config", {{"curve", "pr"}, {"summation_method", "majoring"}, {"name", "pr_max"}}}})},
      y_true, scores);
  CHECK(logs.at("pr") == Approx(interpolated).epsilon(1e-12));
  CHECK(logs.at("pr_max") == Approx(majoring).epsilon(1e-12));
}

TEST_CASE("F1Score and FBetaScore per class and averaged, as Keras computes them", "[optim][metrics][streaming]") {
  Rng rng(16);
  const std::int64_t rows = 50, classes = 3;
  const Array y_true = one_hot_rows(rows, classes, rng);
  const Array scores = uniform({rows, classes}, rng);
  // Per class: a row predicts its arg-max class (or, with a threshold, every class above it).
  auto per_class = [&](double beta, double threshold) {
    std::vector<double> tp(classes), fp(classes), fn(classes), support(classes);
    for (std::int64_t r = 0; r < rows; ++r) {
      double best = -1;
      for (std::int64_t c = 0; c < classes; ++c) best = std::max(best, scores.flat(static_cast<std::size_t>(r * classes + c)));
      for (std::int64_t c = 0; c < classes; ++c) {
        const auto i = static_cast<std::size_t>(r * classes + c);
        const bool predicted = threshold < 0 ? scores.flat(i) == best : scores.flat(i) > threshold;
        const bool actual = y_true.flat(i) != 0;
        const auto k = static_cast<std::size_t>(c);
        tp[k] += predicted && actual;
        fp[k] += predicted && !actual;
        fn[k] += !predicted && actual;
        support[k] += actual;
      }
    }
    std::vector<double> scores_out;
    for (std::size_t k = 0; k < static_cast<std::size_t>(classes); ++k) {
      const double p = tp[k] / (tp[k] + fp[k] + kEpsilon), r = tp[k] / (tp[k] + fn[k] + kEpsilon);
      scores_out.push_back((1 + beta * beta) * p * r / (beta * beta * p + r + kEpsilon));
    }
    scores_out.push_back(0);  // the support-weighted mean, last
    const double total = support[0] + support[1] + support[2];
    for (std::size_t k = 0; k < static_cast<std::size_t>(classes); ++k)
      scores_out.back() += scores_out[k] * support[k] / (total + kEpsilon);
    return scores_out;
  };
  const std::vector<double> f1 = per_class(1.0, -1.0);
  const Logs logs = streamed(
      {"f1_score",
       Metric::from_config({{"class_name", "F1Score"}, {"config", {{"average", "macro"}, {"name", "f1_macro"}}}}),
       Metric::from_config({{"class_name", "F1Score"}, {"config", {{"average", "weighted"}, {"name", "f1_weighted"}}}})},
      y_true, scores);
  for (std::size_t k = 0; k < 3; ++k) CHECK(logs.at("f1_score_" + std::to_string(k)) == Approx(f1[k]).epsilon(1e-12));
  CHECK(logs.at("f1_macro") == Approx((f1[0] + f1[1] + f1[2]) / 3).epsilon(1e-12));
  CHECK(logs.at("f1_weighted") == Approx(f1[3]).epsilon(1e-12));

  const std::vector<double> f2 = per_class(2.0, 0.4);
  const Logs beta = streamed(
      {Metric::from_config(
          {{"class_name", "FBetaScore"}, {"config", {{"beta", 2.0}, {"threshold", 0.4}, {"average", "macro"}}}})},
      y_true, scores);
  CHECK(beta.at("fbeta_score") == Approx((f2[0] + f2[1] + f2[2]) / 3).epsilon(1e-12));
}

TEST_CASE("R2Score and RootMeanSquaredError over every batch", "[optim][metrics][streaming]") {
  Rng rng(17);
  const std::int64_t rows = 50;
  const Array y_true = uniform({rows, 2}, rng, -1.0, 3.0);
  Array y_pred({rows, 2}, DType::float64);
  for (std::size_t i = 0; i < y_pred.size(); ++i) y_pred.set_flat(i, y_true.flat(i) * 0.8 + rng.uniform(-0.5, 0.5));
  std::vector<double> r2, variance;
  double squares = 0;
  for (std::size_t k = 0; k < 2; ++k) {
    double mean = 0;
    for (std::size_t r = 0; r < static_cast<std::size_t>(rows); ++r) mean += y_true.flat(2 * r + k) / rows;
    double residual = 0, total = 0;
    for (std::size_t r = 0; r < static_cast<std::size_t>(rows); ++r) {
      const double y = y_true.flat(2 * r + k), e = y - y_pred.flat(2 * r + k);
      residual += e * e;
      total += (y - mean) * (y - mean);
      squares += e * e;
    }
    r2.push_back(1 - residual / total);
    variance.push_back(total);
  }
  const double uniform_r2 = (r2[0] + r2[1]) / 2;
  const double adjusted = 1 - (1 - uniform_r2) * (rows - 1) / (rows - 3.0 - 1);
  const Logs logs = streamed(
      {"r2_score", "RootMeanSquaredError",
       Metric::from_config({{"class_name", "R2Score"},
                            {"config", {{"class_aggregation", "variance_weighted_average"}, {"name", "r2_var"}}}}),
       Metric::from_config({{"class_name", "R2Score"}, {"config", {{"num_regressors", 3}, {"name", "r2_adj"}}}}),
       Metric::from_config({{"class_name", "R2Score"}, {"config", {{"class_aggregation", Config()}, {"name", "r2"}}}})},
      y_true, y_pred);
  CHECK(logs.at("r2_score") == Approx(uniform_r2).epsilon(1e-12));
  CHECK(logs.at("r2_var") ==
        Approx((r2[0] * variance[0] + r2[1] * variance[1]) / (variance[0] + variance[1])).epsilon(1e-12));
  CHECK(logs.at("r2_adj") == Approx(adjusted).epsilon(1e-12));
  CHECK(logs.at("r2_0") == Approx(r2[0]).epsilon(1e-12));
  CHECK(logs.at("r2_1") == Approx(r2[1]).epsilon(1e-12));
  CHECK(logs.at("RootMeanSquaredError") == Approx(std::sqrt(squares / (2.0 * rows))).epsilon(1e-12));
}

TEST_CASE("a batch's own value is the metric's formula on the batch alone", "[optim][metrics][streaming]") {
  const Array y_true = Array::from_vector(std::vector<double>{1, 0, 1, 1, 0, 0}, {6, 1});
  const Array y_pred = Array::from_vector(std::vector<double>{0.9, 0.8, 0.4, 0.7, 0.2, 0.6}, {6, 1});
  auto value = [&](const Metric& metric) {
    return testing::evaluate([&](const std::vector<Tensor>& in) { return metric(in[0], in[1]); }, {y_true, y_pred})
        .flat(0);
  };
  CHECK(value("precision") == Approx(2.0 / 4.0));  // predicted 0.9, 0.8, 0.7, 0.6: two of them true
  CHECK(value("recall") == Approx(2.0 / 3.0));
  CHECK(value("auc") == Approx(6.0 / 9.0).epsilon(1e-12));  // positives beat negatives in 6 of 9 pairs
}

TEST_CASE("streaming metrics check their arguments and shapes, and round-trip their configs",
          "[optim][metrics][streaming][errors]") {
  auto make = [](const std::string& name, Config config) {
    return Metric::from_config({{"class_name", name}, {"config", std::move(config)}});
  };
  CHECK_THROWS_AS(make("AUC", {{"curve", "XYZ"}}), ConfigError);
  CHECK_THROWS_AS(make("AUC", {{"summation_method", "sideways"}}), ConfigError);
  CHECK_THROWS_AS(make("AUC", {{"num_thresholds", 1}}), ConfigError);
  CHECK_THROWS_AS(make("AUC", {{"num_labels", 3}}), ConfigError);  // without multi_label
  CHECK_THROWS_WITH(make("Precision", {{"thresholds", Config::list({0.5, 1.2})}}), Catch::Contains("[0, 1]"));
  CHECK_THROWS_AS(make("Recall", {{"top_k", 0}}), ConfigError);
  CHECK_THROWS_AS(make("FBetaScore", {{"beta", 0.0}}), ConfigError);
  CHECK_THROWS_AS(make("F1Score", {{"average", "median"}}), ConfigError);
  CHECK_THROWS_AS(make("F1Score", {{"threshold", 1.5}}), ConfigError);
  CHECK_THROWS_AS(make("R2Score", {{"class_aggregation", "max"}}), ConfigError);
  CHECK_THROWS_AS(make("R2Score", {{"num_regressors", -1}}), ConfigError);

  // Canonical spellings, and a config that makes the same metric again.
  const Metric pr = make("AUC", {{"curve", "pr"}, {"thresholds", Config::list({0.7, 0.2})}});
  CHECK(pr.get_config().get_string("curve") == "PR");
  CHECK(pr.get_config().at("thresholds") == Config::list({0.2, 0.7}));
  CHECK(pr.get_config().get_int("num_thresholds") == 4);
  for (const Metric& metric : {pr, Metric("f1_score"), Metric("r2_score"), Metric("recall"), Metric("auc")})
    CHECK(Metric::from_config(metric.serialize()).get_config() == metric.get_config());
  CHECK(Metric("F1Score").get_config().contains("average"));
  CHECK_FALSE(Metric("F1Score").get_config().contains("beta"));  // as Keras's F1Score, which drops it

  // FBetaScore and R2Score take (samples, outputs) only.
  const Array sequences({4, 3, 2}, DType::float64);
  CHECK_THROWS_AS(testing::evaluate([&](const std::vector<Tensor>& in) { return Metric("f1_score")(in[0], in[1]); },
                                    {sequences, sequences}),
                  ShapeError);
  CHECK_THROWS_WITH(make("Precision", {{"class_id", 5}})(Input({None, 3}, DType::float64), Input({None, 3}, DType::float64)),
                    Catch::Contains("class_id 5"));
}

namespace {

// A user's streaming metric: the fraction of predictions above one half, over every batch.
const bool registered = [] {
  MetricClass fraction{"positive_fraction", Config::map(), TargetForm::elementwise};
  fraction.statistics = [](const Tensor&, const Tensor& y_pred, const Tensor&, const Config&) {
    const Tensor above = ops::greater(y_pred, ops::scalar_like(y_pred, 0.5));
    return std::vector<Tensor>{ops::sum(above), ops::sum(ops::ones_like(above))};
  };
  fraction.result = [](const std::vector<Tensor>& totals, const Config&) { return totals[0] / totals[1]; };
  metric_registry().add("test>PositiveFraction", fraction);
  return true;
}();

}  // namespace

TEST_CASE("a registered streaming metric of one's own accumulates like the built-ins", "[optim][metrics][streaming]") {
  REQUIRE(registered);
  Rng rng(18);
  const Array scores = uniform({23, 2}, rng);
  double above = 0;
  for (double value : values_of(scores)) above += value > 0.5;
  const Logs logs = streamed({"positive_fraction"}, scores, scores, 5);
  CHECK(logs.at("positive_fraction") == Approx(above / 46.0).epsilon(1e-12));
  CHECK(Metric("PositiveFraction").serialize().get_string("registered_name") == "test>PositiveFraction");
}
