#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/program.hpp>
#include <kiln/layers/dropout.hpp>
#include <kiln/layers/model.hpp>
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
  CHECK_THROWS_WITH(kiln::Dropout(0.5, {{"noise_shape", Config::from_ints({1, 5})}}), Catch::Contains("noise_shape"));
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
