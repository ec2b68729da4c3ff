#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/autodiff.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/program.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/core/threads.hpp>
#include <kiln/ops/ops.hpp>
#include "support/gradcheck.hpp"

using namespace kiln;
using Catch::Contains;

namespace {

// The statistics and the normalized output written out, feature by feature, for an (outer, C, inner)
// layout: the mean, the biased variance, then (x − mean) / sqrt(var + ε) · gamma + beta.
struct Reference {
  std::vector<double> mean, variance;
  Array output;
};

Reference reference(const Array& x, int axis, const Array& gamma, const Array& beta, double epsilon) {
  const Shape& s = x.shape();
  std::int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= s[i];
  for (int i = axis + 1; i < s.rank(); ++i) inner *= s[i];
  const std::int64_t c = s[axis];
  Reference r{std::vector<double>(static_cast<std::size_t>(c), 0.0),
              std::vector<double>(static_cast<std::size_t>(c), 0.0), x.astype(DType::float64)};
  const double count = static_cast<double>(outer * inner);
  auto at = [&](std::int64_t o, std::int64_t f, std::int64_t i) {
    return static_cast<std::size_t>((o * c + f) * inner + i);
  };
  for (std::int64_t f = 0; f < c; ++f) {
    const auto fi = static_cast<std::size_t>(f);
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t i = 0; i < inner; ++i) r.mean[fi] += x.flat(at(o, f, i)) / count;
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t i = 0; i < inner; ++i) r.variance[fi] += std::pow(x.flat(at(o, f, i)) - r.mean[fi], 2) / count;
    for (std::int64_t o = 0; o < outer; ++o)
      for (std::int64_t i = 0; i < inner; ++i)
        r.output.set_flat(
            at(o, f, i),
            (x.flat(at(o, f, i)) - r.mean[fi]) / std::sqrt(r.variance[fi] + epsilon) * gamma.flat(fi) + beta.flat(fi));
  }
  return r;
}

// The same normalization from primitive ops: what the fused kernels replace.
Tensor composed(const Tensor& x, const Tensor& gamma, const Tensor& beta, double epsilon, int axis) {
  ops::Axes axes;
  for (int i = 0; i < x.rank(); ++i)
    if (i != axis) axes.push_back(i);
  const Tensor mean = ops::mean(x, axes, true);
  const Tensor centered = x - mean;
  const Tensor variance = ops::mean(ops::square(centered), axes, true);
  std::vector<std::int64_t> broadcast(static_cast<std::size_t>(x.rank() - axis), 1);
  broadcast[0] = gamma.shape()[0];
  return centered * ops::rsqrt(variance + epsilon) * ops::reshape(gamma, broadcast) + ops::reshape(beta, broadcast);
}

struct Case {
  Shape x;
  int axis;
};
const std::vector<Case> cases{{{6, 4}, 1}, {{3, 5, 4}, 2}, {{2, 3, 4, 5}, 1}, {{2, 3, 4, 5}, 3}};

}  // namespace

TEST_CASE("batch_norm_train: output and statistics match the formula written out", "[ops][batch_norm]") {
  Rng rng(31);
  for (const Case& c : cases) {
    INFO(c.x.to_string() << " axis " << c.axis);
    const Array x = testing::random_array(c.x, rng, DType::float64, -2, 3);
    const Shape features{c.x[c.axis]};
    const Array gamma = testing::random_array(features, rng), beta = testing::random_array(features, rng);
    const Reference expected = reference(x, c.axis, gamma, beta, 1e-3);
    Graph graph;
    const ops::BatchNormTraining bn = ops::batch_norm_train(graph.constant(x.copy()), graph.constant(gamma.copy()),
                                                            graph.constant(beta.copy()), 1e-3, c.axis);
    Program program(graph, {bn.output, bn.mean, bn.variance});
    program.run();
    CHECK(testing::max_relative_difference(program.fetch(bn.output), expected.output) < 1e-12);
    CHECK(testing::max_relative_difference(program.fetch(bn.mean), Array::from_vector(expected.mean, features)) <
          1e-12);
    CHECK(testing::max_relative_difference(program.fetch(bn.variance),
                                           Array::from_vector(expected.variance, features)) < 1e-12);
  }
}

TEST_CASE("batch_norm_train: the fused kernels equal the composition of primitive ops, forward and backward",
          "[ops][batch_norm]") {
  Rng rng(32);
  for (const Case& c : cases) {
    INFO(c.x.to_string() << " axis " << c.axis);
    const Shape features{c.x[c.axis]};
    const std::vector<Array> inputs{testing::random_array(c.x, rng), testing::random_array(features, rng),
                                    testing::random_array(features, rng)};
    const Array weights = testing::random_array(c.x, rng);
    const std::vector<Array> fused = testing::evaluate_with_gradients(
        [&](const std::vector<Tensor>& t) { return ops::batch_norm_train(t[0], t[1], t[2], 1e-3, c.axis).output; },
        inputs, weights);
    const std::vector<Array> primitive = testing::evaluate_with_gradients(
        [&](const std::vector<Tensor>& t) { return composed(t[0], t[1], t[2], 1e-3, c.axis); }, inputs, weights);
    for (std::size_t i = 0; i < fused.size(); ++i) {
      INFO("result " << i);
      CHECK(testing::max_relative_difference(fused[i], primitive[i]) < 1e-11);
    }
    // float32 too: the statistics accumulate in double, so the result is float32's rounding of the double.
    std::vector<Array> single;
    for (const Array& a : inputs) single.push_back(a.astype(DType::float32));
    const Array y32 = testing::evaluate(
        [&](const std::vector<Tensor>& t) { return ops::batch_norm_train(t[0], t[1], t[2], 1e-3, c.axis).output; },
        single);
    CHECK(testing::max_relative_difference(y32.astype(DType::float64), primitive[0]) < 1e-5);
  }
}

TEST_CASE("batch_norm_train gradients match central differences", "[ops][batch_norm][grad]") {
  Rng rng(33);
  for (const Case& c : cases) {
    testing::GradcheckOptions o;
    o.label = "batch_norm_train " + c.x.to_string() + " axis " + std::to_string(c.axis);
    const Shape features{c.x[c.axis]};
    const auto r = testing::gradcheck(
        [&c](const std::vector<Tensor>& t) { return ops::batch_norm_train(t[0], t[1], t[2], 1e-3, c.axis).output; },
        {c.x, features, features}, rng, o);
    INFO(o.label << ": " << r.worst_entry());
    REQUIRE(r.max_relative_error <= 1e-6);
  }
}

TEST_CASE("batch_norm_train with an unknown batch dimension", "[ops][batch_norm][grad]") {
  Rng rng(34);
  const Array gamma = testing::random_array({3}, rng), beta = testing::random_array({3}, rng);
  testing::GradcheckOptions o;
  o.label = "batch_norm_train unknown batch";
  const auto r = testing::gradcheck(
      [&](const std::vector<Tensor>& t) {
        Graph& g = t[0].graph();
        return ops::batch_norm_train(t[0], g.constant(gamma.copy()), g.constant(beta.copy())).output;
      },
      {testing::random_array({5, 2, 3}, rng)}, o, /*unknown_batch=*/true);
  INFO(r.worst_entry());
  REQUIRE(r.max_relative_error <= 1e-6);
}

TEST_CASE("batch_norm_train refuses bad shapes", "[ops][batch_norm][errors]") {
  Graph g;
  const Tensor x = g.placeholder({Shape::unknown, 4, 3}, DType::float32, "x");
  const Tensor three = g.placeholder({3}, DType::float32, "three");
  const Tensor four = g.placeholder({4}, DType::float32, "four");
  CHECK_THROWS_WITH(ops::batch_norm_train(x, three, three, 1e-3, 3), Contains("axis 3 is out of range for rank 3"));
  CHECK_THROWS_WITH(ops::batch_norm_train(x, four, three), Contains("gamma must have shape (3,)"));
  CHECK_THROWS_WITH(ops::batch_norm_train(x, three, four), Contains("beta must have shape (3,)"));
  CHECK_THROWS_WITH(ops::batch_norm_train(x, three, three, 1e-3, 0), Contains("the feature axis must be known"));
}

TEST_CASE("batch_norm_train splits channels-last rows over the threads: forward and backward agree for every count",
          "[ops][batch_norm][threads]") {
  // (64, 26, 26, 32), cnn_small's first norm: large enough for several workers. With one thread the kernels sum
  // rows serially; with more, each worker sums its rows and the partial sums are added in worker order.
  const int saved = get_num_threads();
  Rng rng(35);
  const Shape x_shape{64, 26, 26, 32}, features{32};
  const std::vector<Array> inputs{testing::random_array(x_shape, rng), testing::random_array(features, rng),
                                  testing::random_array(features, rng)};
  const Array weights = testing::random_array(x_shape, rng);
  auto fused = [](const std::vector<Tensor>& t) { return ops::batch_norm_train(t[0], t[1], t[2], 1e-3, 3).output; };
  set_num_threads(1);
  const std::vector<Array> serial = testing::evaluate_with_gradients(fused, inputs, weights);
  const std::vector<Array> primitive = testing::evaluate_with_gradients(
      [](const std::vector<Tensor>& t) { return composed(t[0], t[1], t[2], 1e-3, 3); }, inputs, weights);
  for (std::size_t i = 0; i < serial.size(); ++i) CHECK(testing::max_relative_difference(serial[i], primitive[i]) < 1e-9);
  for (const int threads : {2, 3, 7, 16}) {
    set_num_threads(threads);
    INFO(threads << " threads");
    const std::vector<Array> split = testing::evaluate_with_gradients(fused, inputs, weights);
    REQUIRE(split.size() == serial.size());
    for (std::size_t i = 0; i < split.size(); ++i) {
      INFO("result " << i);
      CHECK(testing::max_relative_difference(split[i], serial[i]) < 1e-11);
    }
    // The same thread count gives bitwise the same results.
    const std::vector<Array> again = testing::evaluate_with_gradients(fused, inputs, weights);
    for (std::size_t i = 0; i < split.size(); ++i) CHECK(again[i].bitwise_equal(split[i]));
  }
  set_num_threads(saved);
}
