#pragma once
// The layer harness, after Keras's run_layer_test. check_layer runs a layer through everything a layer
// owes, in one call: its output shapes with an unknown batch, the float64 gradients of its inputs and
// every weight against central differences, the config round trip, the save/load round trip of a model
// holding it through a file, the weights-only round trip, and its bad-input cases. Every layer's test
// calls it; the pieces below it are there for tests that need one of them alone.
#include <functional>
#include <set>
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

// Everything check_layer needs to know about a layer.
struct LayerSpec {
  std::function<LayerPtr()> make;    // a fresh layer each time (built or not)
  LayerCase call;                    // float64 inputs (and masks, call options)
  std::vector<Shape> output_shapes;  // of `call` with every batch unknown (None)
  LayerGradcheckOptions gradients;   // which inputs and whether weights; gradients.base for step/floor
  bool differentiable = true;        // false: no gradient check (Embedding's indices alone, ...)
  double tolerance = 1e-6;           // the largest relative error of a gradient
  struct BadInput {
    std::string label;
    std::vector<Shape> shapes;  // inputs of these shapes (float64), batch first
    std::string message;        // what the error says besides the layer's name
  };
  // Calls on inputs the layer cannot take: each throws a kiln::Error naming the layer and saying `message`.
  std::vector<BadInput> bad_inputs;
};
// Runs every check; failures are Catch CHECKs labelled with the step.
void check_layer(const LayerSpec& spec);

// The registered layer keys whose test runs check_layer: KILN_LAYER_HARNESS adds to it, and a test fails
// for a registered layer missing here (tests/layers/layer_test.cpp).
std::set<std::string>& harnessed_layers();

// A float64 array of `shape` filled from `rng` in [low, high).
Array random_input(const Shape& shape, std::uint64_t seed, double low = -1.0, double high = 1.0);

// Whole-number token ids in [0, vocabulary), as float64, with repeats (so an embedding's scatter-add
// gradient accumulates): entry i is (7i + 3) mod vocabulary.
Array token_ids(const Shape& shape, std::int64_t vocabulary);

// The largest |a - b| over two arrays of one shape (REQUIREs the shapes equal).
double max_abs_difference(const Array& a, const Array& b);

}  // namespace kiln::testing

// The test case that runs a layer class through check_layer, noting the key as covered:
//   KILN_LAYER_HARNESS("kiln>Dense", dense_spec)   with  LayerSpec dense_spec() { ... }
#define KILN_LAYER_HARNESS(key, spec)                                                                      \
  KILN_AT_STARTUP(::kiln::testing::harnessed_layers().insert(key).second);                                 \
  TEST_CASE(key ": the layer harness (shapes, gradients, config, file, bad input)", "[layers][harness]") { \
    ::kiln::testing::check_layer(spec());                                                                  \
  }
