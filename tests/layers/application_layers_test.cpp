// keras.applications' own layers: ConvNeXt's LayerScale and StochasticDepth, InceptionResNetV2's
// CustomScaleLayer (keras/src/applications/convnext.py, inception_resnet_v2.py).
#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/layers/applications/application_layers.hpp>
#include <kiln/layers/model_base.hpp>
#include "support/layer_check.hpp"

using kiln::Array;
using kiln::Config;
using kiln::Shape;
using namespace kiln::testing;
using Catch::Contains;

namespace {
constexpr std::int64_t any = Shape::unknown;

LayerSpec layer_scale_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::LayerScale(0.5, 3)); };
  spec.call = LayerCase{{random_input({2, 4, 4, 3}, 1)}};
  spec.output_shapes = {Shape{any, 4, 4, 3}};
  spec.bad_inputs = {{"4 channels", {{any, 4, 4}}, "projection_dim = 3"}};
  return spec;
}

LayerSpec stochastic_depth_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::StochasticDepth(0.25)); };
  spec.call = LayerCase{{random_input({3, 5, 2}, 2)}};
  spec.output_shapes = {Shape{any, 5, 2}};
  spec.bad_inputs = {{"two inputs", {{any, 3}, {any, 3}}, "takes 1 inputs, got 2"}};
  return spec;
}

LayerSpec custom_scale_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::CustomScaleLayer(0.17)); };
  spec.call = LayerCase{{random_input({2, 3, 4}, 3), random_input({2, 3, 4}, 4)}};
  spec.output_shapes = {Shape{any, 3, 4}};
  spec.bad_inputs = {{"other shapes", {{any, 3, 4}, {any, 3, 5}}, "must have one shape"},
                     {"one input", {{any, 3, 4}}, "takes 2 inputs, got 1"}};
  return spec;
}
}  // namespace

KILN_LAYER_HARNESS("kiln>LayerScale", layer_scale_spec)
KILN_LAYER_HARNESS("kiln>StochasticDepth", stochastic_depth_spec)
KILN_LAYER_HARNESS("kiln>CustomScaleLayer", custom_scale_spec)

TEST_CASE("LayerScale: x · gamma per channel, gamma starting at init_values, Keras's config",
          "[layers][application_layers]") {
  kiln::LayerScale scale(1e-6, 2, {{"name", "ls"}});
  const Array x = Array::from_vector(std::vector<double>{1, 2, 3, 4}, {2, 2});
  const std::vector<double> y = run_layer(*scale, LayerCase{{x}}).at(0).to_vector<double>();
  for (std::size_t i = 0; i < y.size(); ++i) CHECK(y[i] == Approx(1e-6 * (i + 1)).epsilon(1e-12));
  REQUIRE(scale.weights().size() == 1);
  CHECK(scale.weights()[0].value.shape() == Shape{2});
  CHECK(scale.weights()[0].trainable);
  const Config config = scale.get_config();
  CHECK(config.get_double("init_values") == 1e-6);
  CHECK(config.get_int("projection_dim") == 2);
  CHECK_THROWS_WITH(kiln::LayerScale(Config{{"projection_dim", 2}}), Contains("'init_values' is required"));
  CHECK_THROWS_WITH(kiln::LayerScale(0.1, 0), Contains("projection_dim must be at least 1"));
}

TEST_CASE("StochasticDepth: the input in inference, whole samples dropped and rescaled in training",
          "[layers][application_layers]") {
  kiln::StochasticDepth depth(0.5, {{"name", "drop_path"}});
  const Array x = random_input({400, 3, 2}, 5, 0.5, 1.5);  // never zero: a zero means dropped
  CHECK(run_layer(*depth, LayerCase{{x}}).at(0).bitwise_equal(x));
  LayerCase training{{x}};
  training.training = true;
  const Array y = run_layer(*depth, training).at(0);
  std::size_t dropped = 0;
  for (std::int64_t sample = 0; sample < 400; ++sample) {
    const bool zero = y.flat(static_cast<std::size_t>(sample * 6)) == 0.0;
    dropped += zero ? 1 : 0;
    for (std::size_t i = 0; i < 6; ++i) {
      const std::size_t at = static_cast<std::size_t>(sample * 6) + i;
      // A sample is dropped whole, or kept whole and scaled by 1 / (1 - rate).
      REQUIRE(y.flat(at) == Approx(zero ? 0.0 : 2.0 * x.flat(at)).epsilon(1e-12));
    }
  }
  CHECK(dropped > 150);
  CHECK(dropped < 250);
  CHECK(depth.get_config().get_double("drop_path_rate") == 0.5);
  CHECK_THROWS_WITH(kiln::StochasticDepth(1.0), Contains("drop_path_rate must be in [0, 1)"));
}

TEST_CASE("CustomScaleLayer: inputs[0] + inputs[1] · scale", "[layers][application_layers]") {
  kiln::CustomScaleLayer layer(0.2);
  const Array a = Array::from_vector(std::vector<double>{1, 2, 3}, {1, 3});
  const Array b = Array::from_vector(std::vector<double>{10, 20, 30}, {1, 3});
  const std::vector<double> y = run_layer(*layer, LayerCase{{a, b}}).at(0).to_vector<double>();
  REQUIRE(y.size() == 3);
  for (std::size_t i = 0; i < 3; ++i) CHECK(y[i] == Approx(3.0 * (i + 1)).epsilon(1e-15));
  CHECK(layer.get_config().get_double("scale") == 0.2);
}
