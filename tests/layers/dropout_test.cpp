#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/program.hpp>
#include <kiln/layers/regularization/dropout.hpp>
#include <kiln/layers/model_base.hpp>
#include <kiln/ops/ops.hpp>
#include "support/layer_check.hpp"

using kiln::Array;
using kiln::Config;
using kiln::Shape;
using namespace kiln::testing;

namespace {

LayerCase training_case(const Array& x) {
  LayerCase c{{x}};
  c.training = true;
  return c;
}

std::size_t count_zeros(const Array& a) {
  std::size_t zeros = 0;
  for (std::size_t i = 0; i < a.size(); ++i) zeros += a.flat(i) == 0.0 ? 1 : 0;
  return zeros;
}

}  // namespace

TEST_CASE("Dropout: output shapes equal the input shapes in training and inference", "[layers][dropout]") {
  kiln::Dropout dropout(0.5);
  const Array x = random_input({4, 3, 7}, 1);
  CHECK(symbolic_output_shapes(*dropout, LayerCase{{x}}) == std::vector<Shape>{Shape{Shape::unknown, 3, 7}});
  CHECK(symbolic_output_shapes(*dropout, training_case(x)) == std::vector<Shape>{Shape{Shape::unknown, 3, 7}});
  CHECK(dropout.weights().empty());
}

TEST_CASE("Dropout: gradients in training mode match central differences", "[layers][dropout][grad]") {
  for (const double rate : {0.2, 0.5}) {
    kiln::Dropout dropout(rate);
    const LayerCase c = training_case(random_input({3, 4, 5}, 2));
    REQUIRE(count_zeros(run_layer(*dropout, c)[0]) > 0);  // the mask is really there
    const GradcheckReport report = gradcheck_layer(*dropout, c);
    INFO("rate " << rate << ": " << report.worst_entry());
    CHECK(report.num_checked == 60);
    CHECK(report.max_relative_error <= 1e-6);
  }
}

TEST_CASE("Dropout: config round trip keeps rate, seed and the mask", "[layers][dropout][config]") {
  kiln::Dropout seeded(0.3, {{"seed", 17}, {"name", "drop"}});
  check_config_round_trip(seeded, training_case(random_input({5, 8}, 3)));
  const Config config = seeded.get_config();
  CHECK(config.get_double("rate") == 0.3);
  CHECK(config.get_int("seed") == 17);
  CHECK(config.at("noise_shape").is_null());
  CHECK(config.get_string("name") == "drop");
  // Without a seed the mask is keyed by the name, which the config carries too.
  kiln::Dropout unseeded(0.3);
  check_config_round_trip(unseeded, training_case(random_input({5, 8}, 3)));
  CHECK(unseeded.get_config().at("seed").is_null());
}

TEST_CASE("Dropout: identity in inference, inverted dropout in training", "[layers][dropout][values]") {
  const double rate = 0.25;
  kiln::Dropout dropout(rate);
  const Array x = random_input({200, 50}, 4, 0.5, 1.5);  // never zero, so a zero means dropped
  CHECK(run_layer(*dropout, LayerCase{{x}})[0].bitwise_equal(x));

  const Array y = run_layer(*dropout, training_case(x))[0];
  std::size_t kept = 0;
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    if (y.flat(i) == 0.0) continue;
    ++kept;
    worst = std::max(worst, std::fabs(y.flat(i) - x.flat(i) / (1.0 - rate)));
  }
  const double kept_fraction = static_cast<double>(kept) / static_cast<double>(x.size());
  INFO("kept fraction " << kept_fraction);
  CHECK(std::fabs(kept_fraction - (1.0 - rate)) < 0.02);  // 10000 draws: about 4.6 standard deviations
  CHECK(worst <= 1e-15);
}

TEST_CASE("Dropout: masks follow the seed, or else the layer's name", "[layers][dropout][seed]") {
  const LayerCase c = training_case(random_input({20, 30}, 5, 0.5, 1.5));
  kiln::Dropout a(0.5, {{"seed", 3}}), b(0.5, {{"seed", 3}}), other_seed(0.5, {{"seed", 4}});
  const Array from_a = run_layer(*a, c)[0];
  CHECK(from_a.bitwise_equal(run_layer(*a, c)[0]));  // the same step gives the same mask
  CHECK(from_a.bitwise_equal(run_layer(*b, c)[0]));
  CHECK_FALSE(from_a.bitwise_equal(run_layer(*other_seed, c)[0]));
  kiln::Dropout first(0.5, {{"name", "first"}}), first_again(0.5, {{"name", "first"}}),
      second(0.5, {{"name", "second"}});
  const Array from_first = run_layer(*first, c)[0];
  CHECK(from_first.bitwise_equal(run_layer(*first_again, c)[0]));
  CHECK_FALSE(from_first.bitwise_equal(run_layer(*second, c)[0]));
}

TEST_CASE("Dropout: a mask depends on the layer's own calls, not on what else the graph holds",
          "[layers][dropout][seed]") {
  const Array input = random_input({6, 10}, 7, 0.5, 1.5);
  auto masks = [&](bool other_ops_first) {
    kiln::Graph graph;
    const kiln::Tensor x = graph.placeholder({Shape::unknown, 10}, input.dtype(), "x");
    if (other_ops_first) {  // as another layer called earlier would add
      kiln::Tensor other = x;
      for (int i = 0; i < 5; ++i) other = kiln::ops::square(other);
    }
    kiln::Dropout dropout(0.5, {{"seed", 3}});
    const std::vector<kiln::Tensor> outputs = {dropout(x, kiln::CallArgs().training(true)),
                                               dropout(x, kiln::CallArgs().training(true))};
    kiln::Program program(graph, outputs);
    program.feed(x, input);
    program.run();
    return std::vector<Array>{program.fetch(outputs[0]), program.fetch(outputs[1])};
  };
  const std::vector<Array> alone = masks(false), after_other_ops = masks(true);
  CHECK(alone[0].bitwise_equal(after_other_ops[0]));
  CHECK(alone[1].bitwise_equal(after_other_ops[1]));
  CHECK_FALSE(alone[0].bitwise_equal(alone[1]));  // a second call of the layer draws another mask
}

TEST_CASE("Dropout: bad rates and noise_shape fail early", "[layers][dropout][errors]") {
  CHECK_THROWS_AS(kiln::Dropout(1.0), kiln::ConfigError);
  CHECK_THROWS_WITH(kiln::Dropout(1.0), Catch::Contains("Dropout") && Catch::Contains("[0, 1)"));
  CHECK_THROWS_AS(kiln::Dropout(-0.1), kiln::ConfigError);
  CHECK_THROWS_WITH(kiln::Dropout(0.5, {{"noise_shape", "batch"}}), Catch::Contains("noise_shape must be a list"));
  CHECK_THROWS_AS(kiln::Dropout(0.5, {{"noise_shape", Config::list({Config(), "all"})}}), kiln::ConfigError);
  CHECK_THROWS_WITH(kiln::Dropout(Config::map()), Catch::Contains("'rate' is required"));
  CHECK_THROWS_WITH(kiln::Dropout(Config{{"rate", 0.5}, {"sed", 1}}), Catch::Contains("unknown argument 'sed'"));
  CHECK_THROWS_AS(kiln::Dropout(Config{{"rate", "half"}}), kiln::ConfigError);
}

// ---- the layer harness (inference: the identity) ------------------------------------------------------------

namespace {
LayerSpec dropout_spec() {
  constexpr std::int64_t any = Shape::unknown;
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::Dropout(0.3, {{"seed", 5}})); };
  spec.call = LayerCase{{random_input({2, 4, 3}, 2)}};
  spec.output_shapes = {Shape{any, 4, 3}};
  spec.bad_inputs = {{"two inputs", {{any, 3}, {any, 3}}, "takes 1 inputs, got 2"}};
  return spec;
}
}  // namespace

KILN_LAYER_HARNESS("kiln>Dropout", dropout_spec)

// ---- noise_shape and the spatial dropouts ------------------------------------------------------------------

namespace {
constexpr std::int64_t any = Shape::unknown;

// Whether every value of x · mask along `axis` of a (d0, d1, d2) array of ones is one value: the draw
// is shared along that axis.
bool shared_along(const Array& y, int axis) {
  const Shape& s = y.shape();
  for (std::int64_t i = 0; i < s[0]; ++i)
    for (std::int64_t j = 0; j < s[1]; ++j)
      for (std::int64_t k = 0; k < s[2]; ++k) {
        std::int64_t first[3] = {i, j, k};
        first[axis] = 0;
        if (y.flat(static_cast<std::size_t>((i * s[1] + j) * s[2] + k)) !=
            y.flat(static_cast<std::size_t>((first[0] * s[1] + first[1]) * s[2] + first[2])))
          return false;
      }
  return true;
}

LayerSpec spatial_dropout1d_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::SpatialDropout1D(0.4, {{"seed", 3}})); };
  spec.call = LayerCase{{random_input({2, 5, 3}, 4)}};
  spec.output_shapes = {Shape{any, 5, 3}};
  spec.bad_inputs = {{"rank 2", {{any, 3}}, "needs inputs of rank 3 (batch, steps, channels), got rank 2"}};
  return spec;
}

LayerSpec spatial_dropout2d_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::SpatialDropout2D(0.4, {{"data_format", "channels_first"}})); };
  spec.call = LayerCase{{random_input({2, 3, 4, 2}, 5)}};
  spec.output_shapes = {Shape{any, 3, 4, 2}};
  spec.bad_inputs = {{"rank 3", {{any, 4, 3}}, "needs inputs of rank 4"}};
  return spec;
}
}  // namespace

KILN_LAYER_HARNESS("kiln>SpatialDropout1D", spatial_dropout1d_spec)
KILN_LAYER_HARNESS("kiln>SpatialDropout2D", spatial_dropout2d_spec)

TEST_CASE("Dropout with a noise_shape shares one draw along its 1 entries", "[layers][dropout]") {
  const Array ones = Array::full({6, 20, 8}, 1.0, kiln::DType::float64);
  kiln::Dropout dropout(0.5, {{"noise_shape", Config::list({Config(), 1, 8})}, {"seed", 2}});
  const Array y = run_layer(*dropout, training_case(ones)).at(0);
  REQUIRE(count_zeros(y) > 0);
  CHECK(shared_along(y, 1));
  CHECK_FALSE(shared_along(y, 2));
  CHECK(dropout.get_config().at("noise_shape") == Config::list({Config(), 1, 8}));
  const GradcheckReport report = gradcheck_layer(*dropout, training_case(random_input({2, 3, 8}, 6)));
  INFO(report.worst_entry());
  CHECK(report.max_relative_error <= 1e-6);
  // A noise shape that does not fit the input is refused when the layer is called.
  const kiln::Tensor wrong = kiln::Input({any, 20, 7});
  CHECK_THROWS_AS(kiln::Dropout(0.5, {{"noise_shape", Config::list({Config(), 1, 8})}})(wrong), kiln::ShapeError);
  CHECK_THROWS_WITH(kiln::Dropout(0.5, {{"noise_shape", Config::list({Config(), 1, 8})}})(wrong),
                    Catch::Contains("Dropout") && Catch::Contains("does not broadcast to the input on axis 2"));
  CHECK_THROWS_WITH(kiln::Dropout(0.5, {{"noise_shape", Config::list({Config(), 1})}})(wrong),
                    Catch::Contains("has 2 entries for an input of rank 3"));
}

TEST_CASE("SpatialDropout1D and 2D drop whole channels, Keras's config keys", "[layers][dropout]") {
  const Array ones = Array::full({6, 20, 8}, 1.0, kiln::DType::float64);
  const Array y = run_layer(*kiln::SpatialDropout1D(0.5), training_case(ones)).at(0);
  REQUIRE(count_zeros(y) > 0);
  CHECK(shared_along(y, 1));
  CHECK_FALSE(shared_along(y, 2));
  CHECK(run_layer(*kiln::SpatialDropout1D(0.5), LayerCase{{ones}}).at(0).bitwise_equal(ones));  // inference

  // channels_last (6, 5, 4, 8): viewed as (6, 20, 8), each sample's channel is one draw over 5×4 positions.
  const Array images = Array::full({6, 5, 4, 8}, 1.0, kiln::DType::float64);
  const Array last = run_layer(*kiln::SpatialDropout2D(0.5), training_case(images)).at(0).reshape({6, 20, 8});
  CHECK(shared_along(last, 1));
  CHECK_FALSE(shared_along(last, 2));
  // channels_first (6, 8, 5, 4): viewed as (48, 20, 1), each (sample, channel) row is one draw.
  const Array first = run_layer(*kiln::SpatialDropout2D(0.5, {{"data_format", "channels_first"}}),
                                training_case(Array::full({6, 8, 5, 4}, 1.0, kiln::DType::float64)))
                          .at(0)
                          .reshape({48, 20, 1});
  CHECK(shared_along(first, 1));
  CHECK_FALSE(shared_along(first.reshape({1, 48, 20}), 1));

  const Config one = kiln::SpatialDropout1D(0.3, {{"seed", 4}}).get_config();
  CHECK(one.get_double("rate") == 0.3);
  CHECK(one.get_int("seed") == 4);
  CHECK_FALSE(one.contains("trainable"));  // Keras's spatial dropouts take rate, seed, name and dtype only
  CHECK_FALSE(one.contains("noise_shape"));
  CHECK(kiln::SpatialDropout2D(0.3).get_config().get_string("data_format") == "channels_last");
  CHECK_THROWS_WITH(kiln::SpatialDropout1D(Config{{"rate", 0.2}, {"noise_shape", Config::list({1})}}),
                    Catch::Contains("'noise_shape' is not supported"));
  CHECK_NOTHROW(kiln::SpatialDropout1D(Config{{"rate", 0.2}, {"noise_shape", Config()}}));  // as tf.keras wrote it
  CHECK_THROWS_WITH(kiln::SpatialDropout2D(0.2, {{"data_format", "nhwc"}}), Catch::Contains("data_format must be"));
  CHECK_THROWS_WITH(kiln::SpatialDropout1D(1.5), Catch::Contains("rate must be in [0, 1)"));
}
