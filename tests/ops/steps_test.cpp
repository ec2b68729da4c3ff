// write_steps and read_steps: a run of steps written into or read from a buffer at a start that is data.
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

TEST_CASE("write_steps replaces T steps from the start and read_steps reads them back", "[ops][steps]") {
  kiln::Rng rng(3);
  const Array buffer = testing::random_array({2, 5, 3}, rng);
  const Array rows = testing::random_array({2, 2, 3}, rng);
  const Array start = Array::from_vector(std::vector<double>{2}, {1, 1});
  const Array written = testing::evaluate(
      [](const std::vector<Tensor>& x) { return ops::write_steps(x[0], x[1], x[2]); }, {buffer, rows, start});
  REQUIRE(written.shape() == Shape{2, 5, 3});
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t t = 0; t < 5; ++t)
      for (std::size_t f = 0; f < 3; ++f) {
        const double expected = t >= 2 && t < 4 ? rows.flat((b * 2 + t - 2) * 3 + f) : buffer.flat((b * 5 + t) * 3 + f);
        CHECK(written.flat((b * 5 + t) * 3 + f) == expected);
      }
  const Array read = testing::evaluate(
      [](const std::vector<Tensor>& x) { return ops::read_steps(ops::write_steps(x[0], x[1], x[2]), x[2], 2); },
      {buffer, rows, start});
  CHECK(read.bitwise_equal(rows));
}

TEST_CASE("write_steps and read_steps gradients match central differences", "[ops][steps][grad]") {
  kiln::Rng rng(5);
  const Array start = Array::from_vector(std::vector<double>{1}, {1});
  testing::GradcheckOptions o;
  o.label = "write_steps";
  o.wrt = {0, 1};
  auto w = testing::gradcheck([](const std::vector<Tensor>& x) { return ops::write_steps(x[0], x[1], x[2]); },
                              {testing::random_array({2, 4, 2, 3}, rng), testing::random_array({2, 2, 2, 3}, rng), start},
                              o);
  INFO(w.worst_entry());
  CHECK(w.max_relative_error <= 1e-6);
  o.label = "read_steps";
  o.wrt = {0};
  auto r = testing::gradcheck([](const std::vector<Tensor>& x) { return ops::read_steps(x[0], x[1], 3); },
                              {testing::random_array({2, 4, 3}, rng), start}, o);
  INFO(r.worst_entry());
  CHECK(r.max_relative_error <= 1e-6);
}

TEST_CASE("write_steps and read_steps refuse shapes that disagree and starts that do not fit", "[ops][steps][errors]") {
  Graph graph;
  const Tensor buffer = graph.placeholder({Shape::unknown, 4, 3}, DType::float64);
  const Tensor start = graph.placeholder({1}, DType::float64);
  CHECK_THROWS_WITH(ops::write_steps(buffer, graph.placeholder({Shape::unknown, 5, 3}, DType::float64), start),
                    Contains("more steps than the buffer holds"));
  CHECK_THROWS_WITH(ops::write_steps(buffer, graph.placeholder({Shape::unknown, 1, 2}, DType::float64), start),
                    Contains("differ off the steps axis"));
  CHECK_THROWS_WITH(ops::read_steps(buffer, graph.placeholder({2}, DType::float64), 1), Contains("one number"));
  const Array data = Array::full({1, 4, 3}, 1.0, DType::float64);
  for (const double bad : {3.0, 1.5, -1.0}) {
    INFO(bad);
    CHECK_THROWS_WITH(testing::evaluate([](const std::vector<Tensor>& x) { return ops::read_steps(x[0], x[1], 2); },
                                        {data, Array::from_vector(std::vector<double>{bad}, {1})}),
                      Contains("does not fit"));
  }
}
