#include <catch2/catch.hpp>

#include <vector>

#include <kiln/core/detail/program_pool.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/ops/ops.hpp>

using namespace kiln;

TEST_CASE("a program pool lends each caller its own program and prefers one planned for the batch size",
          "[core][program][concurrency]") {
  Graph graph;
  const Tensor x = graph.placeholder({Shape::unknown, 3}, DType::float64, "x");
  const Tensor y = ops::scale(x, 3.0);
  detail::ProgramPool pool(graph, {y});
  CHECK(pool.idle() == 1);
  Program* planned_for_4 = nullptr;
  {
    auto first = pool.lease(4);
    auto second = pool.lease(4);  // the first is taken: a new one
    CHECK(&*first != &*second);
    CHECK(pool.idle() == 0);
    first->feed(x, Array::full({4, 3}, 1.0, DType::float64));
    first->run();
    second->feed(x, Array::full({2, 3}, 1.0, DType::float64));
    second->run();
    CHECK(first->fetch(y).flat(0) == 3.0);
    planned_for_4 = &*first;
  }
  CHECK(pool.idle() == 2);
  {
    auto again = pool.lease(4);
    CHECK(&*again == planned_for_4);
    CHECK(again->has_plan(4));
  }
  // More callers at once than the pool keeps idle: the extra programs are dropped when given back.
  {
    std::vector<detail::ProgramPool::Lease> leases;
    for (int i = 0; i < 12; ++i) leases.push_back(pool.lease(1));
  }
  CHECK(pool.idle() == 8);
}

TEST_CASE("a program pool checks its fetches when it is made", "[core][program]") {
  Graph graph, other;
  const Tensor y = ops::scale(other.placeholder({2}), 3.0);
  CHECK_THROWS_AS(detail::ProgramPool(graph, {y}), Error);
}
