#include <catch2/catch.hpp>

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
using Catch::Contains;

TEST_CASE("gather gradient matches central differences, repeated indices accumulating", "[ops][gather][grad]") {
  kiln::Rng rng(7);
  testing::GradcheckOptions o;
  o.label = "gather";
  o.wrt = {0};
  const Array indices = Array::from_vector(std::vector<double>{0, 4, 4, 2, 0, 0}, {2, 3});
  auto r = testing::gradcheck([](const std::vector<Tensor>& x) { return ops::gather(x[0], x[1]); },
                              {testing::random_array({5, 3}, rng), indices}, o);
  INFO(r.worst_entry());
  REQUIRE(r.max_relative_error <= 1e-6);

  o.label = "gather rank-3 params";
  const Array picks = Array::from_vector(std::vector<double>{3, 1, 3}, {3});
  auto deep = testing::gradcheck([](const std::vector<Tensor>& x) { return ops::gather(x[0], x[1]); },
                                 {testing::random_array({4, 2, 3}, rng), picks}, o);
  INFO(deep.worst_entry());
  REQUIRE(deep.max_relative_error <= 1e-6);
}

TEST_CASE("scatter_add, gather's gradient op, has a gradient too", "[ops][gather][grad]") {
  kiln::Rng rng(7);
  testing::GradcheckOptions o;
  o.label = "scatter_add";
  o.wrt = {0};
  const Array indices = Array::from_vector(std::vector<double>{2, 0, 2}, {3});
  auto r = testing::gradcheck(
      [](const std::vector<Tensor>& x) {
        const Tensor y = ops::gather(x[0], x[1]);
        return gradients(ops::sum(y * y * y), {x[0]})[0];
      },
      {testing::random_array({4, 2}, rng), indices}, o);
  INFO(r.worst_entry());
  REQUIRE(r.max_relative_error <= 1e-6);
}

TEST_CASE("gather copies the indexed rows", "[ops][gather]") {
  const Array params = Array::from_vector(std::vector<float>{0, 1, 10, 11, 20, 21, 30, 31}, {4, 2});
  const Array indices = Array::from_vector(std::vector<float>{3, 0, 3, 1}, {2, 2});
  const Array y =
      testing::evaluate([](const std::vector<Tensor>& x) { return ops::gather(x[0], x[1]); }, {params, indices});
  REQUIRE(y.shape() == Shape{2, 2, 2});
  std::vector<float> expected;
  for (std::size_t i = 0; i < indices.size(); ++i) {
    const auto row = static_cast<std::size_t>(indices.flat(i));
    expected.push_back(static_cast<float>(params.flat(row * 2)));
    expected.push_back(static_cast<float>(params.flat(row * 2 + 1)));
  }
  CHECK(y.to_vector<float>() == expected);
}

TEST_CASE("gather's gradient adds every pick of a row into that row", "[ops][gather][grad]") {
  Graph graph;
  const Tensor params = graph.variable("embeddings", Array({4, 2}));
  const Tensor indices = graph.placeholder({Shape::unknown}, DType::float32, "indices");
  const Tensor grad = gradients(ops::sum(ops::gather(params, indices)), {params})[0];
  Program program(graph, {grad});
  program.feed(indices, Array::from_vector(std::vector<float>{1, 3, 1, 1}, {4}));
  program.run();
  CHECK(program.fetch(grad).to_vector<float>() == std::vector<float>{0, 0, 3, 3, 0, 0, 1, 1});
}

TEST_CASE("gather rejects an index out of range at run time", "[ops][gather][errors]") {
  Graph graph;
  const Tensor params = graph.placeholder({5, 3}, DType::float32, "params");
  const Tensor indices = graph.placeholder({Shape::unknown}, DType::float32, "indices");
  const Tensor y = ops::gather(params, indices);
  CHECK(y.shape() == Shape{Shape::unknown, 3});
  Program program(graph, {y});
  const Array table({5, 3});
  program.feed(params, table);
  program.feed(indices, Array::from_vector(std::vector<float>{0, 5}, {2}));
  CHECK_THROWS_AS(program.run(), ValueError);
  CHECK_THROWS_WITH(program.run(), Contains("gather 'gather'") && Contains("index 5 at position 1") &&
                                       Contains("[0, 5)") && Contains("(5, 3)"));
  program.feed(indices, Array::from_vector(std::vector<float>{-1}, {1}));
  CHECK_THROWS_WITH(program.run(), Contains("index -1") && Contains("out of range"));
  program.feed(indices, Array::from_vector(std::vector<float>{1.5f}, {1}));
  CHECK_THROWS_WITH(program.run(), Contains("index 1.5") && Contains("not an integer"));
  program.feed(indices, Array::from_vector(std::vector<float>{4, 4}, {2}));
  CHECK_NOTHROW(program.run());
}

TEST_CASE("gather needs params with a row axis", "[ops][gather][errors]") {
  Graph graph;
  const Tensor scalar = graph.placeholder({}, DType::float32, "scalar");
  const Tensor indices = graph.placeholder({3}, DType::float32, "indices");
  CHECK_THROWS_AS(ops::gather(scalar, indices), ShapeError);
  CHECK_THROWS_WITH(ops::gather(scalar, indices), Contains("gather 'gather'") && Contains("(), (3,)"));
}

TEST_CASE("indices carry no gradient", "[ops][gather][grad]") {
  Graph graph;
  const Tensor params = graph.placeholder({5, 3}, DType::float64, "params");
  const Tensor indices = graph.placeholder({2}, DType::float64, "indices");
  CHECK_THROWS_WITH(gradients(ops::sum(ops::gather(params, indices)), {indices}), Contains("integer indices"));
}
