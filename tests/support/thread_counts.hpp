#pragma once
// A fused kernel split over kiln's threads, checked at 1 thread against 2, 3, 7 and 16.
#include <catch2/catch.hpp>

#include <cstddef>
#include <vector>

#include "support/gradcheck.hpp"

namespace kiln::testing {

// f's output and gradients (evaluate_with_gradients_on) at 1 thread against 2, 3, 7 and 16: results before
// `first_sum` (the output is result 0, the gradient of input i result i + 1) bitwise the same on any count, as a
// kernel whose rows are each computed alone gives them; results from `first_sum` on, sums over rows with a partial
// per worker added in worker order, within `tolerance` (max_relative_difference). Every result repeats bitwise at
// a given count.
inline void check_thread_counts(const GraphFunction& f, const std::vector<Array>& inputs, const Array& weights,
                                std::size_t first_sum, double tolerance) {
  const std::vector<Array> one = evaluate_with_gradients_on(1, f, inputs, weights);
  for (const int threads : {2, 3, 7, 16}) {
    const std::vector<Array> split = evaluate_with_gradients_on(threads, f, inputs, weights);
    const std::vector<Array> again = evaluate_with_gradients_on(threads, f, inputs, weights);
    REQUIRE(split.size() == one.size());
    for (std::size_t i = 0; i < one.size(); ++i) {
      INFO(threads << " threads, result " << i);
      CHECK(again[i].bitwise_equal(split[i]));
      if (i < first_sum)
        CHECK(split[i].bitwise_equal(one[i]));
      else
        CHECK(max_relative_difference(split[i].astype(DType::float64), one[i].astype(DType::float64)) < tolerance);
    }
  }
}

}  // namespace kiln::testing
