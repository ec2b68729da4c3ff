#include <catch2/catch.hpp>

#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/layers/core/embedding.hpp>
#include <kiln/layers/model_base.hpp>
#include "support/layer_check.hpp"

using kiln::Array;
using kiln::Config;
using kiln::Shape;
using namespace kiln::testing;

TEST_CASE("Embedding: output shape is indices.shape + (output_dim,)", "[layers][embedding]") {
  kiln::Embedding embedding(10, 8);
  CHECK(symbolic_output_shapes(*embedding, LayerCase{{token_ids({4, 6}, 10)}}) ==
        std::vector<Shape>{Shape{Shape::unknown, 6, 8}});
  CHECK(symbolic_output_shapes(*embedding, LayerCase{{token_ids({4, 2, 3}, 10)}}) ==
        std::vector<Shape>{Shape{Shape::unknown, 2, 3, 8}});
  const std::vector<kiln::Weight> weights = embedding.weights();
  REQUIRE(weights.size() == 1);
  CHECK(weights[0].path == "embeddings");
  CHECK(weights[0].value.shape() == Shape{10, 8});
  CHECK(embedding.count_params() == 80);
}

TEST_CASE("Embedding: gradients of the embeddings match central differences", "[layers][embedding][grad]") {
  kiln::Embedding embedding(5, 3);
  LayerGradcheckOptions options;
  options.check_inputs = false;  // indices have no gradient
  const GradcheckReport report = gradcheck_layer(*embedding, LayerCase{{token_ids({3, 4}, 5)}}, options);
  INFO(report.worst_entry());
  CHECK(report.num_checked == 15);  // every entry of the (5, 3) table, none of the indices
  CHECK(report.max_relative_error <= 1e-6);
}

TEST_CASE("Embedding: config round trip with Keras's keys and uniform initializer", "[layers][embedding][config]") {
  kiln::Embedding embedding(7, 4, {{"name", "tokens"}});
  check_config_round_trip(embedding, LayerCase{{token_ids({2, 5}, 7)}});
  const Config config = embedding.get_config();
  CHECK(config.get_int("input_dim") == 7);
  CHECK(config.get_int("output_dim") == 4);
  CHECK_FALSE(config.get_bool("mask_zero"));
  const Config& initializer = config.at("embeddings_initializer");
  CHECK(initializer.get_string("class_name") == "RandomUniform");
  CHECK(initializer.at("config").get_double("minval") == -0.05);
  CHECK(initializer.at("config").get_double("maxval") == 0.05);
  // Keras's aliases, and Keras 2's ignored input_length.
  CHECK(kiln::Initializer::get("uniform") == kiln::Initializer::get("RandomUniform"));
  CHECK(kiln::Initializer::get("normal") == kiln::Initializer::get("random_normal"));
  CHECK(kiln::Embedding(3, 2, {{"input_length", 5}}).get_config() == kiln::Embedding(3, 2).get_config());
}

TEST_CASE("Embedding: values are rows of the table", "[layers][embedding][values]") {
  kiln::Embedding embedding(6, 4);
  const Array ids = token_ids({2, 3, 2}, 6);
  const Array y = run_layer(*embedding, LayerCase{{ids}})[0];
  const Array table = embedding.get_weights()[0];
  REQUIRE(y.shape() == Shape{2, 3, 2, 4});
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const auto row = static_cast<std::size_t>(ids.flat(i));
    for (std::size_t j = 0; j < 4; ++j) CHECK(y.flat(i * 4 + j) == table.flat(row * 4 + j));
  }
  double largest = 0;
  for (std::size_t i = 0; i < table.size(); ++i) largest = std::max(largest, std::fabs(table.flat(i)));
  CHECK(largest <= 0.05);
  CHECK(largest > 0.0);
}

TEST_CASE("Embedding: bad arguments and indices fail with typed errors", "[layers][embedding][errors]") {
  CHECK_THROWS_AS(kiln::Embedding(0, 4), kiln::ConfigError);
  CHECK_THROWS_WITH(kiln::Embedding(10, -1), Catch::Contains("Embedding") && Catch::Contains("output_dim"));
  CHECK_THROWS_WITH(kiln::Embedding(10, 4, {{"mask_zero", "yes"}}), Catch::Contains("mask_zero"));
  CHECK_THROWS_WITH(kiln::Embedding(10, 4, {{"embeddings_regularizer", "l3"}}), Catch::Contains("l3"));
  CHECK_THROWS_WITH(kiln::Embedding(Config{{"input_dim", 10}}), Catch::Contains("'output_dim' is required"));
  kiln::Embedding embedding(4, 2, {{"name", "tokens"}});
  Array out_of_range = token_ids({2, 3}, 4);
  out_of_range.set_flat(5, 4.0);
  CHECK_THROWS_AS(run_layer(*embedding, LayerCase{{out_of_range}}), kiln::ValueError);
  CHECK_THROWS_WITH(run_layer(*embedding, LayerCase{{out_of_range}}),
                    Catch::Contains("tokens") && Catch::Contains("out of range") && Catch::Contains("(4, 2)"));
}

// ---- the layer harness (the indices have no gradient: the embeddings do) -------------------------------------

namespace {
LayerSpec embedding_spec() {
  constexpr std::int64_t any = Shape::unknown;
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::Embedding(10, 4)); };
  spec.call = LayerCase{{token_ids({3, 5}, 10)}};
  spec.output_shapes = {Shape{any, 5, 4}};
  spec.gradients.check_inputs = false;
  spec.bad_inputs = {{"two inputs", {{any, 5}, {any, 5}}, "takes 1 inputs, got 2"}};
  return spec;
}
}  // namespace

KILN_LAYER_HARNESS("kiln>Embedding", embedding_spec)
