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
