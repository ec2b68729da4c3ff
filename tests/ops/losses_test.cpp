#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/autodiff.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/program.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/ops/ops.hpp>
#include "support/gradcheck.hpp"

using namespace kiln;

namespace {

using Loss = std::function<Tensor(const Tensor&, const Tensor&)>;

// ---- inputs ------------------------------------------------------------------------------------------

Array floats(const std::vector<float>& values, const Shape& shape) { return Array::from_vector(values, shape); }

// y_true + an offset whose magnitude stays `gap` away from each of `kinks` (|error| = 0, delta, ...).
Array offset_from(const Array& y_true, Rng& rng, const std::vector<double>& kinks, double low, double high) {
  std::vector<double> offset_kinks;
  for (double kink : kinks) {
    offset_kinks.push_back(kink);
    offset_kinks.push_back(-kink);
  }
  const Array offsets = testing::random_away_from(y_true.shape(), rng, offset_kinks, 0.05, DType::float64, low, high);
  Array y_pred(y_true.shape(), DType::float64);
  for (std::size_t i = 0; i < y_true.size(); ++i) y_pred.set_flat(i, y_true.flat(i) + offsets.flat(i));
  return y_pred;
}

Array class_indices(const Shape& shape, std::int64_t classes, Rng& rng) {
  Array labels(shape, DType::float64);
  for (std::size_t i = 0; i < labels.size(); ++i)
    labels.set_flat(i, static_cast<double>(rng.below(static_cast<std::uint64_t>(classes))));
  return labels;
}

// ---- checks --------------------------------------------------------------------------------------------

void require_report(const testing::GradcheckReport& report) {
  INFO(report.worst_entry());
  REQUIRE(report.max_relative_error <= 1e-6);
}

// y_true and y_pred side by side along the last axis: one array with twice the last dimension.
Array packed(const Array& y_true, const Array& y_pred) {
  const std::int64_t width = y_pred.shape().dim(-1);
  std::vector<std::int64_t> dims = y_pred.shape().dims();
  dims.back() = 2 * width;
  Array both(Shape(dims), DType::float64);
  const auto w = static_cast<std::size_t>(width);
  for (std::size_t r = 0; r < y_pred.size() / w; ++r) {
    for (std::size_t c = 0; c < w; ++c) {
      both.set_flat(2 * w * r + c, y_true.flat(w * r + c));
      both.set_flat(2 * w * r + w + c, y_pred.flat(w * r + c));
    }
  }
  return both;
}

// Checks d(loss)/d(y_true) and d(loss)/d(y_pred) with known shapes, then with an unknown batch
// dimension. The harness makes only input 0's batch unknown, and a loss needs both inputs to agree,
// so for the second check they travel packed in input 0 and are split apart in the graph.
void require_gradient(const std::string& label, const Loss& loss, const Array& y_true, const Array& y_pred) {
  testing::GradcheckOptions options;
  options.label = label;
  require_report(
      testing::gradcheck([&](const std::vector<Tensor>& x) { return loss(x[0], x[1]); }, {y_true, y_pred}, options));
  options.label = label + " unknown batch";
  require_report(testing::gradcheck(
      [&](const std::vector<Tensor>& x) {
        const std::vector<Tensor> parts = ops::split(x[0], 2, -1);
        return loss(parts[0], parts[1]);
      },
      {packed(y_true, y_pred)}, options, /*unknown_batch=*/true));
}

// Labels carry no gradient, so only y_pred is checked. With an unknown batch, y_pred is input 0 and
// every row's label is `label`, derived from y_pred's shape so that it shares the unknown batch.
void require_sparse_gradient(const std::string& label, bool from_logits, const Array& labels, const Array& y_pred) {
  testing::GradcheckOptions options;
  options.label = label;
  options.wrt = {1};
  require_report(testing::gradcheck(
      [&](const std::vector<Tensor>& x) { return ops::sparse_categorical_crossentropy(x[0], x[1], from_logits); },
      {labels, y_pred}, options));
  for (double constant_label : {0.0, 3.0}) {
    options.label = label + " unknown batch, label " + std::to_string(constant_label);
    options.wrt = {};
    require_report(testing::gradcheck(
        [&](const std::vector<Tensor>& x) {
          const Tensor rows = ops::add_scalar(ops::sum(ops::scale(x[0], 0.0), {-1}), constant_label);
          return ops::sparse_categorical_crossentropy(rows, x[0], from_logits);
        },
        {y_pred}, options, /*unknown_batch=*/true));
  }
}

double evaluate_loss(const Loss& loss, const Array& y_true, const Array& y_pred) {
  const Array value =
      testing::evaluate([&](const std::vector<Tensor>& x) { return loss(x[0], x[1]); }, {y_true, y_pred});
  REQUIRE(value.shape() == Shape{});
  return value.flat(0);
}

// Keras: the per-sample loss reduces the last axis, then the result is averaged.
double mean_of_rows(const Array& y_true, const Array& y_pred,
                    const std::function<double(const std::vector<double>&, const std::vector<double>&)>& row_loss) {
  const std::int64_t classes = y_pred.shape().dim(-1);
  const std::size_t rows = y_pred.size() / static_cast<std::size_t>(classes);
  const std::size_t true_stride = y_true.size() / rows;
  double total = 0.0;
  for (std::size_t r = 0; r < rows; ++r) {
    std::vector<double> t, p;
    for (std::size_t j = 0; j < true_stride; ++j) t.push_back(y_true.flat(r * true_stride + j));
    for (std::int64_t c = 0; c < classes; ++c) p.push_back(y_pred.flat(r * static_cast<std::size_t>(classes) + c));
    total += row_loss(t, p);
  }
  return total / static_cast<double>(rows);
}

std::function<double(const std::vector<double>&, const std::vector<double>&)> elementwise_mean(
    std::function<double(double, double)> term) {
  return [term](const std::vector<double>& t, const std::vector<double>& p) {
    double total = 0.0;
    for (std::size_t i = 0; i < p.size(); ++i) total += term(t[i], p[i]);
    return total / static_cast<double>(p.size());
  };
}

double clip(double p) { return std::min(std::max(p, 1e-7), 1.0 - 1e-7); }

double categorical_row(const std::vector<double>& t, const std::vector<double>& p) {
  double s = 0.0;
  for (double v : p) s += v;
  double loss = 0.0;
  for (std::size_t c = 0; c < p.size(); ++c) loss -= t[c] * std::log(clip(p[c] / s));
  return loss;
}

double categorical_logits_row(const std::vector<double>& t, const std::vector<double>& z) {
  double max = -INFINITY;
  for (double v : z) max = std::max(max, v);
  double sum = 0.0;
  for (double v : z) sum += std::exp(v - max);
  double loss = 0.0;
  for (std::size_t c = 0; c < z.size(); ++c) loss -= t[c] * (z[c] - max - std::log(sum));
  return loss;
}

std::vector<double> one_hot(double label, std::size_t classes) {
  std::vector<double> t(classes, 0.0);
  t[static_cast<std::size_t>(label)] = 1.0;
  return t;
}

const Loss mse = [](const Tensor& t, const Tensor& p) { return ops::mean_squared_error(t, p); };
const Loss mae = [](const Tensor& t, const Tensor& p) { return ops::mean_absolute_error(t, p); };
Loss huber(double delta) {
  return [delta](const Tensor& t, const Tensor& p) { return ops::huber(t, p, delta); };
}
Loss bce(bool from_logits) {
  return [from_logits](const Tensor& t, const Tensor& p) { return ops::binary_crossentropy(t, p, from_logits); };
}
Loss cce(bool from_logits) {
  return [from_logits](const Tensor& t, const Tensor& p) { return ops::categorical_crossentropy(t, p, from_logits); };
}
Loss sparse_cce(bool from_logits) {
  return [from_logits](const Tensor& t, const Tensor& p) {
    return ops::sparse_categorical_crossentropy(t, p, from_logits);
  };
}

}  // namespace

// ---- gradients -------------------------------------------------------------------------------------------

TEST_CASE("losses: regression losses' gradients match central differences", "[ops][losses][grad]") {
  Rng rng(7);
  const Array y_true = testing::random_array({3, 4}, rng);
  require_gradient("mean_squared_error", mse, y_true, testing::random_array({3, 4}, rng));
  require_gradient("mean_squared_error rank 3", mse, testing::random_array({2, 3, 4}, rng),
                   testing::random_array({2, 3, 4}, rng));
  // Away from the kink of |error| at 0, and of huber's branches at |error| = delta.
  require_gradient("mean_absolute_error", mae, y_true, offset_from(y_true, rng, {0.0}, -1.0, 1.0));
  require_gradient("huber delta=1", huber(1.0), y_true, offset_from(y_true, rng, {0.0, 1.0}, -2.0, 2.0));
  require_gradient("huber delta=0.3", huber(0.3), y_true, offset_from(y_true, rng, {0.0, 0.3}, -1.0, 1.0));
}

TEST_CASE("losses: crossentropies' gradients match central differences", "[ops][losses][grad]") {
  Rng rng(7);
  const Array targets = testing::random_array({3, 4}, rng, DType::float64, 0.0, 1.0);
  // Probabilities inside [1e-7, 1 - 1e-7], where the clipped loss is smooth.
  require_gradient("binary_crossentropy", bce(false), targets,
                   testing::random_array({3, 4}, rng, DType::float64, 0.05, 0.95));
  require_gradient("binary_crossentropy from_logits", bce(true), targets,
                   testing::random_array({3, 4}, rng, DType::float64, -3.0, 3.0));
  require_gradient("categorical_crossentropy", cce(false), targets,
                   testing::random_array({3, 4}, rng, DType::float64, 0.1, 1.0));
  require_gradient("categorical_crossentropy from_logits", cce(true), targets,
                   testing::random_array({3, 4}, rng, DType::float64, -3.0, 3.0));
  require_gradient("categorical_crossentropy rank 3", cce(true),
                   testing::random_array({2, 3, 4}, rng, DType::float64, 0.0, 1.0),
                   testing::random_array({2, 3, 4}, rng, DType::float64, -3.0, 3.0));
}

TEST_CASE("losses: sparse categorical crossentropy's gradient matches central differences", "[ops][losses][grad]") {
  Rng rng(7);
  const Array probabilities = testing::random_array({3, 4}, rng, DType::float64, 0.1, 1.0);
  const Array logits = testing::random_array({3, 4}, rng, DType::float64, -3.0, 3.0);
  require_sparse_gradient("sparse_categorical_crossentropy", false, class_indices({3}, 4, rng), probabilities);
  require_sparse_gradient("sparse_categorical_crossentropy from_logits", true, class_indices({3}, 4, rng), logits);
  require_sparse_gradient("sparse_categorical_crossentropy labels (3, 1)", true, class_indices({3, 1}, 4, rng), logits);
  require_sparse_gradient("sparse_categorical_crossentropy rank 3", false, class_indices({2, 3}, 4, rng),
                          testing::random_array({2, 3, 4}, rng, DType::float64, 0.1, 1.0));
}

TEST_CASE("losses: labels of sparse categorical crossentropy carry no gradient", "[ops][losses][grad]") {
  Graph graph;
  const Tensor labels = graph.placeholder({Shape::unknown}, DType::float32, "labels");
  const Tensor logits = graph.placeholder({Shape::unknown, 4}, DType::float32, "logits");
  const Tensor loss = ops::sparse_categorical_crossentropy(labels, logits, true);
  REQUIRE_THROWS_AS(gradients(loss, {labels}), NotDifferentiable);
  REQUIRE_THROWS_WITH(gradients(loss, {labels}), Catch::Contains("class indices"));
}

// ---- values --------------------------------------------------------------------------------------------

TEST_CASE("losses: values match the examples in Keras's documentation", "[ops][losses]") {
  const Array t = floats({0, 1, 0, 0}, {2, 2});
  CHECK(evaluate_loss(mse, t, floats({1, 1, 1, 0}, {2, 2})) == Approx(0.5));
  CHECK(evaluate_loss(mae, t, floats({1, 1, 1, 0}, {2, 2})) == Approx(0.5));
  const Array p = floats({0.6f, 0.4f, 0.4f, 0.6f}, {2, 2});
  CHECK(evaluate_loss(huber(1.0), t, p) == Approx(0.155).epsilon(1e-3));
  CHECK(evaluate_loss(bce(false), t, p) == Approx(0.815).epsilon(1e-3));
  CHECK(evaluate_loss(bce(true), floats({0, 1, 0, 0}, {4}), floats({-18.6f, 0.51f, 2.94f, -12.8f}, {4})) ==
        Approx(0.865).epsilon(1e-3));
  const Array probabilities = floats({0.05f, 0.95f, 0.0f, 0.1f, 0.8f, 0.1f}, {2, 3});
  CHECK(evaluate_loss(cce(false), floats({0, 1, 0, 0, 0, 1}, {2, 3}), probabilities) == Approx(1.177).epsilon(1e-3));
  CHECK(evaluate_loss(sparse_cce(false), floats({1, 2}, {2}), probabilities) == Approx(1.177).epsilon(1e-3));
}

TEST_CASE("losses: float32 values match plain-loop Keras formulas", "[ops][losses]") {
  const Shape shape{2, 3, 4};
  Rng rng(3);
  auto sample = [&](double low, double high) {
    std::vector<float> values;
    for (int i = 0; i < 24; ++i) values.push_back(static_cast<float>(rng.uniform(low, high)));
    return floats(values, shape);
  };
  const Array t = sample(0.0, 1.0), p = sample(0.02, 0.98), z = sample(-4.0, 4.0);
  auto check = [&](const Loss& loss, const Array& y_true, const Array& y_pred, double expected) {
    CHECK(evaluate_loss(loss, y_true, y_pred) == Approx(expected).epsilon(1e-6));
  };
  check(mse, t, z, mean_of_rows(t, z, elementwise_mean([](double a, double b) { return (b - a) * (b - a); })));
  check(mae, t, z, mean_of_rows(t, z, elementwise_mean([](double a, double b) { return std::abs(b - a); })));
  check(huber(0.7), t, z, mean_of_rows(t, z, elementwise_mean([](double a, double b) {
                                         const double e = std::abs(b - a);
                                         return e <= 0.7 ? 0.5 * e * e : 0.7 * e - 0.5 * 0.7 * 0.7;
                                       })));
  check(bce(false), t, p, mean_of_rows(t, p, elementwise_mean([](double a, double b) {
                                         return -(a * std::log(clip(b)) + (1 - a) * std::log(1 - clip(b)));
                                       })));
  check(bce(true), t, z,
        mean_of_rows(t, z, elementwise_mean([](double a, double b) {
                       return -(a * std::log(1 / (1 + std::exp(-b))) + (1 - a) * std::log(1 - 1 / (1 + std::exp(-b))));
                     })));
  check(cce(false), t, p, mean_of_rows(t, p, categorical_row));
  check(cce(true), t, z, mean_of_rows(t, z, categorical_logits_row));

  const Array labels = floats({0, 3, 1, 2, 2, 0}, {2, 3});
  check(sparse_cce(false), labels, p,
        mean_of_rows(labels, p, [](const std::vector<double>& l, const std::vector<double>& q) {
          return categorical_row(one_hot(l[0], q.size()), q);
        }));
  check(sparse_cce(true), labels, z,
        mean_of_rows(labels, z, [](const std::vector<double>& l, const std::vector<double>& q) {
          return categorical_logits_row(one_hot(l[0], q.size()), q);
        }));
}

TEST_CASE("losses: the mean divides by the batch size fed at run time", "[ops][losses]") {
  Graph graph;
  const Tensor y_true = graph.placeholder({Shape::unknown, 2}, DType::float32, "y_true");
  const Tensor y_pred = graph.placeholder({Shape::unknown, 2}, DType::float32, "y_pred");
  const Tensor loss = ops::mean_squared_error(y_true, y_pred);
  Program program(graph, {loss});
  for (std::int64_t batch : {1, 3, 8}) {
    program.feed(y_true, Array::full({batch, 2}, 0.0));
    program.feed(y_pred, Array::full({batch, 2}, 2.0));
    program.run();
    CHECK(program.scalar(loss) == Approx(4.0));
  }
}

TEST_CASE("losses: extreme predictions stay finite", "[ops][losses]") {
  const Array t = floats({1, 0, 0, 1}, {2, 2});
  // Probabilities of exactly 0 and 1 are clipped to [1e-7, 1 - 1e-7] before the log.
  const double clipped = evaluate_loss(bce(false), t, floats({0, 1, 1, 0}, {2, 2}));
  CHECK(std::isfinite(clipped));
  CHECK(clipped == Approx(-std::log(1e-7)).epsilon(1e-4));
  CHECK(std::isfinite(evaluate_loss(cce(false), t, floats({0, 1, 1, 0}, {2, 2}))));
  const Array huge = floats({1000, -1000, -1000, 1000}, {2, 2});
  CHECK(evaluate_loss(bce(true), t, huge) == Approx(0.0).margin(1e-6));
  CHECK(evaluate_loss(cce(true), t, huge) == Approx(0.0).margin(1e-6));
  CHECK(evaluate_loss(sparse_cce(true), floats({0, 1}, {2}), huge) == Approx(0.0).margin(1e-6));
  CHECK(evaluate_loss(cce(true), floats({0, 1, 1, 0}, {2, 2}), huge) == Approx(2000.0));

  // Gradients at the extremes too.
  Graph graph;
  const Tensor labels = graph.placeholder({2, 2}, DType::float32, "labels");
  const Tensor logits = graph.placeholder({2, 2}, DType::float32, "logits");
  const Tensor loss =
      ops::add(ops::binary_crossentropy(labels, logits, true), ops::categorical_crossentropy(labels, logits, true));
  const Tensor grad = gradients(loss, {logits}).front();
  Program program(graph, {grad});
  program.feed(labels, floats({0, 1, 1, 0}, {2, 2}));
  program.feed(logits, huge);
  program.run();
  const Array values = program.fetch(grad);
  for (std::size_t i = 0; i < values.size(); ++i) CHECK(std::isfinite(values.flat(i)));
}

// ---- errors --------------------------------------------------------------------------------------------

TEST_CASE("losses: mismatched shapes are ShapeErrors naming the op and both shapes", "[ops][losses]") {
  Graph graph;
  const Tensor a = graph.placeholder({Shape::unknown, 3}, DType::float32, "a");
  const Tensor b = graph.placeholder({Shape::unknown, 4}, DType::float32, "b");
  const std::vector<std::pair<std::string, Loss>> losses = {{"mean_squared_error", mse},
                                                            {"mean_absolute_error", mae},
                                                            {"huber", huber(1.0)},
                                                            {"binary_crossentropy", bce(false)},
                                                            {"categorical_crossentropy", cce(true)}};
  for (const auto& entry : losses) {
    INFO(entry.first);
    REQUIRE_THROWS_AS(entry.second(a, b), ShapeError);
    REQUIRE_THROWS_WITH(entry.second(a, b), Catch::Contains(entry.first + " '" + entry.first) &&
                                                Catch::Contains("(None, 3)") && Catch::Contains("(None, 4)"));
  }
  const Tensor scalar = graph.placeholder(Shape{}, DType::float32, "scalar");
  REQUIRE_THROWS_AS(ops::mean_squared_error(scalar, scalar), ShapeError);
  REQUIRE_THROWS_WITH(ops::mean_squared_error(a, graph.placeholder({2, 3})),
                      Catch::Contains("(None, 3)") && Catch::Contains("(2, 3)"));
}

TEST_CASE("losses: sparse labels must match y_pred without its last axis", "[ops][losses]") {
  Graph graph;
  const Tensor logits = graph.placeholder({Shape::unknown, 5}, DType::float32, "logits");
  CHECK_NOTHROW(ops::sparse_categorical_crossentropy(graph.placeholder({Shape::unknown}), logits));
  CHECK_NOTHROW(ops::sparse_categorical_crossentropy(graph.placeholder({Shape::unknown, 1}), logits));
  const Tensor one_hot_labels = graph.placeholder({Shape::unknown, 5}, DType::float32, "one_hot");
  REQUIRE_THROWS_AS(ops::sparse_categorical_crossentropy(one_hot_labels, logits), ShapeError);
  REQUIRE_THROWS_WITH(ops::sparse_categorical_crossentropy(one_hot_labels, logits, true),
                      Catch::Contains("sparse_categorical_crossentropy 'sparse_categorical_crossentropy") &&
                          Catch::Contains("(None, 5), (None, 5)"));
  REQUIRE_THROWS_AS(ops::sparse_categorical_crossentropy(graph.placeholder({4}), logits), ShapeError);
  REQUIRE_THROWS_AS(ops::sparse_categorical_crossentropy(graph.placeholder(Shape{}), graph.placeholder(Shape{})),
                    ShapeError);
}

TEST_CASE("losses: a class index out of range is a ValueError at run time", "[ops][losses]") {
  const Array logits = floats({0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f, 0.7f, 0.8f}, {2, 4});
  for (bool from_logits : {true, false}) {
    const Loss loss = sparse_cce(from_logits);
    REQUIRE_THROWS_AS(evaluate_loss(loss, floats({1, 4}, {2}), logits), ValueError);
    REQUIRE_THROWS_WITH(evaluate_loss(loss, floats({1, 4}, {2}), logits),
                        Catch::Contains("sparse_categorical_crossentropy") && Catch::Contains("class index 4") &&
                            Catch::Contains("[0, 4)"));
    REQUIRE_THROWS_WITH(evaluate_loss(loss, floats({-1, 0}, {2}), logits), Catch::Contains("class index -1"));
    REQUIRE_THROWS_WITH(evaluate_loss(loss, floats({0, 1.5f}, {2}), logits), Catch::Contains("class index 1.5"));
  }
  // The gradient kernel checks too: it can run in a program without the forward value.
  Graph graph;
  const Tensor labels = graph.placeholder({2}, DType::float32, "labels");
  const Tensor z = graph.placeholder({2, 4}, DType::float32, "logits");
  const Tensor grad = gradients(ops::sparse_categorical_crossentropy(labels, z, true), {z}).front();
  Program program(graph, {grad});
  program.feed(labels, floats({7, 0}, {2}));
  program.feed(z, logits);
  REQUIRE_THROWS_WITH(program.run(), Catch::Contains("class index 7"));
}
