#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/autodiff.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/program.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/ops/ops.hpp>
#include "support/gradcheck.hpp"
#include "support/thread_counts.hpp"

using namespace kiln;
using Catch::Contains;

namespace {

Tensor layer_norm_of(const std::vector<Tensor>& x) { return ops::layer_norm(x[0], x[1], x[2], 1e-3); }

// The textbook formula in double, one row at a time.
std::vector<double> reference_layer_norm(const Array& x, const Array& gamma, const Array& beta, double epsilon) {
  const std::size_t size = gamma.size();
  std::vector<double> out(x.size());
  for (std::size_t row = 0; row < x.size() / size; ++row) {
    double mean = 0, variance = 0;
    for (std::size_t j = 0; j < size; ++j) mean += x.flat(row * size + j) / static_cast<double>(size);
    for (std::size_t j = 0; j < size; ++j) {
      const double deviation = x.flat(row * size + j) - mean;
      variance += deviation * deviation / static_cast<double>(size);
    }
    for (std::size_t j = 0; j < size; ++j)
      out[row * size + j] =
          (x.flat(row * size + j) - mean) / std::sqrt(variance + epsilon) * gamma.flat(j) + beta.flat(j);
  }
  return out;
}

}  // namespace

TEST_CASE("layer_norm gradient matches central differences", "[ops][layer_norm][grad]") {
  // 39 rows of {3, 13, 4}: whole blocks of the kernels' rows (a vector's lanes: 8 in float64) and a partial one;
  // rows of a whole vector, and of two and a partial one.
  for (const Shape& shape : {Shape{3, 5}, Shape{2, 3, 4}, Shape{6}, Shape{3, 13, 4}, Shape{5, 8}, Shape{9, 20}}) {
    kiln::Rng rng(7);
    testing::GradcheckOptions o;
    o.label = "layer_norm " + shape.to_string();
    const Shape features{shape[shape.rank() - 1]};
    auto r = testing::gradcheck(layer_norm_of, {shape, features, features}, rng, o);
    INFO(r.worst_entry());
    REQUIRE(r.max_relative_error <= 1e-6);
  }
}

TEST_CASE("layer_norm gradient with an unknown batch dimension", "[ops][layer_norm][grad]") {
  kiln::Rng rng(7);
  testing::GradcheckOptions o;
  o.label = "layer_norm unknown batch";
  // The harness makes dimension 0 of every input unknown, so gamma and beta are constants here.
  auto r = testing::gradcheck(
      [](const std::vector<Tensor>& x) {
        Rng weights(3);
        Graph& graph = x[0].graph();
        const Tensor gamma = graph.constant(testing::random_array({5}, weights), "gamma");
        const Tensor beta = graph.constant(testing::random_array({5}, weights), "beta");
        return ops::layer_norm(x[0], gamma, beta, 1e-3);
      },
      {testing::random_array({4, 3, 5}, rng)}, o, /*unknown_batch=*/true);
  INFO(r.worst_entry());
  REQUIRE(r.max_relative_error <= 1e-6);
}

TEST_CASE("layer_norm matches the textbook formula in float32", "[ops][layer_norm]") {
  kiln::Rng rng(11);
  // Rows shorter than a vector of 16 floats (one masked load each), one vector, one and a part, two and a part; 37
  // rows: blocks of 16 rows and one of 5.
  for (const std::int64_t features : {7, 12, 16, 20, 35}) {
    INFO(features << " features");
    const Array x = testing::random_array({37, features}, rng, DType::float32, -3.0, 3.0);
    const Array gamma = testing::random_array({features}, rng, DType::float32);
    const Array beta = testing::random_array({features}, rng, DType::float32);
    const Array y = testing::evaluate(layer_norm_of, {x, gamma, beta});
    const std::vector<double> expected = reference_layer_norm(x, gamma, beta, 1e-3);
    REQUIRE(y.shape() == x.shape());
    for (std::size_t i = 0; i < y.size(); ++i) CHECK(y.flat(i) == Approx(expected[i]).margin(1e-5));
  }
}

TEST_CASE("layer_norm in float32: gradients agree with float64, output and dx bitwise the same on any thread count",
          "[ops][layer_norm][threads]") {
  Rng rng(12);
  const Shape shape{1000, 20};  // (large enough for kiln to split among two threads)
  const Array x64 = testing::random_array(shape, rng, DType::float64, -2, 3);
  const Array gamma64 = testing::random_array({20}, rng), beta64 = testing::random_array({20}, rng);
  const Array weights64 = testing::random_array(shape, rng);
  const std::vector<Array> reference =
      testing::evaluate_with_gradients(layer_norm_of, {x64, gamma64, beta64}, weights64);
  const std::vector<Array> inputs{x64.astype(DType::float32), gamma64.astype(DType::float32),
                                  beta64.astype(DType::float32)};
  const Array weights = weights64.astype(DType::float32);
  const std::vector<Array> one = testing::evaluate_with_gradients_on(1, layer_norm_of, inputs, weights);
  for (std::size_t i = 0; i < one.size(); ++i) {
    INFO("result " << i);
    CHECK(testing::max_relative_difference(one[i].astype(DType::float64), reference[i]) < 5e-5);
  }
  testing::check_thread_counts(layer_norm_of, inputs, weights, 2, 1e-5);
  testing::check_thread_counts(layer_norm_of, {x64, gamma64, beta64}, weights64, 2, 1e-12);
  // (512, 128): gamma's gradient split among up to 8 workers.
  const Shape wide{512, 128};
  testing::check_thread_counts(
      layer_norm_of,
      {testing::random_array(wide, rng, DType::float32, -2, 3), testing::random_array({128}, rng, DType::float32),
       testing::random_array({128}, rng, DType::float32)},
      testing::random_array(wide, rng, DType::float32), 2, 1e-5);
}

TEST_CASE("layer_norm stays accurate when the mean is large next to the spread", "[ops][layer_norm]") {
  // E[x^2] - E[x]^2 in float32 would lose the variance (about 1.25) in the rounding of ~1e6.
  const Array x = Array::from_vector(std::vector<float>{1000, 1001, 1002, 1003, -5000, -5002, -5004, -5006}, {2, 4});
  const Array gamma = Array::full({4}, 1.0);
  const Array beta({4});
  const Array y = testing::evaluate(layer_norm_of, {x, gamma, beta});
  const std::vector<double> expected = reference_layer_norm(x, gamma, beta, 1e-3);
  for (std::size_t i = 0; i < y.size(); ++i) CHECK(y.flat(i) == Approx(expected[i]).margin(1e-5));
}

TEST_CASE("layer_norm needs gamma and beta of the last dimension's size", "[ops][layer_norm][errors]") {
  Graph graph;
  const Tensor x = graph.placeholder({Shape::unknown, 5}, DType::float32, "x");
  const Tensor right = graph.variable("gamma", Array({5}));
  const Tensor wrong = graph.variable("wrong", Array({4}));
  CHECK_THROWS_AS(ops::layer_norm(x, wrong, right), ShapeError);
  CHECK_THROWS_WITH(ops::layer_norm(x, wrong, right),
                    Contains("layer_norm 'layer_norm") && Contains("(5,)") && Contains("(None, 5), (4,), (5,)"));
  CHECK_THROWS_WITH(ops::layer_norm(x, right, wrong), Contains("layer_norm") && Contains("(None, 5), (5,), (4,)"));
  const Tensor scalar = graph.placeholder({}, DType::float32, "scalar");
  CHECK_THROWS_WITH(ops::layer_norm(scalar, right, right), Contains("layer_norm") && Contains("(), (5,), (5,)"));
  CHECK_THROWS_AS(ops::layer_norm(x, right, right, 0.0), ConfigError);
  CHECK(ops::layer_norm(x, right, right).shape() == x.shape());
}

// ---- rms_norm -------------------------------------------------------------------------------------------

namespace {

// x · rsqrt(mean(x²) + ε) · scale over rows of the last `trailing` axes, written out.
Array rms_reference(const Array& x, const Array& scale, double epsilon) {
  const auto row = static_cast<std::size_t>(scale.size());
  Array out = x.astype(DType::float64);
  for (std::size_t start = 0; start < x.size(); start += row) {
    double squares = 0;
    for (std::size_t j = 0; j < row; ++j) squares += x.flat(start + j) * x.flat(start + j);
    const double r = 1.0 / std::sqrt(squares / static_cast<double>(row) + epsilon);
    for (std::size_t j = 0; j < row; ++j) out.set_flat(start + j, x.flat(start + j) * r * scale.flat(j));
  }
  return out;
}

Tensor rms_composed(const Tensor& x, const Tensor& scale, double epsilon, int trailing) {
  ops::Axes axes;
  for (int i = x.rank() - trailing; i < x.rank(); ++i) axes.push_back(i);
  return x * ops::rsqrt(ops::mean(ops::square(x), axes, true) + epsilon) * scale;
}

struct RmsCase {
  Shape x;
  int trailing;
};
// Rows shorter than a vector, whole vectors, whole vectors and a tail; fewer rows than a block of the kernels
// (a vector's lanes), and more with a partial block last.
const std::vector<RmsCase> rms_cases{{{4, 6}, 1},   {{2, 3, 5}, 1},  {{2, 3, 4}, 2}, {{7}, 1},
                                     {{37, 16}, 1}, {{3, 7, 20}, 1}, {{5, 3, 11}, 2}};

Shape row_shape(const RmsCase& c) {
  return Shape(std::vector<std::int64_t>(c.x.dims().end() - c.trailing, c.x.dims().end()));
}

}  // namespace

TEST_CASE("rms_norm matches the formula written out and the composition of primitive ops", "[ops][rms_norm]") {
  Rng rng(45);
  for (const RmsCase& c : rms_cases) {
    INFO(c.x.to_string() << " trailing " << c.trailing);
    const std::vector<Array> inputs{testing::random_array(c.x, rng, DType::float64, -2, 3),
                                    testing::random_array(row_shape(c), rng)};
    const Array weights = testing::random_array(c.x, rng);
    const std::vector<Array> fused = testing::evaluate_with_gradients(
        [&](const std::vector<Tensor>& t) { return ops::rms_norm(t[0], t[1], 1e-6, c.trailing); }, inputs, weights);
    const std::vector<Array> primitive = testing::evaluate_with_gradients(
        [&](const std::vector<Tensor>& t) { return rms_composed(t[0], t[1], 1e-6, c.trailing); }, inputs, weights);
    CHECK(testing::max_relative_difference(fused[0], rms_reference(inputs[0], inputs[1], 1e-6)) < 1e-12);
    for (std::size_t i = 0; i < fused.size(); ++i) {
      INFO("result " << i);
      CHECK(testing::max_relative_difference(fused[i], primitive[i]) < 1e-11);
    }
  }
}

TEST_CASE("rms_norm gradients match central differences", "[ops][rms_norm][grad]") {
  Rng rng(46);
  for (const RmsCase& c : rms_cases) {
    testing::GradcheckOptions o;
    o.label = "rms_norm " + c.x.to_string() + " trailing " + std::to_string(c.trailing);
    const auto r =
        testing::gradcheck([&c](const std::vector<Tensor>& t) { return ops::rms_norm(t[0], t[1], 1e-6, c.trailing); },
                           {c.x, row_shape(c)}, rng, o);
    INFO(o.label << ": " << r.worst_entry());
    REQUIRE(r.max_relative_error <= 1e-6);
  }
  testing::GradcheckOptions o;
  o.label = "rms_norm unknown batch";
  const Array scale = testing::random_array({4}, rng);
  const auto r = testing::gradcheck(
      [&](const std::vector<Tensor>& t) { return ops::rms_norm(t[0], t[0].graph().constant(scale.copy())); },
      {testing::random_array({3, 2, 4}, rng)}, o, /*unknown_batch=*/true);
  INFO(r.worst_entry());
  REQUIRE(r.max_relative_error <= 1e-6);
}

TEST_CASE("rms_norm in float32 agrees with float64, output and dx bitwise the same on any thread count",
          "[ops][rms_norm][threads]") {
  // The kernels sum a block of rows' squares in vector lanes; each row's sums depend only on the row, so how the
  // blocks are split among threads changes nothing but the scale's gradient, a sum over rows.
  Rng rng(47);
  const Shape shape{40, 9, 72};  // rows of 72: four vectors of 16 floats and a tail of 8; 360 rows
  const Array x64 = testing::random_array(shape, rng, DType::float64, -2, 3);
  const Array scale64 = testing::random_array({72}, rng);
  const Array weights64 = testing::random_array(shape, rng);
  const auto rms = [](const std::vector<Tensor>& t) { return ops::rms_norm(t[0], t[1], 1e-6); };
  const std::vector<Array> reference = testing::evaluate_with_gradients(rms, {x64, scale64}, weights64);
  const std::vector<Array> inputs{x64.astype(DType::float32), scale64.astype(DType::float32)};
  const Array weights = weights64.astype(DType::float32);
  const std::vector<Array> one = testing::evaluate_with_gradients_on(1, rms, inputs, weights);
  for (std::size_t i = 0; i < one.size(); ++i) {
    INFO("result " << i);
    // (the scale's gradient sums 360 rows: relative to its largest entry)
    CHECK(testing::max_relative_difference(one[i].astype(DType::float64), reference[i]) < 2e-5);
  }
  testing::check_thread_counts(rms, inputs, weights, 2, 1e-5);
  testing::check_thread_counts(rms, {x64, scale64}, weights64, 2, 1e-12);
}

TEST_CASE("rms_norm refuses bad shapes and arguments", "[ops][rms_norm][errors]") {
  Graph g;
  const Tensor x = g.placeholder({Shape::unknown, 5, 6}, DType::float32, "x");
  const Tensor six = g.placeholder({6}, DType::float32, "six");
  const Tensor thirty = g.placeholder({5, 6}, DType::float32, "thirty");
  CHECK_THROWS_AS(ops::rms_norm(x, thirty), ShapeError);
  CHECK_THROWS_WITH(ops::rms_norm(x, thirty), Contains("scale must have the normalized axes' shape (6,)"));
  CHECK_NOTHROW(ops::rms_norm(x, thirty, 1e-6, 2));
  CHECK_THROWS_WITH(ops::rms_norm(x, six, 1e-6, 3), Contains("the normalized axes must be known"));
  CHECK_THROWS_WITH(ops::rms_norm(x, six, 1e-6, 4), Contains("cannot normalize the last 4 axes of a rank-3 input"));
  CHECK_THROWS_WITH(ops::rms_norm(x, six, 0.0), Contains("epsilon must be positive"));
}
