#include <catch2/catch.hpp>

#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/ops/ops.hpp>
#include "support/gradcheck.hpp"

using namespace kiln;

namespace {
// Plain-loop batched product with transposes and batch broadcasting, for reference.
Array reference(const Array& a, const Array& b, bool ta, bool tb) {
  const Shape& sa = a.shape();
  const Shape& sb = b.shape();
  const std::int64_t m = ta ? sa.dim(-1) : sa.dim(-2), k = ta ? sa.dim(-2) : sa.dim(-1);
  const std::int64_t n = tb ? sb.dim(-2) : sb.dim(-1);
  const std::int64_t batch_a = sa.num_elements() / (m * k), batch_b = sb.num_elements() / (k * n);
  const std::int64_t batches = std::max(batch_a, batch_b);
  std::vector<std::int64_t> dims = sa.rank() >= sb.rank() ? sa.dims() : sb.dims();
  dims[dims.size() - 2] = m;
  dims[dims.size() - 1] = n;
  Array out{Shape(dims), DType::float64};
  for (std::int64_t batch = 0; batch < batches; ++batch) {
    const std::int64_t oa = (batch_a == 1 ? 0 : batch) * m * k, ob = (batch_b == 1 ? 0 : batch) * k * n;
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double total = 0;
        for (std::int64_t p = 0; p < k; ++p)
          total += a.flat(static_cast<std::size_t>(oa + (ta ? p * m + i : i * k + p))) *
                   b.flat(static_cast<std::size_t>(ob + (tb ? j * k + p : p * n + j)));
        out.set_flat(static_cast<std::size_t>(batch * m * n + i * n + j), total);
      }
  }
  return out;
}

struct MatmulCase {
  Shape a, b;
  bool ta, tb;
};
const std::vector<MatmulCase> matmul_cases = {{{3, 4}, {4, 5}, false, false},     {{4, 3}, {4, 5}, true, false},
                                              {{3, 4}, {5, 4}, false, true},      {{4, 3}, {5, 4}, true, true},
                                              {{2, 3, 4}, {4, 5}, false, false},  {{2, 3, 4}, {2, 4, 5}, false, false},
                                              {{2, 4, 3}, {2, 5, 4}, true, true}, {{3, 4}, {2, 4, 5}, false, false},
                                              {{2, 3, 4}, {5, 4}, false, true},   {{2, 4, 3}, {4, 5}, true, false}};
}  // namespace

TEST_CASE("matmul matches a plain loop for every transpose and batch layout", "[ops][matmul]") {
  Rng rng(31);
  for (const MatmulCase& c : matmul_cases) {
    INFO(c.a.to_string() << (c.ta ? "T" : "") << " @ " << c.b.to_string() << (c.tb ? "T" : ""));
    const Array a = testing::random_array(c.a, rng, DType::float32);
    const Array b = testing::random_array(c.b, rng, DType::float32);
    const Array out =
        testing::evaluate([&](const std::vector<Tensor>& x) { return ops::matmul(x[0], x[1], c.ta, c.tb); }, {a, b});
    const Array expected = reference(a.astype(DType::float64), b.astype(DType::float64), c.ta, c.tb);
    REQUIRE(out.shape() == expected.shape());
    CHECK(testing::max_relative_difference(out.astype(DType::float64), expected) < 1e-5);
  }
}

TEST_CASE("matmul gradients match central differences in float64", "[ops][matmul][grad]") {
  Rng rng(32);
  for (const MatmulCase& c : matmul_cases) {
    testing::GradcheckOptions options;
    options.label = "matmul " + c.a.to_string() + (c.ta ? "T" : "") + " @ " + c.b.to_string() + (c.tb ? "T" : "");
    const auto report = testing::gradcheck(
        [&](const std::vector<Tensor>& x) { return ops::matmul(x[0], x[1], c.ta, c.tb); }, {c.a, c.b}, rng, options);
    INFO(report.worst_entry());
    CHECK(report.max_relative_error <= 1e-6);
  }
  testing::GradcheckOptions options;
  options.label = "matmul dense unknown batch";
  const auto report =
      testing::gradcheck([](const std::vector<Tensor>& x) { return ops::matmul(x[0], x[1]); },
                         {testing::random_array({3, 2, 4}, rng), testing::random_array({4, 5}, rng)}, options, false);
  CHECK(report.max_relative_error <= 1e-6);
}

TEST_CASE("matmul shape errors name the node and both shapes", "[ops][matmul]") {
  Graph graph;
  const Tensor a = graph.placeholder({Shape::unknown, 3, 4}, DType::float32, "a");
  CHECK_THROWS_WITH(ops::matmul(a, graph.placeholder({5, 6})),
                    "matmul 'matmul': inner dimensions differ: (None, 3, 4) @ (5, 6)");
  CHECK_THROWS_AS(ops::matmul(a, graph.placeholder({6})), ShapeError);
  CHECK_THROWS_AS(ops::matmul(graph.placeholder({2, 3, 4}), graph.placeholder({3, 4, 5})), ShapeError);
  CHECK(ops::matmul(a, graph.placeholder({5, 4}), false, true).shape() == Shape({Shape::unknown, 3, 5}));
}

namespace {
// The float64 product of a and b rounded to bfloat16 (a, b float32; no transposes, rank 2).
Array rounded_product(const Array& a, const Array& b, bool ta, bool tb) {
  return reference(ops::round_to_bfloat16(a).astype(DType::float64), ops::round_to_bfloat16(b).astype(DType::float64),
                   ta, tb);
}
}  // namespace

TEST_CASE("matmul in bfloat16: products and their gradients round their operands, sums stay float32",
          "[ops][matmul][bfloat16]") {
  Rng rng(33);
  for (const MatmulCase& c : matmul_cases) {
    if (c.a.rank() != 2 || c.b.rank() != 2) continue;
    INFO(c.a.to_string() << (c.ta ? "T" : "") << " @ " << c.b.to_string() << (c.tb ? "T" : ""));
    const Array a = testing::random_array(c.a, rng, DType::float32);
    const Array b = testing::random_array(c.b, rng, DType::float32);
    const Shape out_shape{c.ta ? c.a[1] : c.a[0], c.tb ? c.b[0] : c.b[1]};
    const Array weights = testing::random_array(out_shape, rng, DType::float32);
    bool attribute_set = false;
    const std::vector<Array> results = testing::evaluate_with_gradients(
        [&](const std::vector<Tensor>& x) {
          Graph::ProductPrecision bf16(x[0].graph(), true);
          const Tensor y = ops::matmul(x[0], x[1], c.ta, c.tb);
          attribute_set = y.node().attributes.get_bool("bfloat16");
          return y;
        },
        {a, b}, weights);
    CHECK(attribute_set);
    CHECK(testing::max_relative_difference(results[0].astype(DType::float64), rounded_product(a, b, c.ta, c.tb)) <
          1e-5);
    // dA = dY·op(B)ᵀ (laid out as A) and dB = op(A)ᵀ·dY, each on rounded operands.
    const Array da = c.ta ? rounded_product(b, weights, c.tb, true) : rounded_product(weights, b, false, !c.tb);
    const Array db = c.tb ? rounded_product(weights, a, true, c.ta) : rounded_product(a, weights, !c.ta, false);
    CHECK(testing::max_relative_difference(results[1].astype(DType::float64), da) < 1e-5);
    CHECK(testing::max_relative_difference(results[2].astype(DType::float64), db) < 1e-5);
    // And not the float32 product: the rounding is real.
    const Array exact = reference(a.astype(DType::float64), b.astype(DType::float64), c.ta, c.tb);
    CHECK(testing::max_relative_difference(results[0].astype(DType::float64), exact) > 1e-6);
  }
  // Outside a scope (or with it closed) no attribute is set.
  const Array plain = testing::evaluate(
      [](const std::vector<Tensor>& x) {
        { Graph::ProductPrecision bf16(x[0].graph(), true); }
        const Tensor y = ops::matmul(x[0], x[1]);
        CHECK_FALSE(y.node().attributes.has("bfloat16"));
        return y;
      },
      {testing::random_array({2, 3}, rng, DType::float32), testing::random_array({3, 2}, rng, DType::float32)});
  CHECK(plain.shape() == Shape{2, 2});
}

TEST_CASE("matmul in bfloat16: float64 stays exact, so its gradients still check", "[ops][matmul][bfloat16][grad]") {
  Rng rng(34);
  for (const MatmulCase& c : matmul_cases) {
    testing::GradcheckOptions options;
    options.label = "matmul bfloat16 " + c.a.to_string() + (c.ta ? "T" : "") + " @ " + c.b.to_string() + (c.tb ? "T" : "");
    const auto report = testing::gradcheck(
        [&](const std::vector<Tensor>& x) {
          Graph::ProductPrecision bf16(x[0].graph(), true);
          return ops::matmul(x[0], x[1], c.ta, c.tb);
        },
        {c.a, c.b}, rng, options);
    INFO(report.worst_entry());
    CHECK(report.max_relative_error <= 1e-6);
  }
}
