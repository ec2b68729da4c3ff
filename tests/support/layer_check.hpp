#pragma once
// The layer harness, after Keras's run_layer_test: run a layer on concrete arrays, check its output
// shapes with an unknown batch, check its gradients (inputs and weights) against central differences in
// float64, and check that from_config(get_config()) rebuilds it exactly.
#include <string>
#include <utility>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/shape.hpp>
#include <kiln/layers/layer.hpp>
#include "support/gradcheck.hpp"

namespace kiln::testing {

// One call of a layer on concrete data.
struct LayerCase {
  LayerCase() = default;
  explicit LayerCase(std::vector<Array> given_inputs) : inputs(std::move(given_inputs)) {}
  std::vector<Array> inputs;
  std::vector<std::pair<std::string, Array>> tensor_args;  // masks: fed, never differentiated
  Config options;                                          // call options (use_causal_mask, ...)
  bool training = false;
};

// Outputs of one call, each in a fresh graph.
std::vector<Array> run_layer(Layer& layer, const LayerCase& c);
// The symbolic output shapes when every input (and batch-sized mask) has an unknown batch dimension.
std::vector<Shape> symbolic_output_shapes(Layer& layer, const LayerCase& c);

struct LayerGradcheckOptions {
  GradcheckOptions base;        // step, floor, label
  std::vector<int> wrt_inputs;  // inputs to differentiate; empty: all of them
  bool check_inputs = true;     // false: weights only (an Embedding's indices have no gradient)
  bool check_weights = true;    // every trainable weight too
};
// d(sum_k <output_k, R_k>)/d(inputs, weights) for fixed random R_k, against central differences.
// Weights are perturbed in place (they share storage with the graph's variables).
GradcheckReport gradcheck_layer(Layer& layer, const LayerCase& c, const LayerGradcheckOptions& options = {});

// serialize_layer -> layer_from_config: an equal config, the same weights by count and shape, and after
// set_weights bitwise-identical outputs. Uses Catch's REQUIRE.
void check_config_round_trip(const LayerPtr& layer, const LayerCase& c);

// A float64 array of `shape` filled from `rng` in [low, high).
Array random_input(const Shape& shape, std::uint64_t seed, double low = -1.0, double high = 1.0);

}  // namespace kiln::testing
