#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/layers/core/dense.hpp>
#include <kiln/layers/core/embedding.hpp>
#include <kiln/layers/model_base.hpp>
#include <kiln/layers/pooling/pooling.hpp>
#include <kiln/models/model.hpp>
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

// ---- windowed and 2-D global pooling -------------------------------------------------------------------

namespace {
constexpr std::int64_t unknown_batch = Shape::unknown;

LayerSpec max_pooling1d_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::MaxPooling1D(3, {{"strides", 2}, {"padding", "same"}})); };
  spec.call = LayerCase{{random_input({2, 7, 3}, 2)}};
  spec.output_shapes = {Shape{unknown_batch, 4, 3}};
  spec.bad_inputs = {{"rank 4", {{unknown_batch, 7, 7, 3}}, "expects inputs of rank 3"}};
  return spec;
}
LayerSpec max_pooling2d_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::MaxPooling2D()); };
  spec.call = LayerCase{{random_input({2, 5, 4, 3}, 3)}};
  spec.output_shapes = {Shape{unknown_batch, 2, 2, 3}};
  spec.bad_inputs = {{"a pool larger than the input", {{unknown_batch, 1, 4, 3}}, "cannot pool its input"},
                     {"rank 3", {{unknown_batch, 4, 3}}, "expects inputs of rank 4"}};
  return spec;
}
LayerSpec average_pooling1d_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::AveragePooling1D(2, {{"data_format", "channels_first"}})); };
  spec.call = LayerCase{{random_input({2, 3, 7}, 4)}};
  spec.output_shapes = {Shape{unknown_batch, 3, 3}};
  spec.bad_inputs = {{"rank 2", {{unknown_batch, 7}}, "expects inputs of rank 3"}};
  return spec;
}
LayerSpec average_pooling2d_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::AveragePooling2D({3, 2}, {{"strides", 1}, {"padding", "same"}})); };
  spec.call = LayerCase{{random_input({2, 4, 5, 2}, 5)}};
  spec.output_shapes = {Shape{unknown_batch, 4, 5, 2}};
  spec.bad_inputs = {{"rank 3", {{unknown_batch, 4, 2}}, "expects inputs of rank 4"}};
  return spec;
}
LayerSpec global_average_pooling2d_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::GlobalAveragePooling2D()); };
  spec.call = LayerCase{{random_input({2, 3, 4, 5}, 6)}};
  spec.output_shapes = {Shape{unknown_batch, 5}};
  spec.bad_inputs = {{"rank 3", {{unknown_batch, 4, 5}}, "needs inputs of shape (batch, height, width, features)"}};
  return spec;
}
LayerSpec global_max_pooling1d_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::GlobalMaxPooling1D("channels_first", {{"keepdims", true}})); };
  spec.call = LayerCase{{random_input({2, 3, 6}, 7)}};
  spec.output_shapes = {Shape{unknown_batch, 3, 1}};
  spec.bad_inputs = {{"rank 4", {{unknown_batch, 3, 6, 2}}, "needs inputs of shape (batch, features, steps)"}};
  return spec;
}
LayerSpec global_max_pooling2d_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::GlobalMaxPooling2D()); };
  spec.call = LayerCase{{random_input({2, 3, 4, 5}, 8)}};
  spec.output_shapes = {Shape{unknown_batch, 5}};
  spec.bad_inputs = {{"rank 3", {{unknown_batch, 4, 5}}, "needs inputs of shape (batch, height, width, features)"}};
  return spec;
}
}  // namespace

KILN_LAYER_HARNESS("kiln>MaxPooling1D", max_pooling1d_spec)
KILN_LAYER_HARNESS("kiln>MaxPooling2D", max_pooling2d_spec)
KILN_LAYER_HARNESS("kiln>AveragePooling1D", average_pooling1d_spec)
KILN_LAYER_HARNESS("kiln>AveragePooling2D", average_pooling2d_spec)
KILN_LAYER_HARNESS("kiln>GlobalAveragePooling2D", global_average_pooling2d_spec)
KILN_LAYER_HARNESS("kiln>GlobalMaxPooling1D", global_max_pooling1d_spec)
KILN_LAYER_HARNESS("kiln>GlobalMaxPooling2D", global_max_pooling2d_spec)

TEST_CASE("Pooling layers: Keras's config keys and defaults", "[layers][pooling][config]") {
  const Config two_d = kiln::MaxPooling2D().get_config();
  CHECK(two_d.at("pool_size") == Config::from_ints({2, 2}));
  CHECK(two_d.at("strides") == Config::from_ints({2, 2}));  // strides=None means pool_size
  CHECK(two_d.get_string("padding") == "valid");
  CHECK(two_d.get_string("data_format") == "channels_last");
  const Config one_d = kiln::AveragePooling1D(3, {{"strides", 1}, {"padding", "SAME"}}).get_config();
  CHECK(one_d.at("pool_size") == Config::from_ints({3}));
  CHECK(one_d.at("strides") == Config::from_ints({1}));
  CHECK(one_d.get_string("padding") == "same");
  const Config global = kiln::GlobalMaxPooling2D("channels_first", {{"keepdims", true}}).get_config();
  CHECK(global.get_string("data_format") == "channels_first");
  CHECK(global.get_bool("keepdims"));
}

TEST_CASE("Pooling layers: values are the windows' maxima and means", "[layers][pooling][values]") {
  // One 1-D sample, one channel: 1 5 2 8 3. Windows of 2, stride 2, "same": [1 5] [2 8] [3].
  const kiln::Array x = kiln::Array::from_vector(std::vector<double>{1, 5, 2, 8, 3}, {1, 5, 1});
  kiln::MaxPooling1D max(2, {{"padding", "same"}});
  kiln::AveragePooling1D mean(2, {{"padding", "same"}});
  CHECK(run_layer(*max, LayerCase{{x}}).at(0).to_vector<double>() == std::vector<double>{5, 8, 3});
  CHECK(run_layer(*mean, LayerCase{{x}}).at(0).to_vector<double>() == std::vector<double>{3, 5, 3});
  kiln::GlobalMaxPooling1D global;
  CHECK(run_layer(*global, LayerCase{{x}}).at(0).to_vector<double>() == std::vector<double>{8});
}

TEST_CASE("Pooling layers: a window of 2^31 with 'same' padding costs what the input holds", "[layers][pooling]") {
  // Every window covers the whole input: each output is the global mean (or maximum), computed from the
  // taps that read the input, not by walking 2^31 padded ones (which took minutes, or never ended).
  constexpr std::int64_t huge = std::int64_t{1} << 31;
  const kiln::Array x = random_input({2, 10, 3}, 6);
  kiln::AveragePooling1D mean(huge, {{"strides", 1}, {"padding", "same"}});
  const kiln::Array y = run_layer(*mean, LayerCase{{x}}).at(0);
  REQUIRE(y.shape() == Shape{2, 10, 3});
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t c = 0; c < 3; ++c) {
      double total = 0;
      for (std::int64_t t = 0; t < 10; ++t) total += x.flat(static_cast<std::size_t>((b * 10 + t) * 3 + c));
      for (std::int64_t t = 0; t < 10; ++t)
        CHECK(y.flat(static_cast<std::size_t>((b * 10 + t) * 3 + c)) == Approx(total / 10).epsilon(1e-12));
    }
  const kiln::Array image = random_input({1, 4, 4, 2}, 7);
  kiln::MaxPooling2D max(std::vector<std::int64_t>{huge, huge}, {{"strides", 1}, {"padding", "same"}});
  const kiln::Array z = run_layer(*max, LayerCase{{image}}).at(0);
  REQUIRE(z.shape() == Shape{1, 4, 4, 2});
  for (std::size_t i = 0; i < z.size(); ++i) {
    double largest = -1e300;
    for (std::size_t j = i % 2; j < image.size(); j += 2) largest = std::max(largest, image.flat(j));
    CHECK(z.flat(i) == largest);
  }
  // A pool whose span would overflow 64 bits with the input's length is refused.
  CHECK_THROWS_WITH(kiln::MaxPooling1D(INT64_MAX, {{"strides", 1}, {"padding", "same"}})(kiln::Input({1, 10, 3})),
                    Catch::Contains("overflows 64 bits"));
}

TEST_CASE("Pooling layers: bad arguments fail early, naming the layer", "[layers][pooling][errors]") {
  CHECK_THROWS_WITH(kiln::MaxPooling2D(0), Catch::Contains("pool_size must be positive"));
  CHECK_THROWS_WITH(kiln::MaxPooling1D(2, {{"strides", 0}}), Catch::Contains("strides must be positive"));
  CHECK_THROWS_WITH(kiln::AveragePooling2D(2, {{"padding", "causal"}}), Catch::Contains("'valid' or 'same'"));
  CHECK_THROWS_WITH(kiln::MaxPooling2D({2, 2, 2}), Catch::Contains("must be an int or a list of 2"));
  CHECK_THROWS_AS(kiln::GlobalMaxPooling2D("channels_middle"), kiln::ConfigError);
  kiln::MaxPooling2D pool(3, {{"name", "p"}});
  CHECK_THROWS_WITH(pool(kiln::Input({Shape::unknown, 2, 8, 1})),
                    Catch::Contains("MaxPooling2D 'p'") && Catch::Contains("larger than the input's (2, 8)"));
}
