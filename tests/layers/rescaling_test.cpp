#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/layers/model.hpp>
#include <kiln/layers/rescaling.hpp>
#include "support/layer_check.hpp"

using kiln::Config;
using kiln::Shape;
using namespace kiln::testing;
using Catch::Contains;

namespace {
constexpr std::int64_t any = Shape::unknown;

LayerSpec rescaling_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::Rescaling(1.0 / 127.5, -1.0)); };
  spec.call = LayerCase{{random_input({2, 4, 3}, 1)}};
  spec.output_shapes = {Shape{any, 4, 3}};
  spec.bad_inputs = {{"two inputs", {{any, 3}, {any, 3}}, "takes 1 inputs, got 2"}};
  return spec;
}
LayerSpec unit_normalization_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::UnitNormalization(Config{{"axis", Config::list({1, 2})}})); };
  spec.call = LayerCase{{random_input({2, 3, 4}, 2)}};
  spec.output_shapes = {Shape{any, 3, 4}};
  spec.bad_inputs = {{"rank 2", {{any, 3}}, "axis 2 is out of range for inputs of rank 2"}};
  return spec;
}
}  // namespace

KILN_LAYER_HARNESS("kiln>Rescaling", rescaling_spec)
KILN_LAYER_HARNESS("kiln>UnitNormalization", unit_normalization_spec)

TEST_CASE("Rescaling: inputs · scale + offset, Keras's config", "[layers][rescaling]") {
  const kiln::Array x = kiln::Array::from_vector(std::vector<double>{0, 127.5, 255}, {1, 3});
  CHECK(run_layer(*kiln::Rescaling(1.0 / 127.5, -1.0), LayerCase{{x}}).at(0).to_vector<double>() ==
        std::vector<double>{-1, 0, 1});
  const Config config = kiln::Rescaling(0.5).get_config();
  CHECK(config.get_double("scale") == 0.5);
  CHECK(config.get_double("offset") == 0.0);
  CHECK_THROWS_WITH(kiln::Rescaling(Config{{"offset", 1.0}}), Contains("'scale' is required"));
  CHECK_THROWS_WITH(kiln::Rescaling(Config{{"scale", Config::list({1.0, 2.0})}}),
                    Contains("per-channel arrays are not supported"));
}

TEST_CASE("UnitNormalization: unit L2 norm along the axis, a zero vector stays zero", "[layers][unit_normalization]") {
  const kiln::Array x = kiln::Array::from_vector(std::vector<double>{3, 4, 0, 0}, {2, 2});
  const std::vector<double> y = run_layer(*kiln::UnitNormalization(), LayerCase{{x}}).at(0).to_vector<double>();
  CHECK(y[0] == Approx(0.6).epsilon(1e-15));
  CHECK(y[1] == Approx(0.8).epsilon(1e-15));
  CHECK(y[2] == 0.0);
  CHECK(y[3] == 0.0);
  CHECK(kiln::UnitNormalization().get_config().get_int("axis") == -1);
  CHECK(kiln::UnitNormalization(Config{{"axis", Config::list({1})}}).get_config().at("axis") == Config::from_ints({1}));
  CHECK_THROWS_AS(kiln::UnitNormalization(Config{{"axis", "last"}}), kiln::ConfigError);
}
