#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/program.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/ops/ops.hpp>
#include "support/gradcheck.hpp"
#include "support/thread_counts.hpp"

using namespace kiln;

namespace {

using SoftmaxBuilder = Tensor (*)(const Tensor&, int);

// softmax or log_softmax of a row-major array over `axis`, written as the textbook loops.
std::vector<double> reference(const std::vector<float>& x, const std::vector<std::int64_t>& dims, int axis, bool log) {
  std::int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; ++i) outer *= dims[static_cast<std::size_t>(i)];
  for (std::size_t i = static_cast<std::size_t>(axis) + 1; i < dims.size(); ++i) inner *= dims[i];
  const std::int64_t extent = dims[static_cast<std::size_t>(axis)];
  std::vector<double> y(x.size());
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::int64_t i = 0; i < inner; ++i) {
      auto at = [&](std::int64_t e) { return static_cast<std::size_t>((o * extent + e) * inner + i); };
      double max = -INFINITY;
      for (std::int64_t e = 0; e < extent; ++e) max = std::max(max, static_cast<double>(x[at(e)]));
      double sum = 0.0;
      for (std::int64_t e = 0; e < extent; ++e) sum += std::exp(x[at(e)] - max);
      for (std::int64_t e = 0; e < extent; ++e)
        y[at(e)] = log ? x[at(e)] - max - std::log(sum) : std::exp(x[at(e)] - max) / sum;
    }
  }
  return y;
}

std::vector<float> sample_values(std::size_t count, Rng& rng, double low, double high) {
  std::vector<float> values;
  for (std::size_t i = 0; i < count; ++i) values.push_back(static_cast<float>(rng.uniform(low, high)));
  return values;
}

void require_gradient(const char* name, SoftmaxBuilder op, int axis, bool unknown_batch) {
  Rng rng(7);
  testing::GradcheckOptions options;
  options.label = std::string(name) + " axis=" + std::to_string(axis) + (unknown_batch ? " unknown batch" : "");
  const auto report =
      testing::gradcheck([&](const std::vector<Tensor>& x) { return op(x[0], axis); },
                         {testing::random_array({2, 3, 4}, rng, DType::float64, -2.0, 2.0)}, options, unknown_batch);
  INFO(report.worst_entry());
  REQUIRE(report.max_relative_error <= 1e-6);
}

void require_forward_matches_reference(SoftmaxBuilder op, bool log, int axis, double low, double high) {
  Rng rng(11);
  const std::vector<std::int64_t> dims = {2, 3, 4};
  const std::vector<float> values = sample_values(24, rng, low, high);
  const Array output = testing::evaluate([&](const std::vector<Tensor>& x) { return op(x[0], axis); },
                                         {Array::from_vector(values, Shape(dims))});
  const std::vector<double> expected = reference(values, dims, axis < 0 ? axis + 3 : axis, log);
  for (std::size_t i = 0; i < values.size(); ++i) {
    INFO("axis " << axis << ", element " << i);
    CHECK(output.flat(i) == Approx(expected[i]).epsilon(1e-6).margin(1e-6));
  }
}

}  // namespace

TEST_CASE("softmax: gradients match central differences on every axis", "[ops][softmax][grad]") {
  for (int axis : {0, 1, 2, -1}) {
    require_gradient("softmax", ops::softmax, axis, false);
    require_gradient("log_softmax", ops::log_softmax, axis, false);
  }
  for (int axis : {0, -1}) {
    require_gradient("softmax", ops::softmax, axis, true);
    require_gradient("log_softmax", ops::log_softmax, axis, true);
  }
}

TEST_CASE("softmax: float32 forward matches a plain-loop reference on every axis", "[ops][softmax]") {
  for (int axis : {0, 1, 2, -1, -3}) {
    require_forward_matches_reference(ops::softmax, false, axis, -3.0, 3.0);
    require_forward_matches_reference(ops::log_softmax, true, axis, -3.0, 3.0);
  }
}

TEST_CASE("softmax: each slice along the axis sums to one", "[ops][softmax]") {
  Rng rng(5);
  const Array input = Array::from_vector(sample_values(24, rng, -4.0, 4.0), {2, 3, 4});
  const Array y = testing::evaluate([](const std::vector<Tensor>& x) { return ops::softmax(x[0], 1); }, {input});
  for (std::size_t o = 0; o < 2; ++o) {
    for (std::size_t i = 0; i < 4; ++i) {
      double total = 0.0;
      for (std::size_t e = 0; e < 3; ++e) total += y.flat((o * 3 + e) * 4 + i);
      CHECK(total == Approx(1.0).epsilon(1e-6));
    }
  }
}

TEST_CASE("softmax: huge logits stay finite (the max is subtracted)", "[ops][softmax]") {
  const Array logits =
      Array::from_vector(std::vector<float>{1000.0f, 1001.0f, 1002.0f, -1000.0f, -1001.0f, -1002.0f}, {2, 3});
  const Array shifted = Array::from_vector(std::vector<float>{0.0f, 1.0f, 2.0f, 0.0f, -1.0f, -2.0f}, {2, 3});
  for (SoftmaxBuilder op : {ops::softmax, ops::log_softmax}) {
    const Array big = testing::evaluate([&](const std::vector<Tensor>& x) { return op(x[0], -1); }, {logits});
    const Array small = testing::evaluate([&](const std::vector<Tensor>& x) { return op(x[0], -1); }, {shifted});
    for (std::size_t i = 0; i < big.size(); ++i) {
      REQUIRE(std::isfinite(big.flat(i)));
      CHECK(big.flat(i) == Approx(small.flat(i)).epsilon(1e-6).margin(1e-6));
    }
  }
  // A logit far below the others underflows softmax to 0, but log_softmax keeps its exact value.
  const Array spread = Array::from_vector(std::vector<float>{0.0f, -200.0f}, {2});
  const Array log = testing::evaluate([](const std::vector<Tensor>& x) { return ops::log_softmax(x[0], 0); }, {spread});
  CHECK(log.flat(1) == Approx(-200.0));
}

TEST_CASE("softmax: runs in place and on a batch size it was not built for", "[ops][softmax]") {
  Graph graph;
  const Tensor x = graph.placeholder({Shape::unknown, 3}, DType::float32, "x");
  const Tensor y = ops::softmax(ops::scale(x, 2.0), 0);
  Program program(graph, {y});
  const std::vector<float> values = {0.5f, -1.0f, 2.0f, 1.5f, 0.0f, -0.5f, 3.0f, 1.0f, 0.25f, -2.0f, 0.75f, 1.25f};
  program.feed(x, Array::from_vector(values, {4, 3}));
  program.run();
  CHECK(program.stats().num_inplace >= 1);
  std::vector<float> doubled;
  for (float v : values) doubled.push_back(2.0f * v);
  const std::vector<double> expected = reference(doubled, {4, 3}, 0, false);
  const Array output = program.fetch(y);
  for (std::size_t i = 0; i < values.size(); ++i) CHECK(output.flat(i) == Approx(expected[i]).epsilon(1e-6));
}

TEST_CASE("softmax: an axis out of range is a ShapeError naming the op and the shape", "[ops][softmax]") {
  Graph graph;
  const Tensor x = graph.placeholder({Shape::unknown, 3}, DType::float32, "x");
  REQUIRE_THROWS_AS(ops::softmax(x, 2), ShapeError);
  REQUIRE_THROWS_WITH(ops::softmax(x, 2),
                      Catch::Contains("softmax 'softmax") && Catch::Contains("axis 2") && Catch::Contains("(None, 3)"));
  REQUIRE_THROWS_AS(ops::softmax(x, -3), ShapeError);
  REQUIRE_THROWS_AS(ops::log_softmax(x, 5), ShapeError);
  REQUIRE_THROWS_WITH(ops::log_softmax(x, -3), Catch::Contains("log_softmax 'log_softmax") &&
                                                   Catch::Contains("axis -3") && Catch::Contains("(None, 3)"));
  REQUIRE_THROWS_AS(ops::softmax(graph.placeholder(Shape{}), -1), ShapeError);
}

TEST_CASE("softmax and log_softmax give the same values and gradients on 1, 2, 3, 7 and 16 threads", "[ops][softmax]") {
  // Over the last axis the rows are split over the threads, each computed alone: bitwise the same on any count.
  // Over the first axis (columns' statistics in one workspace) the kernel runs on one thread.
  Rng rng(5);
  const std::vector<Array> inputs{testing::random_array({96, 3, 300}, rng, DType::float64, -6.0, 6.0)};
  const Array weights = testing::random_array({96, 3, 300}, rng);
  for (const SoftmaxBuilder builder : {static_cast<SoftmaxBuilder>(ops::softmax), static_cast<SoftmaxBuilder>(ops::log_softmax)})
    for (const int axis : {-1, 0}) {
      INFO((builder == static_cast<SoftmaxBuilder>(ops::softmax) ? "softmax" : "log_softmax") << " axis " << axis);
      testing::check_thread_counts([&](const std::vector<Tensor>& x) { return builder(x[0], axis); }, inputs, weights,
                                   2, 0.0);
    }
}
