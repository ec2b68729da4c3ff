#include <catch2/catch.hpp>

#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/layers/dense.hpp>
#include <kiln/layers/embedding.hpp>
#include <kiln/layers/model.hpp>
#include <kiln/layers/pooling.hpp>
#include <kiln/train/model.hpp>
#include "support/layer_check.hpp"

using kiln::Array;
using kiln::Config;
using kiln::Shape;
using namespace kiln::testing;

TEST_CASE("GlobalAveragePooling1D: output shapes drop (or keep) the steps axis", "[layers][global_average_pooling1d]") {
  const LayerCase c{{random_input({4, 6, 5}, 1)}};
  kiln::GlobalAveragePooling1D pool;
  CHECK(symbolic_output_shapes(*pool, c) == std::vector<Shape>{Shape{Shape::unknown, 5}});
  kiln::GlobalAveragePooling1D keep("channels_last", {{"keepdims", true}});
  CHECK(symbolic_output_shapes(*keep, c) == std::vector<Shape>{Shape{Shape::unknown, 1, 5}});
  kiln::GlobalAveragePooling1D channels_first("channels_first");
  CHECK(symbolic_output_shapes(*channels_first, c) == std::vector<Shape>{Shape{Shape::unknown, 6}});
  kiln::GlobalAveragePooling1D keep_first("channels_first", {{"keepdims", true}});
  CHECK(symbolic_output_shapes(*keep_first, c) == std::vector<Shape>{Shape{Shape::unknown, 6, 1}});
  CHECK(pool.weights().empty());
}

TEST_CASE("GlobalAveragePooling1D: gradients match central differences", "[layers][global_average_pooling1d][grad]") {
  for (const char* data_format : {"channels_last", "channels_first"})
    for (const bool keepdims : {false, true}) {
      kiln::GlobalAveragePooling1D pool(data_format, {{"keepdims", keepdims}});
      const GradcheckReport report = gradcheck_layer(*pool, LayerCase{{random_input({3, 4, 5}, 2)}});
      INFO(data_format << ", keepdims " << keepdims << ": " << report.worst_entry());
      CHECK(report.num_checked == 60);
      CHECK(report.max_relative_error <= 1e-6);
    }
}

TEST_CASE("GlobalAveragePooling1D: config round trip with Keras's keys", "[layers][global_average_pooling1d][config]") {
  kiln::GlobalAveragePooling1D pool("channels_first", {{"keepdims", true}, {"name", "pool"}});
  check_config_round_trip(pool, LayerCase{{random_input({2, 3, 4}, 3)}});
  const Config config = pool.get_config();
  CHECK(config.get_string("data_format") == "channels_first");
  CHECK(config.get_bool("keepdims"));
  CHECK(config.get_string("name") == "pool");
  const Config defaults = kiln::GlobalAveragePooling1D(Config{{"data_format", nullptr}}).get_config();
  CHECK(defaults.get_string("data_format") == "channels_last");
  CHECK_FALSE(defaults.get_bool("keepdims"));
}

TEST_CASE("GlobalAveragePooling1D: values are means over the steps", "[layers][global_average_pooling1d][values]") {
  const Array x = random_input({2, 3, 4}, 4);  // (batch, 3, 4)
  kiln::GlobalAveragePooling1D last, first("channels_first");
  const Array over_steps = run_layer(*last, LayerCase{{x}})[0];
  const Array over_last = run_layer(*first, LayerCase{{x}})[0];
  REQUIRE(over_steps.shape() == Shape{2, 4});
  REQUIRE(over_last.shape() == Shape{2, 3});
  for (std::size_t b = 0; b < 2; ++b) {
    for (std::size_t f = 0; f < 4; ++f) {
      double total = 0;
      for (std::size_t s = 0; s < 3; ++s) total += x.flat(b * 12 + s * 4 + f);
      CHECK(over_steps.flat(b * 4 + f) == Approx(total / 3.0).epsilon(1e-14));
    }
    for (std::size_t f = 0; f < 3; ++f) {
      double total = 0;
      for (std::size_t s = 0; s < 4; ++s) total += x.flat(b * 12 + f * 4 + s);
      CHECK(over_last.flat(b * 3 + f) == Approx(total / 4.0).epsilon(1e-14));
    }
  }
}

TEST_CASE("GlobalAveragePooling1D: inputs of another rank fail, naming the layer",
          "[layers][global_average_pooling1d][errors]") {
  kiln::GlobalAveragePooling1D pool;
  const kiln::Tensor matrix = kiln::Input({Shape::unknown, 5});
  CHECK_THROWS_AS(pool(matrix), kiln::ShapeError);
  CHECK_THROWS_WITH(pool(matrix), Catch::Contains("GlobalAveragePooling1D 'global_average_pooling1d'") &&
                                      Catch::Contains("(None, 5)"));
  kiln::GlobalAveragePooling1D built(Config{{"name", "built"}});
  built(kiln::Input({Shape::unknown, 2, 5}));
  const kiln::Tensor rank4 = kiln::Input({Shape::unknown, 2, 3, 5});
  CHECK_THROWS_WITH(built(rank4),
                    Catch::Contains("GlobalAveragePooling1D 'built'") && Catch::Contains("(None, 2, 3, 5)"));
  CHECK_THROWS_AS(kiln::GlobalAveragePooling1D("channels_middle"), kiln::ConfigError);
  CHECK_THROWS_WITH(kiln::GlobalAveragePooling1D(Config{{"keep_dims", true}}),
                    Catch::Contains("unknown argument 'keep_dims'"));
}

TEST_CASE("GlobalAveragePooling1D: a bag-of-embeddings classifier runs as a Sequential model",
          "[layers][global_average_pooling1d][model]") {
  kiln::Sequential model({kiln::Embedding(20, 6), kiln::GlobalAveragePooling1D(), kiln::Dense(3, "softmax")});
  model.build(Shape{Shape::unknown, 5});
  Array tokens(Shape{4, 5});
  for (std::size_t i = 0; i < tokens.size(); ++i) tokens.set_flat(i, static_cast<double>((i * 3) % 20));
  const Array probabilities = model.predict(tokens);
  REQUIRE(probabilities.shape() == Shape{4, 3});
  for (std::size_t row = 0; row < 4; ++row)
    CHECK(probabilities.flat(row * 3) + probabilities.flat(row * 3 + 1) + probabilities.flat(row * 3 + 2) ==
          Approx(1.0).epsilon(1e-6));
  CHECK(model.count_params() == 20 * 6 + 6 * 3 + 3);
}

// ---- the layer harness ---------------------------------------------------------------------------------

namespace {
LayerSpec global_average_pooling_spec() {
  constexpr std::int64_t any = Shape::unknown;
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::GlobalAveragePooling1D()); };
  spec.call = LayerCase{{random_input({2, 5, 3}, 1)}};
  spec.output_shapes = {Shape{any, 3}};
  spec.bad_inputs = {{"a rank-2 input", {{any, 3}}, "needs inputs of shape (batch, steps, features)"}};
  return spec;
}
}  // namespace

KILN_LAYER_HARNESS("kiln>GlobalAveragePooling1D", global_average_pooling_spec)
