// Constants and fills that follow the shapes a plan is made for: positions, causal masks, sizes.
#include <catch2/catch.hpp>

#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/program.hpp>
#include <kiln/ops/ops.hpp>

using namespace kiln;
using Catch::Contains;

namespace {
constexpr std::int64_t None = Shape::unknown;
}  // namespace

TEST_CASE("positions counts along an axis whose size is known only when planned", "[ops][constants]") {
  Graph graph;
  const Tensor x = graph.placeholder({None, None, 3}, DType::float64, "x");
  const Tensor steps = ops::positions(x, -2);
  CHECK(steps.shape() == Shape{None});
  CHECK(ops::positions(x, 2).shape() == Shape{3});
  Program program(graph, {steps});
  for (const std::int64_t length : {4, 1, 7}) {
    program.feed(x, Array({2, length, 3}, DType::float64));
    program.run();
    std::vector<double> expected;
    for (std::int64_t i = 0; i < length; ++i) expected.push_back(static_cast<double>(i));
    CHECK(program.fetch(steps).to_vector<double>() == expected);
  }
  CHECK_THROWS_AS(ops::positions(x, 3), ShapeError);
}

namespace {
// Keras's top-left aligned mask: query i sees key j when j <= i.
std::vector<float> causal_values(std::int64_t queries, std::int64_t keys) {
  std::vector<float> values;
  for (std::int64_t i = 0; i < queries; ++i)
    for (std::int64_t j = 0; j < keys; ++j) values.push_back(j <= i ? 1.0f : 0.0f);
  return values;
}
}  // namespace

TEST_CASE("causal_mask_like masks later keys, for lengths known when built or only when planned",
          "[ops][constants]") {
  Graph graph;
  const Tensor q = graph.placeholder({None, None, 2}, DType::float32, "q");
  const Tensor k = graph.placeholder({None, None, 2}, DType::float32, "k");
  const Tensor planned = ops::causal_mask_like(ops::matmul(q, k, false, true));  // scores (None, None, None)
  CHECK(planned.shape() == Shape{None, None});
  const Tensor fixed = ops::causal_mask_like(graph.placeholder({None, 3, 4}, DType::float32, "scores"));
  CHECK(fixed.shape() == Shape{3, 4});
  CHECK(fixed.node().kind == NodeKind::constant);
  Program program(graph, {planned, fixed});
  for (const auto& [queries, keys] : std::vector<std::pair<std::int64_t, std::int64_t>>{{3, 3}, {2, 5}, {4, 2}}) {
    program.feed(q, Array({1, queries, 2}));
    program.feed(k, Array({1, keys, 2}));
    program.run();
    INFO(queries << " queries, " << keys << " keys");
    CHECK(program.fetch(planned).to_vector<float>() == causal_values(queries, keys));
  }
  CHECK(program.fetch(fixed).to_vector<float>() == causal_values(3, 4));
  CHECK_THROWS_AS(ops::causal_mask_like(ops::sum(q)), ShapeError);
}

TEST_CASE("dim_size and the fills follow the planned shape", "[ops][constants]") {
  Graph graph;
  const Tensor x = graph.placeholder({None, None}, DType::float32, "x");
  const Tensor length = ops::dim_size(x, -1);
  const Tensor ones = ops::ones_like(x);
  Program program(graph, {length, ones});
  program.feed(x, Array({2, 6}));
  program.run();
  CHECK(program.scalar(length) == 6.0);
  CHECK(program.fetch(ones).to_vector<float>() == std::vector<float>(12, 1.0f));
}
