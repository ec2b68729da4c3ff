#include <catch2/catch.hpp>

#include <kiln/core/autodiff.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/program.hpp>
#include <kiln/ops/ops.hpp>
#include "support/gradcheck.hpp"

using namespace kiln;

TEST_CASE("fan-out gradients accumulate", "[core][autodiff]") {
  Graph graph;
  const Tensor x = graph.placeholder({3}, DType::float64, "x");
  // y = sum(x*x + 3x): dy/dx = 2x + 3, reaching x along three paths.
  const Tensor loss = ops::sum(x * x + x * 3.0);
  const Tensor grad = gradients(loss, {x}).front();
  Program program(graph, {grad});
  const Array value = Array::from_vector(std::vector<double>{1, -2, 0.5}, {3});
  program.feed(x, value);
  program.run();
  CHECK(program.fetch(grad).to_vector<double>() == std::vector<double>{5, -1, 4});
}

TEST_CASE("gradients sum over broadcast axes", "[core][autodiff]") {
  Rng rng(1);
  testing::GradcheckOptions options;
  options.label = "autodiff broadcast";
  const auto report =
      testing::gradcheck([](const std::vector<Tensor>& x) { return ops::mul(ops::add(x[0], x[1]), x[2]); },
                         {Shape{4, 3}, Shape{3}, Shape{4, 1}}, rng, options);
  INFO(report.worst_entry());
  CHECK(report.max_relative_error <= 1e-6);
}

TEST_CASE("paths the loss does not use are pruned, and unused targets are reported", "[core][autodiff]") {
  Graph graph;
  const Tensor x = graph.placeholder({2}, DType::float64, "x");
  const Tensor unused = graph.variable("unused", Array({2}, DType::float64));
  const Tensor side = ops::exp(unused);  // not on the loss's path: needs no backward node
  (void)side;
  const Tensor loss = ops::sum(ops::square(x));
  const std::size_t before = graph.num_nodes();
  const Tensor grad = gradients(loss, {x}).front();
  CHECK(graph.num_nodes() - before < 8);
  CHECK_THROWS_AS(gradients(loss, {unused}), NotDifferentiable);
  CHECK_THROWS_WITH(gradients(loss, {unused}), Catch::Contains("does not depend on it"));
  GradientOptions options;
  options.allow_unused = true;
  const auto grads = gradients(loss, {x, unused}, options);
  CHECK(grads[0].valid());
  CHECK_FALSE(grads[1].valid());
  (void)grad;
}

TEST_CASE("a gradient through a non-differentiable input is reported clearly", "[core][autodiff]") {
  Graph graph;
  const Tensor x = graph.placeholder({3}, DType::float64, "x");
  const Tensor y = graph.placeholder({3}, DType::float64, "y");
  const Tensor mask = ops::greater(x, y);
  const Tensor loss = ops::sum(ops::mul(mask, y));
  CHECK_THROWS_AS(gradients(loss, {x}), NotDifferentiable);
  CHECK_THROWS_WITH(gradients(loss, {x}),
                    Catch::Contains("greater 'greater'") && Catch::Contains("not differentiable"));
  CHECK_NOTHROW(gradients(loss, {y}));
}

TEST_CASE("the loss must be a scalar unless its gradient is given", "[core][autodiff]") {
  Graph graph;
  const Tensor x = graph.placeholder({3}, DType::float64, "x");
  const Tensor y = ops::square(x);
  CHECK_THROWS_AS(gradients(y, {x}), ShapeError);
  const Tensor seed = graph.placeholder({3}, DType::float64, "seed");
  CHECK(gradients(y, {x}, {}, seed).front().shape() == Shape({3}));
}

TEST_CASE("an output gradient of another graph or dtype is refused by name", "[core][autodiff]") {
  Graph graph, other;
  const Tensor x = graph.variable("x", Array::full({2}, 1.0));
  const Tensor y = ops::tanh(x);
  CHECK_THROWS_WITH(gradients(y, {x}, {}, other.constant(Array::full({2}, 1.0))),
                    Catch::Contains("must belong to the graph of"));
  CHECK_THROWS_AS(gradients(y, {x}, {}, graph.constant(Array::full({2}, 1.0, DType::float64))), DTypeError);
  CHECK(gradients(y, {x}, {}, graph.constant(Array::full({2}, 1.0))).size() == 1);
}
