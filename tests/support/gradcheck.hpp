#pragma once
// The shared test harness: central-difference gradient checks in double precision, and a one-call way
// to evaluate a graph function on concrete arrays.
#include <functional>
#include <string>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/core/shape.hpp>
#include <kiln/core/tensor.hpp>

namespace kiln::testing {

using GraphFunction = std::function<Tensor(const std::vector<Tensor>&)>;

struct GradcheckOptions {
  double step = 1e-6;             // central difference step h
  double low = -1.0, high = 1.0;  // range of the random inputs (when only shapes are given)
  double floor = 1e-2;            // |analytic - numeric| / max(|analytic|, |numeric|, floor)
  std::vector<int> wrt;           // inputs to differentiate (empty: all)
  std::string label;              // "softmax axis=-1": with KILN_GRADCHECK_LOG=file, one line per check
};

struct GradcheckReport {
  double max_relative_error = 0.0;
  std::string worst;  // "input 1 [index 7]: analytic 0.123 vs numeric 0.124"
  std::size_t num_checked = 0;
  const std::string& worst_entry() const { return worst; }
};

// Builds f on float64 placeholders holding `inputs`, differentiates sum(f(x) * R) for a fixed random R
// (never a plain sum: softmax outputs sum to 1 and would hide any bug), and compares every entry of
// the analytic gradient with central differences. With `unknown_batch`, input 0 is declared with its
// dimension 0 unknown (the batch), so shape rules and plans see a None dimension.
GradcheckReport gradcheck(const GraphFunction& f, const std::vector<Array>& inputs,
                          const GradcheckOptions& options = {}, bool unknown_batch = false);
// The same on random inputs of the given shapes in [options.low, options.high).
GradcheckReport gradcheck(const GraphFunction& f, const std::vector<Shape>& shapes, Rng& rng,
                          const GradcheckOptions& options = {});

// f evaluated once on concrete inputs (dtype taken from the arrays).
Array evaluate(const GraphFunction& f, const std::vector<Array>& inputs);
// f's output on `inputs` followed by the analytic gradient of <f(x), weights> with respect to each input:
// what a fused op is compared on against the composition of primitive ops it replaces.
std::vector<Array> evaluate_with_gradients(const GraphFunction& f, const std::vector<Array>& inputs,
                                           const Array& weights);
// evaluate_with_gradients on `threads` of kiln's threads (the count before is restored after).
std::vector<Array> evaluate_with_gradients_on(int threads, const GraphFunction& f, const std::vector<Array>& inputs,
                                              const Array& weights);

Array random_array(const Shape& shape, Rng& rng, DType dtype = DType::float64, double low = -1.0, double high = 1.0);
// Values in [low, high) whose magnitude is at least `gap` away from each of `kinks` (relu at 0, ...).
Array random_away_from(const Shape& shape, Rng& rng, const std::vector<double>& kinks, double gap = 1e-2,
                       DType dtype = DType::float64, double low = -1.0, double high = 1.0);

// The largest |a - b| / max(1, |b|) over all elements; throws if shapes differ.
double max_relative_difference(const Array& a, const Array& b);

}  // namespace kiln::testing
