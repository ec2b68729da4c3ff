#include <catch2/catch.hpp>

#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/layers/model_base.hpp>
#include <kiln/layers/reshaping/reshaping.hpp>
#include "support/layer_check.hpp"

using kiln::Array;
using kiln::Config;
using kiln::Shape;
using namespace kiln::testing;

// ---- Reshape ----------------------------------------------------------------------------------------

TEST_CASE("Reshape: output shapes keep an unknown batch and infer -1", "[layers][reshape]") {
  kiln::Reshape to_matrix({3, 4});
  CHECK(symbolic_output_shapes(*to_matrix, LayerCase{{random_input({2, 12}, 1)}}) ==
        std::vector<Shape>{Shape{Shape::unknown, 3, 4}});
  kiln::Reshape inferred({-1, 2});
  CHECK(symbolic_output_shapes(*inferred, LayerCase{{random_input({2, 3, 4}, 2)}}) ==
        std::vector<Shape>{Shape{Shape::unknown, 6, 2}});
  kiln::Reshape flat({-1});
  CHECK(symbolic_output_shapes(*flat, LayerCase{{random_input({5, 2, 3, 2}, 3)}}) ==
        std::vector<Shape>{Shape{Shape::unknown, 12}});
  CHECK(to_matrix.weights().empty());
}

TEST_CASE("Reshape: gradients match central differences", "[layers][reshape][grad]") {
  kiln::Reshape reshape({2, -1, 3});
  const GradcheckReport report = gradcheck_layer(*reshape, LayerCase{{random_input({3, 4, 3}, 4)}});
  INFO(report.worst_entry());
  CHECK(report.num_checked == 36);
  CHECK(report.max_relative_error <= 1e-6);
}

TEST_CASE("Reshape: config round trip keeps target_shape", "[layers][reshape][config]") {
  kiln::Reshape reshape({4, -1}, {{"name", "fold"}});
  check_config_round_trip(reshape, LayerCase{{random_input({2, 2, 6}, 5)}});
  const Config config = reshape.get_config();
  CHECK(config.at("target_shape") == Config::from_ints({4, -1}));
  CHECK(config.get_string("name") == "fold");
  CHECK(kiln::create_layer("Reshape", {{"target_shape", Config::from_ints({3})}})->class_name() == "Reshape");
}

TEST_CASE("Reshape: values keep row-major order", "[layers][reshape][values]") {
  const Array x = random_input({2, 3, 4}, 6);
  kiln::Reshape reshape({4, 3});
  const Array y = run_layer(*reshape, LayerCase{{x}})[0];
  REQUIRE(y.shape() == Shape{2, 4, 3});
  // Sample b, row i, column j of the target is element b * 12 + i * 3 + j of the row-major input.
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t i = 0; i < 4; ++i)
      for (std::size_t j = 0; j < 3; ++j) CHECK(y.flat(b * 12 + i * 3 + j) == x.flat(b * 12 + i * 3 + j));
}

TEST_CASE("Reshape: element count mismatches and bad targets fail, naming the layer", "[layers][reshape][errors]") {
  kiln::Reshape reshape({5});
  const kiln::Tensor x = kiln::Input({Shape::unknown, 12});
  CHECK_THROWS_AS(reshape(x), kiln::ShapeError);
  CHECK_THROWS_WITH(reshape(x),
                    Catch::Contains("Reshape 'reshape'") && Catch::Contains("(None, 12)") && Catch::Contains("[5]"));
  kiln::Reshape uneven({7, -1}, {{"name", "uneven"}});
  CHECK_THROWS_AS(uneven(x), kiln::ShapeError);
  CHECK_THROWS_WITH(uneven(x), Catch::Contains("Reshape 'uneven'") && Catch::Contains("do not divide"));

  kiln::Reshape fits({3, 4}, {{"name", "fits"}});
  fits(x);
  const kiln::Tensor other = kiln::Input({Shape::unknown, 10});
  CHECK_THROWS_AS(fits(other), kiln::ShapeError);
  CHECK_THROWS_WITH(fits(other), Catch::Contains("Reshape 'fits'") && Catch::Contains("(None, 10)"));

  CHECK_THROWS_AS(kiln::Reshape({-1, -1}), kiln::ConfigError);
  CHECK_THROWS_WITH(kiln::Reshape({-1, -1}), Catch::Contains("at most one -1"));
  CHECK_THROWS_AS(kiln::Reshape({0, 3}), kiln::ConfigError);
  CHECK_THROWS_AS(kiln::Reshape({-2}), kiln::ConfigError);
  CHECK_THROWS_WITH(kiln::Reshape(Config::map()), Catch::Contains("'target_shape' is required"));
}

// ---- Flatten ----------------------------------------------------------------------------------------

TEST_CASE("Flatten: output shapes are (batch, product of the rest)", "[layers][flatten]") {
  kiln::Flatten flatten;
  CHECK(symbolic_output_shapes(*flatten, LayerCase{{random_input({4, 3, 5}, 1)}}) ==
        std::vector<Shape>{Shape{Shape::unknown, 15}});
  kiln::Flatten rank4;
  CHECK(symbolic_output_shapes(*rank4, LayerCase{{random_input({2, 2, 3, 5}, 2)}}) ==
        std::vector<Shape>{Shape{Shape::unknown, 30}});
  kiln::Flatten vector;  // Keras gives a batch of scalars one column
  CHECK(symbolic_output_shapes(*vector, LayerCase{{random_input({4}, 3)}}) ==
        std::vector<Shape>{Shape{Shape::unknown, 1}});
  kiln::Flatten channels_first("channels_first");
  CHECK(symbolic_output_shapes(*channels_first, LayerCase{{random_input({4, 3, 5}, 1)}}) ==
        std::vector<Shape>{Shape{Shape::unknown, 15}});
}

TEST_CASE("Flatten: gradients match central differences", "[layers][flatten][grad]") {
  for (const char* data_format : {"channels_last", "channels_first"}) {
    kiln::Flatten flatten(data_format);
    const GradcheckReport report = gradcheck_layer(*flatten, LayerCase{{random_input({3, 2, 3, 4}, 4)}});
    INFO(data_format << ": " << report.worst_entry());
    CHECK(report.num_checked == 72);
    CHECK(report.max_relative_error <= 1e-6);
  }
}

TEST_CASE("Flatten: config round trip keeps data_format", "[layers][flatten][config]") {
  kiln::Flatten flatten("channels_first", {{"name", "flat"}});
  check_config_round_trip(flatten, LayerCase{{random_input({2, 3, 4}, 5)}});
  CHECK(flatten.get_config().get_string("data_format") == "channels_first");
  CHECK(flatten.get_config().get_string("name") == "flat");
  // Keras writes None for the default; it reads back as channels_last.
  CHECK(kiln::Flatten(Config{{"data_format", nullptr}}).get_config().get_string("data_format") == "channels_last");
}

TEST_CASE("Flatten: values follow row-major order, channels moved last for channels_first",
          "[layers][flatten][values]") {
  const Array x = random_input({2, 3, 4}, 6);
  kiln::Flatten last;
  CHECK(run_layer(*last, LayerCase{{x}})[0].bitwise_equal(x.reshape(Shape{2, 12})));
  kiln::Flatten first("channels_first");
  const Array y = run_layer(*first, LayerCase{{x}})[0];
  REQUIRE(y.shape() == Shape{2, 12});
  // x is (batch, channels = 3, steps = 4); channels-last order puts step s, channel c at s * 3 + c.
  for (std::size_t b = 0; b < 2; ++b)
    for (std::size_t c = 0; c < 3; ++c)
      for (std::size_t s = 0; s < 4; ++s) CHECK(y.flat(b * 12 + s * 3 + c) == x.flat(b * 12 + c * 4 + s));
}

TEST_CASE("Flatten: unknown non-batch dimensions fail, naming the layer", "[layers][flatten][errors]") {
  kiln::Flatten flatten;
  const kiln::Tensor x = kiln::Input({Shape::unknown, Shape::unknown, 3});
  CHECK_THROWS_AS(flatten(x), kiln::ShapeError);
  CHECK_THROWS_WITH(flatten(x), Catch::Contains("Flatten 'flatten'") && Catch::Contains("(None, None, 3)"));
  CHECK_THROWS_AS(kiln::Flatten("nchw"), kiln::ConfigError);
  CHECK_THROWS_WITH(kiln::Flatten("nchw"), Catch::Contains("data_format"));
}

// ---- the layer harness ---------------------------------------------------------------------------------

namespace {
LayerSpec flatten_spec() {
  constexpr std::int64_t any = Shape::unknown;
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::Flatten()); };
  spec.call = LayerCase{{random_input({2, 3, 4}, 1)}};
  spec.output_shapes = {Shape{any, 12}};
  spec.bad_inputs = {{"an unknown sample size", {{any, any, 4}}, "needs every dimension but the batch to be known"}};
  return spec;
}

LayerSpec reshape_spec() {
  constexpr std::int64_t any = Shape::unknown;
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::Reshape({6, 2})); };
  spec.call = LayerCase{{random_input({2, 3, 4}, 1)}};
  spec.output_shapes = {Shape{any, 6, 2}};
  spec.bad_inputs = {{"another sample size", {{any, 5, 2}}, "elements per sample, the target has"}};
  return spec;
}
}  // namespace

KILN_LAYER_HARNESS("kiln>Flatten", flatten_spec)
KILN_LAYER_HARNESS("kiln>Reshape", reshape_spec)

// ---- Permute and RepeatVector ---------------------------------------------------------------------------

namespace {
LayerSpec permute_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::Permute({3, 1, 2})); };
  spec.call = LayerCase{{random_input({2, 3, 4, 5}, 4)}};
  spec.output_shapes = {Shape{Shape::unknown, 5, 3, 4}};
  spec.bad_inputs = {{"rank 3", {{Shape::unknown, 3, 4}}, "needs inputs of rank 4"}};
  return spec;
}
LayerSpec repeat_vector_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::RepeatVector(3)); };
  spec.call = LayerCase{{random_input({2, 4}, 5)}};
  spec.output_shapes = {Shape{Shape::unknown, 3, 4}};
  spec.bad_inputs = {{"rank 3", {{Shape::unknown, 2, 4}}, "needs inputs of shape (batch, features)"}};
  return spec;
}
}  // namespace

KILN_LAYER_HARNESS("kiln>Permute", permute_spec)
KILN_LAYER_HARNESS("kiln>RepeatVector", repeat_vector_spec)

TEST_CASE("Permute and RepeatVector: values, Keras's config, bad arguments", "[layers][reshaping]") {
  const kiln::Array x = kiln::Array::from_vector(std::vector<double>{1, 2, 3, 4, 5, 6}, {1, 2, 3});
  CHECK(run_layer(*kiln::Permute({2, 1}), LayerCase{{x}}).at(0).to_vector<double>() ==
        std::vector<double>{1, 4, 2, 5, 3, 6});
  const kiln::Array v = kiln::Array::from_vector(std::vector<double>{7, 8}, {1, 2});
  CHECK(run_layer(*kiln::RepeatVector(3), LayerCase{{v}}).at(0).to_vector<double>() ==
        std::vector<double>{7, 8, 7, 8, 7, 8});
  CHECK(kiln::Permute({2, 1}).get_config().at("dims") == Config::from_ints({2, 1}));
  CHECK(kiln::RepeatVector(4).get_config().get_int("n") == 4);
  CHECK_THROWS_WITH(kiln::Permute({0, 1}), Catch::Contains("dims must be a permutation of 1..2"));
  CHECK_THROWS_WITH(kiln::Permute({1, 1}), Catch::Contains("permutation"));
  CHECK_THROWS_WITH(kiln::RepeatVector(0), Catch::Contains("n must be positive"));
}
