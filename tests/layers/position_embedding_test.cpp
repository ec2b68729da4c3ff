// keras-hub's position layers and Keras's ReversibleEmbedding, against values derived by hand from
// keras-hub's formulas.
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/kiln.hpp>
#include "support/layer_check.hpp"

using kiln::Array;
using kiln::CallArgs;
using kiln::Config;
using kiln::Shape;
using kiln::Tensor;
using namespace kiln::testing;

namespace {

constexpr std::int64_t None = Shape::unknown;

// One call of `layer` on float64 `input` with `args`, run.
Array run(kiln::Layer& layer, const Array& input, const Config& options = Config()) {
  LayerCase c({input});
  c.options = options;
  return run_layer(layer, c).at(0);
}

}  // namespace

TEST_CASE("PositionEmbedding gives rows start_index .. start_index + steps of its table, in the input's shape",
          "[layers][position]") {
  kiln::PositionEmbedding layer(6, {{"name", "positions"}});
  const Array x = random_input({2, 3, 4}, 1);
  const Array y = run(*layer, x, Config{{"start_index", 2}});
  const Array table = layer->get_weights().at(0);
  REQUIRE(table.shape() == Shape{6, 4});
  REQUIRE(y.shape() == Shape{2, 3, 4});
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t t = 0; t < 3; ++t)
      for (std::size_t f = 0; f < 4; ++f) CHECK(y.flat((b * 3 + t) * 4 + f) == table.flat((t + 2) * 4 + f));
  CHECK_THROWS_WITH(run(*layer, x, Config{{"start_index", 4}}),
                    Catch::Contains("positions") && Catch::Contains("run past"));
  CHECK_THROWS_AS(kiln::PositionEmbedding(0), kiln::ConfigError);
}

TEST_CASE("SinePositionEncoding interleaves sin and cos of keras-hub's timescales", "[layers][position]") {
  kiln::SinePositionEncoding layer;
  const Array y = run(*layer, random_input({1, 3, 4}, 2));
  // Position p, feature j: angle p·10000^(-2⌊j/2⌋/4); sin at even j, cos at odd j.
  for (std::size_t p = 0; p < 3; ++p) {
    const double slow = static_cast<double>(p) * std::pow(10000.0, -0.5);
    CHECK(y.flat(p * 4 + 0) == Approx(std::sin(static_cast<double>(p))).margin(1e-15));
    CHECK(y.flat(p * 4 + 1) == Approx(std::cos(static_cast<double>(p))).margin(1e-15));
    CHECK(y.flat(p * 4 + 2) == Approx(std::sin(slow)).margin(1e-15));
    CHECK(y.flat(p * 4 + 3) == Approx(std::cos(slow)).margin(1e-15));
  }
  const Array shifted = run(*layer, random_input({1, 1, 4}, 2), Config{{"start_index", 2}});
  for (std::size_t j = 0; j < 4; ++j) CHECK(shifted.flat(j) == Approx(y.flat(2 * 4 + j)).margin(1e-15));
}

TEST_CASE("RotaryEmbedding rotates the halves of the features by position times frequency", "[layers][position]") {
  // (batch 1, steps 3, heads 2, depth 4): θ_i = 10000^(-2i/4)/scaling, pairs (i, i + 2).
  for (const double scaling : {1.0, 2.0}) {
    kiln::RotaryEmbedding layer(10000.0, {{"scaling_factor", scaling}});
    const Array x = random_input({1, 3, 2, 4}, 3);
    const Array y = run(*layer, x, Config{{"start_index", 1}});
    for (std::size_t t = 0; t < 3; ++t)
      for (std::size_t h = 0; h < 2; ++h)
        for (std::size_t i = 0; i < 2; ++i) {
          const double theta = std::pow(10000.0, -2.0 * static_cast<double>(i) / 4.0) / scaling;
          const double angle = static_cast<double>(t + 1) * theta;
          const std::size_t at = (t * 2 + h) * 4;
          const double a = x.flat(at + i), b = x.flat(at + i + 2);
          CHECK(y.flat(at + i) == Approx(a * std::cos(angle) - b * std::sin(angle)).margin(1e-14));
          CHECK(y.flat(at + i + 2) == Approx(b * std::cos(angle) + a * std::sin(angle)).margin(1e-14));
        }
  }
  // Other axes: features on axis 1, steps on axis 2, the same rotation.
  kiln::RotaryEmbedding moved(10000.0, {{"sequence_axis", 2}, {"feature_axis", 1}});
  const Array x = random_input({1, 4, 3}, 4);
  const Array y = run(*moved, x);
  for (std::size_t t = 0; t < 3; ++t)
    for (std::size_t i = 0; i < 2; ++i) {
      const double angle = static_cast<double>(t) * std::pow(10000.0, -2.0 * static_cast<double>(i) / 4.0);
      const double a = x.flat(i * 3 + t), b = x.flat((i + 2) * 3 + t);
      CHECK(y.flat(i * 3 + t) == Approx(a * std::cos(angle) - b * std::sin(angle)).margin(1e-14));
    }
  CHECK_THROWS_WITH(run(*kiln::RotaryEmbedding(), random_input({1, 3, 5}, 5)), Catch::Contains("even"));
  CHECK_THROWS_WITH(kiln::RotaryEmbedding(10000.0, {{"rope_type", "yarn"}}), Catch::Contains("yarn"));
}

TEST_CASE("TokenAndPositionEmbedding adds a token's and its position's vectors and masks id 0",
          "[layers][position][masking]") {
  kiln::TokenAndPositionEmbedding layer(7, 5, 3, {{"mask_zero", true}, {"tie_weights", false}});
  Array ids = token_ids({2, 4}, 7);
  ids.set_flat(3, 0.0);
  const Array y = run(*layer, ids);
  const std::vector<kiln::Weight> weights = layer->weights();
  REQUIRE(weights.size() == 3);
  CHECK(weights[0].path == "token_embedding/embeddings");
  CHECK(weights[1].path == "token_embedding/reverse_embeddings");
  CHECK(weights[2].path == "position_embedding/embeddings");
  CHECK(layer->keras_weight_paths() ==
        std::vector<std::string>{"token_embedding/vars/0", "token_embedding/vars/1", "position_embedding/vars/0"});
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t t = 0; t < 4; ++t) {
      const auto id = static_cast<std::size_t>(ids.flat(b * 4 + t));
      for (std::size_t f = 0; f < 3; ++f)
        CHECK(y.flat((b * 4 + t) * 3 + f) ==
              Approx(weights[0].value.flat(id * 3 + f) + weights[2].value.flat(t * 3 + f)).margin(1e-15));
    }
  const Tensor x = kiln::Input({None, 4}, kiln::DType::float64);
  const Tensor h = layer(x);
  const Tensor mask = h.graph().mask_of(h);
  REQUIRE(mask.valid());
  CHECK(mask.shape() == Shape{None, 4});
  // keras-hub's default initializer for both tables is uniform in ±0.05.
  for (const kiln::Weight& weight : kiln::TokenAndPositionEmbedding(7, 5, 3)->weights())
    for (std::size_t i = 0; i < weight.value.size(); ++i) CHECK(std::fabs(weight.value.flat(i)) <= 0.05);
}

TEST_CASE("ReversibleEmbedding maps vectors back to vocabulary scores with its tied or own table",
          "[layers][embedding]") {
  for (const bool tied : {true, false}) {
    INFO("tie_weights " << tied);
    kiln::ReversibleEmbedding layer(5, 3, {{"tie_weights", tied}, {"logit_soft_cap", 2.0}});
    run(*layer, token_ids({1, 2}, 5));  // builds
    const Array h = random_input({2, 3}, 6);
    const Array scores = run(*layer, h, Config{{"reverse", true}});
    REQUIRE(scores.shape() == Shape{2, 5});
    const std::vector<Array> weights = layer->get_weights();
    REQUIRE(weights.size() == (tied ? 1u : 2u));
    for (std::size_t r = 0; r < 2; ++r)
      for (std::size_t v = 0; v < 5; ++v) {
        double dot = 0;
        for (std::size_t f = 0; f < 3; ++f)
          dot += h.flat(r * 3 + f) * (tied ? weights[0].flat(v * 3 + f) : weights[1].flat(f * 5 + v));
        CHECK(scores.flat(r * 5 + v) == Approx(2.0 * std::tanh(dot / 2.0)).margin(1e-15));
      }
  }
  CHECK_THROWS_WITH(kiln::ReversibleEmbedding(5, 3, {{"reverse_dtype", "float16"}}), Catch::Contains("reverse_dtype"));
}

// ---- the layer harness ----------------------------------------------------------------------------------------

namespace {

LayerSpec position_embedding_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::PositionEmbedding(6)); };
  spec.call = LayerCase({random_input({2, 4, 3}, 7)});
  spec.output_shapes = {Shape{None, 4, 3}};
  spec.gradients.check_inputs = false;  // the output reads only the input's shape
  spec.bad_inputs = {{"too long", {{None, 7, 3}}, "run past"}};
  return spec;
}

LayerSpec token_and_position_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::TokenAndPositionEmbedding(9, 5, 3)); };
  spec.call = LayerCase({token_ids({2, 4}, 9)});
  spec.output_shapes = {Shape{None, 4, 3}};
  spec.gradients.check_inputs = false;
  spec.bad_inputs = {{"too long", {{None, 6}}, "run past"}};
  return spec;
}

LayerSpec sine_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::SinePositionEncoding(100.0)); };
  spec.call = LayerCase({random_input({2, 4, 6}, 8)});
  spec.output_shapes = {Shape{None, 4, 6}};
  spec.differentiable = false;  // no weights, and the output reads only the input's shape
  spec.bad_inputs = {{"no steps", {{None, 6}}, "(batch, ..., steps, features)"}};
  return spec;
}

LayerSpec rotary_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::RotaryEmbedding(100.0, {{"rope_type", "dynamic"}, {"scaling_factor", 2.0}})); };
  spec.call = LayerCase({random_input({2, 3, 2, 4}, 9)});
  spec.output_shapes = {Shape{None, 3, 2, 4}};
  spec.bad_inputs = {{"odd features", {{None, 3, 2, 3}}, "even"}};
  return spec;
}

LayerSpec reversible_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::ReversibleEmbedding(9, 4, {{"mask_zero", true}})); };
  spec.call = LayerCase({token_ids({3, 5}, 9)});
  spec.output_shapes = {Shape{None, 5, 4}};
  spec.gradients.check_inputs = false;
  spec.bad_inputs = {{"two inputs", {{None, 5}, {None, 5}}, "takes 1 inputs, got 2"}};
  return spec;
}

}  // namespace

KILN_LAYER_HARNESS("keras_hub>PositionEmbedding", position_embedding_spec)
KILN_LAYER_HARNESS("keras_hub>TokenAndPositionEmbedding", token_and_position_spec)
KILN_LAYER_HARNESS("keras_hub>SinePositionEncoding", sine_spec)
KILN_LAYER_HARNESS("keras_hub>RotaryEmbedding", rotary_spec)
KILN_LAYER_HARNESS("kiln>ReversibleEmbedding", reversible_spec)
