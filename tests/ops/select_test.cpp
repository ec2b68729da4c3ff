#include <catch2/catch.hpp>

#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/autodiff.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/ops/ops.hpp>
#include "support/gradcheck.hpp"

using namespace kiln;
using Catch::Contains;

namespace {

// 0/1 values, roughly half of each, as float64.
Array random_mask(const Shape& shape, Rng& rng) {
  Array mask(shape, DType::float64);
  for (std::size_t i = 0; i < mask.size(); ++i) mask.set_flat(i, rng.uniform() < 0.5 ? 0.0 : 1.0);
  return mask;
}

}  // namespace

TEST_CASE("where gradient matches central differences, broadcasting three ways", "[ops][select][grad]") {
  kiln::Rng rng(7);
  testing::GradcheckOptions o;
  o.label = "where";
  o.wrt = {1, 2};
  const std::vector<Array> inputs{random_mask({2, 1, 4}, rng), testing::random_array({3, 1}, rng),
                                  testing::random_array({2, 3, 4}, rng)};
  auto r = testing::gradcheck([](const std::vector<Tensor>& x) { return ops::where(x[0], x[1], x[2]); }, inputs, o);
  INFO(r.worst_entry());
  REQUIRE(r.max_relative_error <= 1e-6);
}

TEST_CASE("where gradient with an unknown batch dimension", "[ops][select][grad]") {
  kiln::Rng rng(7);
  testing::GradcheckOptions o;
  o.label = "where unknown batch";
  // Only input 0 gets the unknown batch dimension, so it is `a` here.
  o.wrt = {0, 2};
  const std::vector<Array> inputs{testing::random_array({3, 4}, rng), random_mask({4}, rng),
                                  testing::random_array({1, 4}, rng)};
  auto r = testing::gradcheck([](const std::vector<Tensor>& x) { return ops::where(x[1], x[0], x[2]); }, inputs, o,
                              /*unknown_batch=*/true);
  INFO(r.worst_entry());
  REQUIRE(r.max_relative_error <= 1e-6);
}

TEST_CASE("masked_fill gradient matches central differences", "[ops][select][grad]") {
  kiln::Rng rng(7);
  testing::GradcheckOptions o;
  o.label = "masked_fill";
  o.wrt = {0};
  const std::vector<Array> inputs{testing::random_array({3, 4}, rng), random_mask({4}, rng)};
  auto r =
      testing::gradcheck([](const std::vector<Tensor>& x) { return ops::masked_fill(x[0], x[1], -2.5); }, inputs, o);
  INFO(r.worst_entry());
  REQUIRE(r.max_relative_error <= 1e-6);
}

TEST_CASE("where picks a where the condition is nonzero, else b", "[ops][select]") {
  const Array condition = Array::from_vector(std::vector<float>{1, 0, -2, 0}, {2, 1, 2});
  const Array a = Array::from_vector(std::vector<float>{10, 20, 30}, {3, 1});
  const Array b = Array::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {2, 3, 2});
  const Array y =
      testing::evaluate([](const std::vector<Tensor>& x) { return ops::where(x[0], x[1], x[2]); }, {condition, a, b});
  REQUIRE(y.shape() == Shape{2, 3, 2});
  std::vector<float> expected;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 2; ++k) {
        const bool pick_a = condition.flat(static_cast<std::size_t>(i * 2 + k)) != 0.0;
        expected.push_back(static_cast<float>(pick_a ? a.flat(static_cast<std::size_t>(j))
                                                     : b.flat(static_cast<std::size_t>(i * 6 + j * 2 + k))));
      }
  CHECK(y.to_vector<float>() == expected);
  const Array ones = Array::full({2, 3, 2}, 1.0);
  const Array dense = testing::evaluate([](const std::vector<Tensor>& x) { return ops::where(x[0], x[1], x[2]); },
                                        {ones, b, Array({2, 3, 2})});
  CHECK(dense.to_vector<float>() == b.to_vector<float>());
}

TEST_CASE("masked_fill writes the value where the mask is zero", "[ops][select]") {
  const Array x = Array::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  const Array row_mask = Array::from_vector(std::vector<float>{1, 0, 1}, {3});
  const Array y =
      testing::evaluate([](const std::vector<Tensor>& t) { return ops::masked_fill(t[0], t[1], -1e9); }, {x, row_mask});
  CHECK(y.to_vector<float>() == std::vector<float>{1, -1e9f, 3, 4, -1e9f, 6});
  const Array full_mask = Array::from_vector(std::vector<float>{0, 1, 1, 1, 1, 0}, {2, 3});
  const Array z =
      testing::evaluate([](const std::vector<Tensor>& t) { return ops::masked_fill(t[0], t[1], 0.5); }, {x, full_mask});
  CHECK(z.to_vector<float>() == std::vector<float>{0.5f, 2, 3, 4, 5, 0.5f});
}

TEST_CASE("conditions and masks carry no gradient", "[ops][select][grad]") {
  Graph graph;
  const Tensor condition = graph.placeholder({2, 3}, DType::float64, "condition");
  const Tensor a = graph.placeholder({2, 3}, DType::float64, "a");
  const Tensor loss = ops::sum(ops::where(condition, a, a));
  CHECK_THROWS_WITH(gradients(loss, {condition}), Contains("a condition"));
  const Tensor filled = ops::sum(ops::masked_fill(a, condition, 0.0));
  CHECK_THROWS_AS(gradients(filled, {condition}), NotDifferentiable);
}

TEST_CASE("where and masked_fill reject shapes that do not broadcast", "[ops][select][errors]") {
  Graph graph;
  const Tensor condition = graph.placeholder({Shape::unknown, 3}, DType::float32, "condition");
  const Tensor a = graph.placeholder({4, 3}, DType::float32, "a");
  const Tensor b = graph.placeholder({3}, DType::float32, "b");
  CHECK_THROWS_AS(ops::where(condition, a, b), ShapeError);
  CHECK_THROWS_WITH(ops::where(condition, a, b), Contains("where 'where") && Contains("(None, 3), (4, 3), (3,)"));
  CHECK(ops::where(condition, b, b).shape() == Shape{Shape::unknown, 3});
  const Tensor x = graph.placeholder({2, 3}, DType::float32, "x");
  const Tensor wide_mask = graph.placeholder({4, 2, 3}, DType::float32, "wide_mask");
  CHECK_THROWS_AS(ops::masked_fill(x, wide_mask, 0.0), ShapeError);
  CHECK_THROWS_WITH(ops::masked_fill(x, wide_mask, 0.0),
                    Contains("masked_fill 'masked_fill") && Contains("(2, 3), (4, 2, 3)"));
  CHECK_NOTHROW(ops::masked_fill(x, b, 0.0));
}
