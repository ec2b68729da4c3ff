#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/layers/model_base.hpp>
#include <kiln/layers/normalization/unit_normalization.hpp>
#include <kiln/layers/preprocessing/rescaling.hpp>
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
  CHECK_THROWS_WITH(kiln::Rescaling(Config{{"scale", "half"}}), Contains("scale") && Contains("Rescaling"));
  CHECK_THROWS_WITH(kiln::Rescaling(Config{{"scale", Config{{1.0, 2.0}, {3.0}}}}), Contains("of one shape"));
}

TEST_CASE("Rescaling per channel: scale and offset broadcast over the last axes as NumPy does",
          "[layers][rescaling]") {
  // EfficientNet's ImageNet preprocessing: Rescaling([1/sqrt(var) per channel]) on (batch, h, w, 3).
  const kiln::Array x = random_input({2, 2, 2, 3}, 5);
  const std::vector<double> scale{0.5, 2.0, -1.0}, offset{1.0, 0.0, -3.0};
  const kiln::Array y = run_layer(*kiln::Rescaling(scale, offset), LayerCase{{x}}).at(0);
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(y.flat(i) == x.flat(i) * scale[i % 3] + offset[i % 3]);
  // One offset for every channel; Keras's serialized numpy array; nested lists over the last two axes.
  const kiln::Array z = run_layer(*kiln::Rescaling(scale, {0.25}), LayerCase{{x}}).at(0);
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(z.flat(i) == x.flat(i) * scale[i % 3] + 0.25);
  const Config numpy{{"class_name", "__numpy__"}, {"config", {{"value", {0.5, 2.0, -1.0}}, {"dtype", "float32"}}}};
  const kiln::Array n = run_layer(*kiln::Rescaling(Config{{"scale", numpy}}), LayerCase{{x}}).at(0);
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(n.flat(i) == x.flat(i) * scale[i % 3]);
  const Config rows{{1.0, 2.0, 3.0}, {4.0, 5.0, 6.0}};
  const kiln::Array r = run_layer(*kiln::Rescaling(Config{{"scale", rows}}), LayerCase{{x}}).at(0);
  for (std::size_t i = 0; i < x.size(); ++i) CHECK(r.flat(i) == x.flat(i) * static_cast<double>(i % 6 + 1));
  // The config is written back as given, and reads back to the same layer.
  CHECK(kiln::Rescaling(Config{{"scale", numpy}}).get_config().at("scale") == numpy);
  CHECK(kiln::Rescaling(scale, offset).get_config().at("offset") == Config(offset));
  // Four channels' scale on a three-channel image changes its shape: refused, naming the layer and shapes.
  kiln::Tensor image = kiln::Input({any, 2, 2, 3});
  CHECK_THROWS_AS(kiln::Rescaling({1.0, 2.0, 3.0, 4.0}, {0.0})(image), kiln::ShapeError);
  CHECK_THROWS_WITH(kiln::Rescaling({1.0, 2.0, 3.0, 4.0}, {0.0})(image),
                    Contains("scale of shape (4,)") && Contains("(None, 2, 2, 3)"));
}

LayerSpec per_channel_rescaling_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::Rescaling({0.5, 2.0, -1.0}, {1.0, 0.0, -3.0})); };
  spec.call = LayerCase{{random_input({2, 4, 3}, 3)}};
  spec.output_shapes = {Shape{any, 4, 3}};
  spec.bad_inputs = {{"two channels", {{any, 4, 2}}, "does not broadcast"}};
  return spec;
}
TEST_CASE("Rescaling per channel: the layer harness (shapes, gradients, config, file, bad input)",
          "[layers][rescaling]") {
  check_layer(per_channel_rescaling_spec());
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
