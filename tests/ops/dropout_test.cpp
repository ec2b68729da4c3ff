#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <utility>
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

// One dropout node over a (100, 100) input of ones: its output is 0 or 1/(1 - rate) per element.
struct DropoutRun {
  Graph graph;
  Tensor x;
  Tensor y;
  Program program;
  Array ones = Array::full({100, 100}, 1.0);

  DropoutRun(double rate, std::uint64_t seed)
      : x(graph.placeholder({Shape::unknown, 100}, DType::float32, "x")),
        y(ops::dropout(x, rate, seed)),
        program(graph, {y}) {}

  Array run_at(std::uint64_t step) {
    program.set_run_count(step);
    program.feed(x, ones);
    program.run();
    return program.fetch(y);
  }
};

double kept_fraction(const Array& y) {
  std::size_t kept = 0;
  for (std::size_t i = 0; i < y.size(); ++i) kept += y.flat(i) != 0.0;
  return static_cast<double>(kept) / static_cast<double>(y.size());
}

}  // namespace

TEST_CASE("dropout gradient matches central differences with the mask held fixed", "[ops][dropout][grad]") {
  // The harness runs every forward at the analytic run's step, so the mask is the same throughout.
  kiln::Rng rng(7);
  testing::GradcheckOptions o;
  o.label = "dropout rate=0.5";
  auto r = testing::gradcheck([](const std::vector<Tensor>& x) { return ops::dropout(x[0], 0.5, 11); }, {Shape{4, 5}},
                              rng, o);
  INFO(r.worst_entry());
  REQUIRE(r.max_relative_error <= 1e-6);
}

TEST_CASE("dropout_grad, dropout's gradient op, has a gradient too", "[ops][dropout][grad]") {
  kiln::Rng rng(7);
  testing::GradcheckOptions o;
  o.label = "dropout_grad";
  auto r = testing::gradcheck(
      [](const std::vector<Tensor>& x) {
        const Tensor y = ops::dropout(x[0], 0.3, 11);
        return gradients(ops::sum(y * y * y), {x[0]})[0];
      },
      {Shape{4, 5}}, rng, o);
  INFO(r.worst_entry());
  REQUIRE(r.max_relative_error <= 1e-6);
}

TEST_CASE("dropout's gradient is dy * mask / (1 - rate) with the forward's mask", "[ops][dropout][grad]") {
  const double rate = 0.4;
  kiln::Rng rng(7);
  Graph graph;
  const Tensor x = graph.placeholder({Shape::unknown, 50}, DType::float64, "x");
  const Tensor projection = graph.placeholder({Shape::unknown, 50}, DType::float64, "projection");
  const Tensor y = ops::dropout(x, rate, 3);
  const Tensor dx = gradients(ops::sum(y * projection), {x})[0];
  Program program(graph, {y, dx});
  const Array input = testing::random_away_from({8, 50}, rng, {0.0});
  const Array weights = testing::random_array({8, 50}, rng);
  program.feed(x, input);
  program.feed(projection, weights);
  program.set_run_count(5);
  program.run();
  const Array forward = program.fetch(y);
  const Array grad = program.fetch(dx);
  for (std::size_t i = 0; i < input.size(); ++i) {
    const bool kept = forward.flat(i) != 0.0;
    CHECK(grad.flat(i) == Approx(kept ? weights.flat(i) / (1.0 - rate) : 0.0).margin(1e-15));
  }
}

TEST_CASE("dropout keeps about 1 - rate of the elements, scaled by 1 / (1 - rate)", "[ops][dropout]") {
  for (double rate : {0.1, 0.3, 0.75}) {
    INFO("rate " << rate);
    DropoutRun run(rate, 42);
    const Array y = run.run_at(0);
    // 5 standard deviations of a binomial over 10000 elements.
    CHECK(std::fabs(kept_fraction(y) - (1.0 - rate)) < 5.0 * std::sqrt(rate * (1.0 - rate) / 1e4));
    for (std::size_t i = 0; i < y.size(); ++i)
      if (y.flat(i) != 0.0) REQUIRE(y.flat(i) == Approx(1.0 / (1.0 - rate)));
  }
}

TEST_CASE("the dropout mask depends only on seed, step and element", "[ops][dropout]") {
  DropoutRun run(0.5, 42);
  const Array step_3 = run.run_at(3);
  CHECK(run.run_at(3).bitwise_equal(step_3));
  CHECK_FALSE(run.run_at(4).bitwise_equal(step_3));
  DropoutRun same_seed(0.5, 42);
  CHECK(same_seed.run_at(3).bitwise_equal(step_3));
  DropoutRun other_seed(0.5, 43);
  CHECK_FALSE(other_seed.run_at(3).bitwise_equal(step_3));
}

TEST_CASE("dropout outside training, or at rate 0, is the identity", "[ops][dropout]") {
  Graph graph;
  const Tensor x = graph.placeholder({Shape::unknown, 4}, DType::float32, "x");
  const std::size_t nodes = graph.num_nodes();
  CHECK(ops::dropout(x, 0.5, 1, /*training=*/false) == x);
  CHECK(ops::dropout(x, 0.0, 1) == x);
  CHECK(graph.num_nodes() == nodes);
  const Array input = Array::from_vector(std::vector<float>{1, -2, 3, 4}, {1, 4});
  const Array y =
      testing::evaluate([](const std::vector<Tensor>& t) { return ops::dropout(t[0], 0.9, 1, false); }, {input});
  CHECK(y.to_vector<float>() == input.to_vector<float>());
}

TEST_CASE("dropout rejects a rate outside 0 to 1 at build time", "[ops][dropout][errors]") {
  Graph graph;
  const Tensor x = graph.placeholder({2, 4}, DType::float32, "x");
  CHECK_THROWS_AS(ops::dropout(x, 1.5, 1), ConfigError);
  CHECK_THROWS_WITH(ops::dropout(x, 1.5, 1), Contains("dropout") && Contains("'x'") && Contains("[0, 1)"));
  CHECK_THROWS_AS(ops::dropout(x, 1.0, 1), ConfigError);
  CHECK_THROWS_AS(ops::dropout(x, -0.1, 1, false), ConfigError);
  CHECK_THROWS_AS(ops::dropout(x, std::nan(""), 1), ConfigError);
}

// ---- dropout_mask and random_normal_like ----------------------------------------------------------------

TEST_CASE("dropout_mask: one draw shared along the broadcast axes, 0 or 1 / (1 - rate)", "[ops][dropout]") {
  Graph graph;
  const Tensor x = graph.placeholder({Shape::unknown, 50, 40}, DType::float64, "x");
  const Tensor mask = ops::dropout_mask(x, 0.25, 9, {1});
  CHECK(mask.shape() == Shape{Shape::unknown, 1, 40});
  const Tensor y = x * mask;
  Program program(graph, {mask, y});
  const Array ones = Array::full({30, 50, 40}, 1.0, DType::float64);
  program.feed(x, ones);
  program.run();
  const Array m = program.fetch(mask), out = program.fetch(y);
  REQUIRE(m.shape() == Shape{30, 1, 40});
  std::size_t dropped = 0;
  for (std::size_t i = 0; i < m.size(); ++i) {
    REQUIRE((m.flat(i) == 0.0 || m.flat(i) == Approx(1 / 0.75).epsilon(1e-15)));
    dropped += m.flat(i) == 0.0 ? 1 : 0;
  }
  CHECK(std::abs(static_cast<double>(dropped) / 1200.0 - 0.25) < 0.05);  // 1200 draws: 4 standard errors
  // Every step of a sample's channel shares its draw.
  for (std::int64_t n = 0; n < 30; ++n)
    for (std::int64_t t = 0; t < 50; ++t)
      for (std::int64_t c = 0; c < 40; ++c)
        REQUIRE(out.flat(static_cast<std::size_t>((n * 50 + t) * 40 + c)) ==
                m.flat(static_cast<std::size_t>(n * 40 + c)));
  // Another run draws another mask; the same run count, the same one.
  program.feed(x, ones);
  program.run();
  CHECK_FALSE(program.fetch(mask).bitwise_equal(m));
  program.set_run_count(0);
  program.feed(x, ones);
  program.run();
  CHECK(program.fetch(mask).bitwise_equal(m));
}

TEST_CASE("x * dropout_mask: the gradient is the mask, and none flows through the mask itself",
          "[ops][dropout][grad]") {
  Rng rng(8);
  testing::GradcheckOptions o;
  o.label = "x * dropout_mask";
  const auto r =
      testing::gradcheck([](const std::vector<Tensor>& t) { return t[0] * ops::dropout_mask(t[0], 0.4, 3, {-1}); },
                         {Shape{4, 3, 5}}, rng, o);
  INFO(r.worst_entry());
  CHECK(r.max_relative_error <= 1e-6);
  // A loss reached only through the mask has no gradient: kiln says so instead of returning zeros.
  Graph graph;
  const Tensor x = graph.placeholder({4, 5}, DType::float64, "x");
  CHECK_THROWS_WITH(gradients(ops::sum(ops::dropout_mask(x, 0.4, 3, {0}) * 2.0), {x}),
                    Contains("not differentiable (the mask depends on x's shape only)"));
}

TEST_CASE("dropout_mask refuses a bad rate or axis", "[ops][dropout][errors]") {
  Graph graph;
  const Tensor x = graph.placeholder({Shape::unknown, 5}, DType::float32, "x");
  CHECK_THROWS_AS(ops::dropout_mask(x, 1.0, 1, {1}), ConfigError);
  CHECK_THROWS_WITH(ops::dropout_mask(x, 0.5, 1, {2}), Contains("broadcast axis 2 is out of range for rank 2"));
}

TEST_CASE("random_normal_like: standard normal draws, new each run, reproducible from the seed", "[ops][dropout]") {
  Graph graph;
  const Tensor x = graph.placeholder({Shape::unknown, 100}, DType::float64, "x");
  const Tensor z = ops::random_normal_like(x, 21);
  Program program(graph, {z});
  const Array zeros({400, 100}, DType::float64);
  program.feed(x, zeros);
  program.run();
  const Array first = program.fetch(z);
  REQUIRE(first.shape() == Shape{400, 100});
  double sum = 0, squares = 0, fourth = 0;
  for (std::size_t i = 0; i < first.size(); ++i) {
    const double v = first.flat(i);
    REQUIRE(std::isfinite(v));
    sum += v;
    squares += v * v;
    fourth += v * v * v * v;
  }
  const double n = static_cast<double>(first.size());
  // 40,000 draws: the standard errors are 0.005 for the mean, 0.007 for the variance, 0.05 for E[z⁴] = 3.
  CHECK(std::abs(sum / n) < 0.025);
  CHECK(std::abs(squares / n - 1.0) < 0.035);
  CHECK(std::abs(fourth / n - 3.0) < 0.25);
  // Elements 2j and 2j + 1 come from one Box–Muller pair (cosine and sine): uncorrelated, E[z₀z₁] = 0.
  double pairs = 0;
  for (std::size_t i = 0; i + 1 < first.size(); i += 2) pairs += first.flat(i) * first.flat(i + 1);
  CHECK(std::abs(pairs / (n / 2)) < 0.03);  // standard error 0.007
  program.feed(x, zeros);
  program.run();
  CHECK_FALSE(program.fetch(z).bitwise_equal(first));
  program.set_run_count(0);
  program.feed(x, zeros);
  program.run();
  CHECK(program.fetch(z).bitwise_equal(first));
  // float32 draws are the float64 ones rounded.
  Graph single;
  const Tensor x32 = single.placeholder({Shape::unknown, 100}, DType::float32, "x");
  const Tensor z32 = ops::random_normal_like(x32, 21);
  Program program32(single, {z32});
  program32.feed(x32, Array({400, 100}));
  program32.run();
  CHECK(program32.fetch(z32).bitwise_equal(first.astype(DType::float32)));
}

TEST_CASE("the random ops draw the same values on any number of threads", "[ops][dropout][threads]") {
  // Odd sizes, so that a worker's range can start inside a Box–Muller pair.
  Graph graph;
  const Tensor x = graph.placeholder({Shape::unknown, 1001}, DType::float32, "x");
  const Tensor z = ops::random_normal_like(x, 5);
  const Tensor d = ops::dropout(x, 0.3, 5, true);
  const Tensor m = ops::dropout_mask(x, 0.3, 5, {});
  const Array ones = Array::full({257, 1001}, 1.0);
  auto draw = [&](int threads) {
    const int saved = get_num_threads();
    set_num_threads(threads);
    Program program(graph, {z, d, m});
    program.feed(x, ones);
    program.run();
    std::vector<Array> out = {program.fetch(z).copy(), program.fetch(d).copy(), program.fetch(m).copy()};
    set_num_threads(saved);
    return out;
  };
  const std::vector<Array> serial = draw(1), parallel = draw(3);
  for (std::size_t i = 0; i < serial.size(); ++i) CHECK(serial[i].bitwise_equal(parallel[i]));
}

// A distributed fit's shards: rows [start, start + n) run with Program::set_batch_offset(start) draw what those
// rows draw in a run of the whole batch, for a batch axis alone or merged with the next ((batch·heads, ...)),
// at any offset (odd ones split RandomNormal's Box–Muller pairs), and a mask shared along the batch stays shared.
TEST_CASE("random ops of a shard at a batch offset draw as those rows of the whole batch", "[ops][dropout]") {
  constexpr std::int64_t rows = 7;
  Rng rng(3);
  Array input({rows, 3, 5}, DType::float64);
  for (std::size_t i = 0; i < input.size(); ++i) input.set_flat(i, rng.uniform(0.5, 1.5));
  using Build = Tensor (*)(const Tensor&);
  const std::vector<std::pair<const char*, Build>> cases = {
      {"dropout", [](const Tensor& x) { return ops::dropout(x, 0.4, 9); }},
      {"dropout of (batch·3, 5)", [](const Tensor& x) { return ops::dropout(ops::reshape(x, {-1, 5}), 0.4, 9); }},
      {"dropout_mask", [](const Tensor& x) { return ops::dropout_mask(x, 0.4, 9, {2}); }},
      {"dropout_mask shared along the batch", [](const Tensor& x) { return ops::dropout_mask(x, 0.4, 9, {0}); }},
      {"random_normal", [](const Tensor& x) { return ops::random_normal_like(x, 9); }},
  };
  for (const auto& [label, build] : cases) {
    INFO(label);
    Graph graph;
    const Tensor x = graph.placeholder({Shape::unknown, 3, 5}, DType::float64, "x");
    const Tensor y = build(x);
    Program whole(graph, {y});
    whole.set_run_count(4);
    whole.feed(x, input);
    whole.run();
    const Array expected = whole.fetch(y);
    const bool shared = std::string(label).find("shared") != std::string::npos;
    for (const std::int64_t start : {std::int64_t{1}, std::int64_t{3}, std::int64_t{4}}) {
      for (const std::int64_t count : {std::int64_t{1}, rows - start}) {
        Program shard(graph, {y});
        shard.set_run_count(4);
        shard.set_batch_offset(start);
        const Array part = input.rows(start, count);
        shard.feed(x, part);
        shard.run();
        const Array got = shard.fetch(y);
        const Array want = shared ? expected : expected.reshape(Shape({rows, static_cast<std::int64_t>(expected.size()) / rows})).rows(start, count);
        INFO("rows " << start << " to " << start + count);
        REQUIRE(got.size() == want.size());
        for (std::size_t i = 0; i < got.size(); ++i) REQUIRE(got.flat(i) == want.flat(i));
      }
    }
  }
  Graph graph;
  const Tensor x = graph.placeholder({Shape::unknown, 3}, DType::float64, "x");
  Program program(graph, {ops::dropout(x, 0.5, 1)});
  CHECK_THROWS_AS(program.set_batch_offset(-1), ValueError);
}
