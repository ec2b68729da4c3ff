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

namespace {

// NumPy's take_along_axis written out for a rank-3 x and indices of x's sizes but on `axis`.
std::vector<double> naive_take(const Array& x, const Array& indices, int axis) {
  const Shape& xs = x.shape();
  const Shape& is = indices.shape();
  std::vector<double> out;
  for (std::int64_t a = 0; a < is[0]; ++a)
    for (std::int64_t b = 0; b < is[1]; ++b)
      for (std::int64_t c = 0; c < is[2]; ++c) {
        std::int64_t at[3] = {a, b, c};
        auto p = static_cast<std::int64_t>(indices.flat(static_cast<std::size_t>((a * is[1] + b) * is[2] + c)));
        if (p < 0) p += xs[axis];
        at[axis] = p;
        out.push_back(x.flat(static_cast<std::size_t>((at[0] * xs[1] + at[1]) * xs[2] + at[2])));
      }
  return out;
}

}  // namespace

TEST_CASE("take_along_axis picks as NumPy's does on every axis, negative positions from the end",
          "[ops][take_along_axis]") {
  kiln::Rng rng(3);
  const Array x = testing::random_array({2, 5, 3}, rng);
  for (int axis : {0, 1, 2, -2}) {
    const int a = axis < 0 ? axis + 3 : axis;
    std::vector<std::int64_t> dims = {2, 5, 3};
    dims[static_cast<std::size_t>(a)] = 4;
    Array indices(Shape(dims), DType::float64);
    for (std::size_t i = 0; i < indices.size(); ++i) {
      const std::int64_t extent = x.shape()[a];
      indices.set_flat(i, static_cast<double>(static_cast<std::int64_t>(i * 7 + 1) % (2 * extent) - extent));
    }
    const Array y = testing::evaluate(
        [axis](const std::vector<Tensor>& in) { return ops::take_along_axis(in[0], in[1], axis); }, {x, indices});
    CHECK(y.shape() == Shape(dims));
    CHECK(y.to_vector<double>() == naive_take(x, indices, a));
  }
}

TEST_CASE("take_along_axis stretches size-1 axes of the indices, as keras-hub's MaskedLMHead gathers",
          "[ops][take_along_axis]") {
  // (batch, steps, features) vectors at (batch, picks, 1) positions: (batch, picks, features).
  kiln::Rng rng(4);
  const Array x = testing::random_array({2, 6, 4}, rng, DType::float32);
  const Array positions = Array::from_vector(std::vector<float>{5, 0, 5, 1, 2, 3}, {2, 3, 1});
  Graph graph;
  const Tensor xt = graph.placeholder({Shape::unknown, 6, 4}, DType::float32, "x");
  const Tensor pt = graph.placeholder({Shape::unknown, 3, 1}, DType::float32, "positions");
  const Tensor y = ops::take_along_axis(xt, pt, 1);
  CHECK(y.shape() == Shape{Shape::unknown, 3, 4});
  Program program(graph, {y});
  program.feed(xt, x);
  program.feed(pt, positions);
  program.run();
  const Array out = program.fetch(y);
  REQUIRE(out.shape() == Shape{2, 3, 4});
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t m = 0; m < 3; ++m)
      for (std::int64_t f = 0; f < 4; ++f) {
        const auto p = static_cast<std::int64_t>(positions.flat(static_cast<std::size_t>(b * 3 + m)));
        CHECK(out.flat(static_cast<std::size_t>((b * 3 + m) * 4 + f)) ==
              x.flat(static_cast<std::size_t>((b * 6 + p) * 4 + f)));
      }
}

TEST_CASE("take_along_axis stretches indices over an axis of unknown size, and names a bad index where it was given",
          "[ops][take_along_axis]") {
  // One row of positions for every row of a batch of unknown size.
  Graph graph;
  const Tensor xt = graph.placeholder({Shape::unknown, 4, 2}, DType::float32, "x");
  const Tensor pt = graph.placeholder({1, 2, 1}, DType::float32, "positions");
  const Tensor y = ops::take_along_axis(xt, pt, 1);
  CHECK(y.shape() == Shape{Shape::unknown, 2, 2});
  Program program(graph, {y});
  program.feed(xt, Array::from_vector(std::vector<float>{0, 1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 14, 15, 16, 17}, {2, 4, 2}));
  program.feed(pt, Array::from_vector(std::vector<float>{3, 0}, {1, 2, 1}));
  program.run();
  CHECK(program.fetch(y).to_vector<float>() == std::vector<float>{6, 7, 0, 1, 16, 17, 10, 11});
  // The second position of the positions fed, not of the stretched ones.
  program.feed(pt, Array::from_vector(std::vector<float>{3, 4}, {1, 2, 1}));
  CHECK_THROWS_WITH(program.run(), Contains("index 4 at position 1") && Contains("[-4, 4)"));
}

TEST_CASE("take_along_axis gradient matches central differences, repeated positions accumulating",
          "[ops][take_along_axis][grad]") {
  kiln::Rng rng(7);
  testing::GradcheckOptions o;
  o.label = "take_along_axis";
  o.wrt = {0};
  const Array positions = Array::from_vector(std::vector<double>{0, 3, 3, -1, 2, 2, 0, 1}, {2, 4, 1});
  auto r = testing::gradcheck(
      [](const std::vector<Tensor>& x) { return ops::take_along_axis(x[0], x[1], 1); },
      {testing::random_array({2, 4, 3}, rng), positions}, o);
  INFO(r.worst_entry());
  REQUIRE(r.max_relative_error <= 1e-6);
}

TEST_CASE("put_along_axis_add, take_along_axis's gradient op, has a gradient too", "[ops][take_along_axis][grad]") {
  kiln::Rng rng(8);
  testing::GradcheckOptions o;
  o.label = "put_along_axis_add";
  o.wrt = {0};
  const Array positions = Array::from_vector(std::vector<double>{2, 0, 2, 1, 1, 1}, {2, 3});
  auto r = testing::gradcheck(
      [](const std::vector<Tensor>& x) {
        const Tensor y = ops::take_along_axis(x[0], x[1], -1);
        return gradients(ops::sum(y * y * y), {x[0]})[0];
      },
      {testing::random_array({2, 3}, rng), positions}, o);
  INFO(r.worst_entry());
  REQUIRE(r.max_relative_error <= 1e-6);
}

TEST_CASE("take_along_axis's gradient adds every pick back at its position", "[ops][take_along_axis][grad]") {
  Graph graph;
  const Tensor x = graph.variable("x", Array({2, 3}));
  const Tensor positions = graph.placeholder({2, Shape::unknown}, DType::float32, "positions");
  const Tensor grad = gradients(ops::sum(ops::take_along_axis(x, positions, 1)), {x})[0];
  Program program(graph, {grad});
  program.feed(positions, Array::from_vector(std::vector<float>{1, 1, -1, 0, 0, 0}, {2, 3}));
  program.run();
  CHECK(program.fetch(grad).to_vector<float>() == std::vector<float>{0, 2, 1, 3, 0, 0});
}

TEST_CASE("take_along_axis refuses bad positions at run time and bad shapes when built",
          "[ops][take_along_axis][errors]") {
  Graph graph;
  const Tensor x = graph.placeholder({2, 5}, DType::float32, "x");
  const Tensor positions = graph.placeholder({2, Shape::unknown}, DType::float32, "positions");
  const Tensor y = ops::take_along_axis(x, positions, 1);
  Program program(graph, {y});
  program.feed(x, Array({2, 5}));
  program.feed(positions, Array::from_vector(std::vector<float>{0, 5}, {2, 1}));
  CHECK_THROWS_AS(program.run(), ValueError);
  CHECK_THROWS_WITH(program.run(), Contains("take_along_axis") && Contains("index 5 at position 1") &&
                                       Contains("[-5, 5)") && Contains("(2, 5)"));
  program.feed(positions, Array::from_vector(std::vector<float>{-6, 0}, {2, 1}));
  CHECK_THROWS_WITH(program.run(), Contains("index -6") && Contains("out of range"));
  program.feed(positions, Array::from_vector(std::vector<float>{0.5f, 0}, {2, 1}));
  CHECK_THROWS_WITH(program.run(), Contains("index 0.5") && Contains("not an integer"));
  program.feed(positions, Array::from_vector(std::vector<float>{-5, 4}, {2, 1}));
  CHECK_NOTHROW(program.run());

  const Tensor wrong_rank = graph.placeholder({2}, DType::float32, "wrong_rank");
  CHECK_THROWS_AS(ops::take_along_axis(x, wrong_rank, 1), ShapeError);
  CHECK_THROWS_WITH(ops::take_along_axis(x, wrong_rank, 1), Contains("x's rank"));
  const Tensor wrong_size = graph.placeholder({3, 4}, DType::float32, "wrong_size");
  CHECK_THROWS_WITH(ops::take_along_axis(x, wrong_size, 1), Contains("x's size or 1") && Contains("axis 0: 3 against 2"));
  CHECK_THROWS_WITH(ops::take_along_axis(x, positions, 2), Contains("axis 2 is out of range for rank 2"));
}

TEST_CASE("take_along_axis's positions carry no gradient", "[ops][take_along_axis][grad]") {
  Graph graph;
  const Tensor x = graph.placeholder({5, 3}, DType::float64, "x");
  const Tensor positions = graph.placeholder({2, 3}, DType::float64, "positions");
  CHECK_THROWS_WITH(gradients(ops::sum(ops::take_along_axis(x, positions, 0)), {positions}),
                    Contains("integer indices"));
}
