#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/ops/ops.hpp>
#include "support/gradcheck.hpp"

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
  for (const Shape& shape : {Shape{3, 5}, Shape{2, 3, 4}, Shape{6}}) {
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
  const Array x = testing::random_array({4, 7}, rng, DType::float32, -3.0, 3.0);
  const Array gamma = testing::random_array({7}, rng, DType::float32);
  const Array beta = testing::random_array({7}, rng, DType::float32);
  const Array y = testing::evaluate(layer_norm_of, {x, gamma, beta});
  const std::vector<double> expected = reference_layer_norm(x, gamma, beta, 1e-3);
  REQUIRE(y.shape() == x.shape());
  for (std::size_t i = 0; i < y.size(); ++i) CHECK(y.flat(i) == Approx(expected[i]).margin(1e-5));
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
