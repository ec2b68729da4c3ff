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

// Group normalization written out: for each sample n and group g, the values x[n, ..., c, ...] of the
// group's channels c over every other axis, their mean and biased variance, then
// (x − mean) / sqrt(var + ε) · gamma[c] + beta[c].
Array reference(const Array& x, int axis, std::int64_t groups, const Array& gamma, const Array& beta, double epsilon) {
  const Shape& s = x.shape();
  const std::int64_t batch = s[0], channels = s[axis];
  std::int64_t pre = 1, post = 1;
  for (int i = 1; i < axis; ++i) pre *= s[i];
  for (int i = axis + 1; i < s.rank(); ++i) post *= s[i];
  const std::int64_t per_group = channels / groups;
  Array out = x.astype(DType::float64);
  auto index = [&](std::int64_t n, std::int64_t p, std::int64_t c, std::int64_t q) {
    return static_cast<std::size_t>(((n * pre + p) * channels + c) * post + q);
  };
  for (std::int64_t n = 0; n < batch; ++n)
    for (std::int64_t g = 0; g < groups; ++g) {
      std::vector<std::size_t> members;
      for (std::int64_t p = 0; p < pre; ++p)
        for (std::int64_t c = g * per_group; c < (g + 1) * per_group; ++c)
          for (std::int64_t q = 0; q < post; ++q) members.push_back(index(n, p, c, q));
      double mean = 0, variance = 0;
      for (const std::size_t i : members) mean += x.flat(i) / static_cast<double>(members.size());
      for (const std::size_t i : members)
        variance += std::pow(x.flat(i) - mean, 2) / static_cast<double>(members.size());
      for (const std::size_t i : members) {
        const auto c = static_cast<std::size_t>((static_cast<std::int64_t>(i) / post) % channels);
        out.set_flat(i, (x.flat(i) - mean) / std::sqrt(variance + epsilon) * gamma.flat(c) + beta.flat(c));
      }
    }
  return out;
}

// The same from primitive ops, as Keras's layer composes it: reshape into groups, moments over every
// axis but the batch and the group, normalize, reshape back, scale and shift.
Tensor composed(const Tensor& x, const Tensor& gamma, const Tensor& beta, std::int64_t groups, int axis,
                double epsilon) {
  std::vector<std::int64_t> grouped = x.shape().dims();
  grouped[static_cast<std::size_t>(axis)] /= groups;
  grouped.insert(grouped.begin() + axis, groups);
  const Tensor r = ops::reshape(x, grouped);
  ops::Axes axes;
  for (int i = 1; i < r.rank(); ++i)
    if (i != axis) axes.push_back(i);
  const Tensor centered = r - ops::mean(r, axes, true);
  const Tensor normalized =
      ops::reshape(centered * ops::rsqrt(ops::mean(ops::square(centered), axes, true) + epsilon), x.shape().dims());
  std::vector<std::int64_t> broadcast(static_cast<std::size_t>(x.rank() - axis), 1);
  broadcast[0] = gamma.shape()[0];
  return normalized * ops::reshape(gamma, broadcast) + ops::reshape(beta, broadcast);
}

struct Case {
  Shape x;
  int axis;
  std::int64_t groups;
};
// channels_last images, channels_first images, sequences, plain features, one group (layer norm over
// everything), one channel per group (instance norm), a group of 130 channels (the kernels sum a
// channels_last group in lanes of 64 channels: two whole and one of 2), and blocks of several groups (as many
// as fit in 64 lanes: 21 groups of 3 channels and a last block of 11; 4 groups of 16 and a last one of 1).
const std::vector<Case> cases{{{2, 3, 4, 6}, 3, 3}, {{2, 6, 3, 2}, 1, 2}, {{3, 5, 4}, 2, 2},
                              {{4, 6}, 1, 3},       {{2, 3, 4}, 2, 1},    {{2, 3, 4}, 2, 4},
                              {{2, 2, 130}, 2, 1},  {{2, 5, 96}, 2, 32},  {{3, 4, 80}, 2, 5}};

}  // namespace

TEST_CASE("group_norm matches the formula written out", "[ops][group_norm]") {
  Rng rng(41);
  for (const Case& c : cases) {
    INFO(c.x.to_string() << " axis " << c.axis << " groups " << c.groups);
    const Shape channels{c.x[c.axis]};
    const Array x = testing::random_array(c.x, rng, DType::float64, -2, 3);
    const Array gamma = testing::random_array(channels, rng), beta = testing::random_array(channels, rng);
    const Array y = testing::evaluate(
        [&](const std::vector<Tensor>& t) { return ops::group_norm(t[0], t[1], t[2], c.groups, c.axis, 1e-3); },
        {x, gamma, beta});
    CHECK(testing::max_relative_difference(y, reference(x, c.axis, c.groups, gamma, beta, 1e-3)) < 1e-12);
    // A negative axis names the same channel axis.
    const Array negative = testing::evaluate(
        [&](const std::vector<Tensor>& t) {
          return ops::group_norm(t[0], t[1], t[2], c.groups, c.axis - c.x.rank(), 1e-3);
        },
        {x, gamma, beta});
    CHECK(testing::max_relative_difference(negative, y) == 0.0);
  }
}

TEST_CASE("group_norm: the fused kernels equal the composition of primitive ops, forward and backward",
          "[ops][group_norm]") {
  Rng rng(42);
  for (const Case& c : cases) {
    INFO(c.x.to_string() << " axis " << c.axis << " groups " << c.groups);
    const Shape channels{c.x[c.axis]};
    const std::vector<Array> inputs{testing::random_array(c.x, rng), testing::random_array(channels, rng),
                                    testing::random_array(channels, rng)};
    const Array weights = testing::random_array(c.x, rng);
    const std::vector<Array> fused = testing::evaluate_with_gradients(
        [&](const std::vector<Tensor>& t) { return ops::group_norm(t[0], t[1], t[2], c.groups, c.axis, 1e-3); }, inputs,
        weights);
    const std::vector<Array> primitive = testing::evaluate_with_gradients(
        [&](const std::vector<Tensor>& t) { return composed(t[0], t[1], t[2], c.groups, c.axis, 1e-3); }, inputs,
        weights);
    for (std::size_t i = 0; i < fused.size(); ++i) {
      INFO("result " << i);
      CHECK(testing::max_relative_difference(fused[i], primitive[i]) < 1e-11);
    }
  }
}

TEST_CASE("group_norm gradients match central differences", "[ops][group_norm][grad]") {
  Rng rng(43);
  for (const Case& c : cases) {
    testing::GradcheckOptions o;
    o.label =
        "group_norm " + c.x.to_string() + " axis " + std::to_string(c.axis) + " groups " + std::to_string(c.groups);
    const Shape channels{c.x[c.axis]};
    const auto r = testing::gradcheck(
        [&c](const std::vector<Tensor>& t) { return ops::group_norm(t[0], t[1], t[2], c.groups, c.axis, 1e-3); },
        {c.x, channels, channels}, rng, o);
    INFO(o.label << ": " << r.worst_entry());
    REQUIRE(r.max_relative_error <= 1e-6);
  }
}

TEST_CASE("group_norm with an unknown batch dimension", "[ops][group_norm][grad]") {
  Rng rng(44);
  const Array gamma = testing::random_array({4}, rng), beta = testing::random_array({4}, rng);
  testing::GradcheckOptions o;
  o.label = "group_norm unknown batch";
  const auto r = testing::gradcheck(
      [&](const std::vector<Tensor>& t) {
        Graph& g = t[0].graph();
        return ops::group_norm(t[0], g.constant(gamma.copy()), g.constant(beta.copy()), 2);
      },
      {testing::random_array({3, 5, 4}, rng)}, o, /*unknown_batch=*/true);
  INFO(r.worst_entry());
  REQUIRE(r.max_relative_error <= 1e-6);
}

TEST_CASE("group_norm in float32: output and dx bitwise the same on any thread count, gamma's and beta's sums close",
          "[ops][group_norm][threads]") {
  // Samples' blocks of groups are split among threads: a group's statistics and order of channels are the same
  // whichever thread runs them. The gamma/beta sums are too, with a partial per worker added in worker order.
  // (Each case is large enough for kiln to split it among two threads.)
  Rng rng(44);
  for (const Case& c : {Case{{6, 64, 96}, 2, 32}, Case{{16, 40, 64}, 2, 8}, Case{{4, 6, 35, 37}, 1, 3}}) {
    INFO(c.x.to_string() << " axis " << c.axis << " groups " << c.groups);
    const Shape channels{c.x[c.axis]};
    const std::vector<Array> inputs{testing::random_array(c.x, rng, DType::float32),
                                    testing::random_array(channels, rng, DType::float32),
                                    testing::random_array(channels, rng, DType::float32)};
    const Array weights = testing::random_array(c.x, rng, DType::float32);
    const auto norm = [&](const std::vector<Tensor>& t) {
      return ops::group_norm(t[0], t[1], t[2], c.groups, c.axis, 1e-3);
    };
    testing::check_thread_counts(norm, inputs, weights, 2, 1e-6);
  }
}

TEST_CASE("group_norm refuses bad shapes and arguments", "[ops][group_norm][errors]") {
  Graph g;
  const Tensor x = g.placeholder({Shape::unknown, 5, 6}, DType::float32, "x");
  const Tensor six = g.placeholder({6}, DType::float32, "six");
  const Tensor five = g.placeholder({5}, DType::float32, "five");
  CHECK_THROWS_AS(ops::group_norm(x, six, six, 4), ShapeError);
  CHECK_THROWS_WITH(ops::group_norm(x, six, six, 4), Contains("6 channels do not divide into 4 groups"));
  CHECK_THROWS_WITH(ops::group_norm(x, six, six, 7), Contains("groups must be in [1, 6]"));
  CHECK_THROWS_WITH(ops::group_norm(x, six, six, 0), Contains("groups must be in [1, 6]"));
  CHECK_THROWS_WITH(ops::group_norm(x, five, six, 2), Contains("gamma and beta must have shape (6,)"));
  CHECK_THROWS_WITH(ops::group_norm(x, six, six, 2, 3), Contains("axis 3 is out of range for rank 3"));
  CHECK_THROWS_WITH(ops::group_norm(x, six, six, 2, 0), Contains("cannot be the batch axis"));
  CHECK_THROWS_WITH(ops::group_norm(x, six, six, 2, -1, 0.0), Contains("epsilon must be positive"));
  const Tensor unknown = g.placeholder({2, Shape::unknown}, DType::float32, "unknown");
  CHECK_THROWS_WITH(ops::group_norm(unknown, six, six, 2), Contains("the channel axis must be known"));
}
