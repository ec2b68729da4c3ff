#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/layers/regularization/noise.hpp>
#include "support/layer_check.hpp"

using kiln::Array;
using kiln::Config;
using kiln::Shape;
using namespace kiln::testing;
using Catch::Contains;

namespace {
constexpr std::int64_t any = Shape::unknown;

LayerCase training_case(const Array& x) {
  LayerCase c{{x}};
  c.training = true;
  return c;
}

// The mean and variance of the elements of a.
std::pair<double, double> moments(const Array& a) {
  double sum = 0, squares = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    sum += a.flat(i);
    squares += a.flat(i) * a.flat(i);
  }
  const double n = static_cast<double>(a.size()), mean = sum / n;
  return {mean, squares / n - mean * mean};
}

LayerSpec gaussian_noise_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::GaussianNoise(0.2, {{"seed", 3}})); };
  spec.call = LayerCase{{random_input({2, 4, 3}, 1)}};
  spec.output_shapes = {Shape{any, 4, 3}};
  spec.bad_inputs = {{"two inputs", {{any, 3}, {any, 3}}, "takes 1 inputs, got 2"}};
  return spec;
}

LayerSpec gaussian_dropout_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::GaussianDropout(0.3)); };
  spec.call = LayerCase{{random_input({2, 5}, 2)}};
  spec.output_shapes = {Shape{any, 5}};
  spec.bad_inputs = {{"two inputs", {{any, 5}, {any, 5}}, "takes 1 inputs, got 2"}};
  return spec;
}
}  // namespace

KILN_LAYER_HARNESS("kiln>GaussianNoise", gaussian_noise_spec)
KILN_LAYER_HARNESS("kiln>GaussianDropout", gaussian_dropout_spec)

TEST_CASE("GaussianNoise adds N(0, stddev²) while training and nothing at inference", "[layers][noise]") {
  const Array x = Array::full({200, 100}, 3.0, kiln::DType::float64);
  kiln::GaussianNoise noise(0.5);
  const Array y = run_layer(*noise, training_case(x)).at(0);
  const auto [mean, variance] = moments(y);
  // 20,000 draws: standard errors 0.0035 (mean) and 0.0025 (variance).
  CHECK(std::abs(mean - 3.0) < 0.015);
  CHECK(std::abs(variance - 0.25) < 0.012);
  CHECK(run_layer(*noise, LayerCase{{x}}).at(0).bitwise_equal(x));
  // The noise does not depend on x: the input gradient is 1 everywhere.
  const GradcheckReport report = gradcheck_layer(*noise, training_case(random_input({3, 4}, 3)));
  INFO(report.worst_entry());
  CHECK(report.max_relative_error <= 1e-6);
}

TEST_CASE("GaussianDropout multiplies by N(1, rate / (1 - rate)) while training", "[layers][noise]") {
  const Array x = Array::full({200, 100}, 2.0, kiln::DType::float64);
  kiln::GaussianDropout dropout(0.2);
  const Array y = run_layer(*dropout, training_case(x)).at(0);
  const auto [mean, variance] = moments(y);
  // y / 2 has variance 0.25: y has 1.0; standard errors 0.014 (mean) and 0.01 (variance).
  CHECK(std::abs(mean - 2.0) < 0.06);
  CHECK(std::abs(variance - 1.0) < 0.05);
  CHECK(run_layer(*dropout, LayerCase{{x}}).at(0).bitwise_equal(x));
  const GradcheckReport report = gradcheck_layer(*dropout, training_case(random_input({3, 4}, 4)));
  INFO(report.worst_entry());
  CHECK(report.max_relative_error <= 1e-6);
}

TEST_CASE("GaussianNoise and GaussianDropout: Keras's config, bad arguments", "[layers][noise][errors]") {
  const Config noise = kiln::GaussianNoise(0.1, {{"seed", 7}}).get_config();
  CHECK(noise.get_double("stddev") == 0.1);
  CHECK(noise.get_int("seed") == 7);
  const Config dropout = kiln::GaussianDropout(0.4).get_config();
  CHECK(dropout.get_double("rate") == 0.4);
  CHECK(dropout.at("seed").is_null());
  CHECK_THROWS_AS(kiln::GaussianNoise(1.5), kiln::ConfigError);
  CHECK_THROWS_WITH(kiln::GaussianNoise(-0.1), Contains("GaussianNoise") && Contains("stddev must be in [0, 1]"));
  CHECK_THROWS_WITH(kiln::GaussianDropout(1.0), Contains("rate must be in [0, 1)"));
  CHECK_THROWS_WITH(kiln::GaussianNoise(Config::map()), Contains("'stddev' is required"));
  CHECK_THROWS_WITH(kiln::GaussianDropout(Config{{"rate", 0.1}, {"noise_shape", Config()}}),
                    Contains("unknown argument 'noise_shape'"));
}
