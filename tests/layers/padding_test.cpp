#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/layers/model_base.hpp>
#include <kiln/layers/reshaping/padding.hpp>
#include "support/layer_check.hpp"

using kiln::Array;
using kiln::Config;
using kiln::Shape;
using namespace kiln::testing;
using Catch::Contains;

namespace {
constexpr std::int64_t any = Shape::unknown;

std::vector<double> values_of(kiln::Layer& layer, const Array& x) {
  return run_layer(layer, LayerCase{{x}}).at(0).to_vector<double>();
}

LayerSpec zero_padding1d_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::ZeroPadding1D(Config{{"padding", Config::list({2, 1})}})); };
  spec.call = LayerCase{{random_input({2, 4, 3}, 1)}};
  spec.output_shapes = {Shape{any, 7, 3}};
  spec.bad_inputs = {{"rank 4", {{any, 4, 3, 2}}, "expects inputs of rank 3"}};
  return spec;
}
LayerSpec zero_padding2d_spec() {
  LayerSpec spec;
  spec.make = [] {
    return kiln::LayerPtr(kiln::ZeroPadding2D(Config{
        {"padding", Config::list({Config::list({1, 0}), Config::list({0, 2})})}, {"data_format", "channels_first"}}));
  };
  spec.call = LayerCase{{random_input({2, 2, 3, 4}, 2)}};
  spec.output_shapes = {Shape{any, 2, 4, 6}};
  spec.bad_inputs = {{"rank 3", {{any, 3, 4}}, "expects inputs of rank 4"}};
  return spec;
}
LayerSpec cropping1d_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::Cropping1D(Config{{"cropping", Config::list({1, 2})}})); };
  spec.call = LayerCase{{random_input({2, 6, 3}, 3)}};
  spec.output_shapes = {Shape{any, 3, 3}};
  spec.bad_inputs = {{"too short", {{any, 3, 3}}, "leaves nothing of an axis of 3"}};
  return spec;
}
LayerSpec cropping2d_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::Cropping2D(Config{{"cropping", Config::list({1, 2})}})); };
  spec.call = LayerCase{{random_input({2, 5, 6, 2}, 4)}};
  spec.output_shapes = {Shape{any, 3, 2, 2}};
  spec.bad_inputs = {{"too narrow", {{any, 5, 4, 2}}, "leaves nothing of an axis of 4"}};
  return spec;
}
LayerSpec up_sampling1d_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::UpSampling1D(3)); };
  spec.call = LayerCase{{random_input({2, 4, 3}, 5)}};
  spec.output_shapes = {Shape{any, 12, 3}};
  spec.bad_inputs = {{"rank 2", {{any, 4}}, "expects inputs of rank 3"}};
  return spec;
}
LayerSpec up_sampling2d_spec() {
  LayerSpec spec;
  spec.make = [] {
    return kiln::LayerPtr(kiln::UpSampling2D(Config{{"size", Config::list({2, 3})}, {"interpolation", "bilinear"}}));
  };
  spec.call = LayerCase{{random_input({2, 3, 2, 2}, 6)}};
  spec.output_shapes = {Shape{any, 6, 6, 2}};
  spec.bad_inputs = {{"rank 3", {{any, 3, 2}}, "expects inputs of rank 4"}};
  return spec;
}
}  // namespace

KILN_LAYER_HARNESS("kiln>ZeroPadding1D", zero_padding1d_spec)
KILN_LAYER_HARNESS("kiln>ZeroPadding2D", zero_padding2d_spec)
KILN_LAYER_HARNESS("kiln>Cropping1D", cropping1d_spec)
KILN_LAYER_HARNESS("kiln>Cropping2D", cropping2d_spec)
KILN_LAYER_HARNESS("kiln>UpSampling1D", up_sampling1d_spec)
KILN_LAYER_HARNESS("kiln>UpSampling2D", up_sampling2d_spec)

TEST_CASE("ZeroPadding and Cropping: values and Keras's configs", "[layers][padding]") {
  const Array x = Array::from_vector(std::vector<double>{1, 2, 3}, {1, 3, 1});
  CHECK(values_of(*kiln::ZeroPadding1D(), x) == std::vector<double>{0, 1, 2, 3, 0});
  CHECK(values_of(*kiln::Cropping1D(Config{{"cropping", Config::list({0, 2})}}), x) == std::vector<double>{1});
  const Array image = Array::from_vector(std::vector<double>{1, 2, 3, 4}, {1, 2, 2, 1});
  CHECK(values_of(*kiln::ZeroPadding2D(Config{{"padding", Config::list({0, 1})}}), image) ==
        std::vector<double>{0, 1, 2, 0, 0, 3, 4, 0});
  CHECK(kiln::ZeroPadding2D().get_config().at("padding") ==
        Config::list({Config::from_ints({1, 1}), Config::from_ints({1, 1})}));
  CHECK(kiln::ZeroPadding1D(2).get_config().at("padding") == Config::from_ints({2, 2}));
  CHECK(kiln::Cropping2D().get_config().at("cropping") ==
        Config::list({Config::from_ints({0, 0}), Config::from_ints({0, 0})}));
  CHECK_FALSE(kiln::Cropping1D().get_config().contains("data_format"));
  CHECK_THROWS_WITH(kiln::ZeroPadding1D(-1), Contains("padding must not be negative"));
  CHECK_THROWS_WITH(kiln::Cropping2D(Config{{"cropping", Config::list({1, 2, 3})}}), Contains("two pairs of ints"));
  CHECK_THROWS_WITH(kiln::Cropping1D(Config{{"data_format", "channels_first"}}),
                    Contains("unknown argument 'data_format'"));
}

TEST_CASE("UpSampling: nearest repeats, bilinear interpolates with half-pixel centers", "[layers][padding]") {
  const Array x = Array::from_vector(std::vector<double>{1, 2}, {1, 2, 1});
  CHECK(values_of(*kiln::UpSampling1D(2), x) == std::vector<double>{1, 1, 2, 2});
  // One row of 0 and 4, width doubled: centers at -0.25, 0.25, 0.75, 1.25 of the input clamp to 0, 1, 3, 4.
  const Array row = Array::from_vector(std::vector<double>{0, 4}, {1, 1, 2, 1});
  kiln::UpSampling2D bilinear(Config{{"size", Config::list({1, 2})}, {"interpolation", "bilinear"}});
  const std::vector<double> y = values_of(*bilinear, row);
  const std::vector<double> expected{0, 1, 3, 4};
  REQUIRE(y.size() == 4);
  for (std::size_t i = 0; i < 4; ++i) CHECK(y[i] == Approx(expected[i]).margin(1e-12));
  const Array image = Array::from_vector(std::vector<double>{1, 2, 3, 4}, {1, 1, 2, 2});  // channels_first
  kiln::UpSampling2D nearest(2, {{"data_format", "channels_first"}});
  CHECK(values_of(*nearest, image) == std::vector<double>{1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4});
  const Config config = kiln::UpSampling2D().get_config();
  CHECK(config.at("size") == Config::from_ints({2, 2}));
  CHECK(config.get_string("interpolation") == "nearest");
  CHECK(kiln::UpSampling1D(3).get_config().get_int("size") == 3);
  CHECK_THROWS_WITH(kiln::UpSampling2D(2, {{"interpolation", "lanczos5"}}), Contains("'nearest' or 'bilinear'"));
  CHECK_THROWS_WITH(kiln::UpSampling1D(0), Contains("size must be positive"));
}

TEST_CASE("pair arguments: constructors and brace lists as Keras writes (23, 0)", "[layers][padding]") {
  // The way a new user first writes it, and the shorter way.
  const kiln::Cropping1D from_config(kiln::Config{{"cropping", {23, 0}}});
  const kiln::Cropping1D from_pair(23, 0);
  CHECK(from_config.get_config().at("cropping") == Config::list({23, 0}));
  CHECK(from_pair.get_config().at("cropping") == Config::list({23, 0}));
  const Array x = random_input({2, 24, 3}, 9);
  kiln::Layer& crop = *from_pair.ptr();
  const Array last = run_layer(crop, LayerCase{{x}}).at(0);
  REQUIRE(last.shape() == Shape{2, 1, 3});
  for (int b = 0; b < 2; ++b)
    for (int c = 0; c < 3; ++c)
      CHECK(last.flat(static_cast<std::size_t>(b * 3 + c)) == x.flat(static_cast<std::size_t>(b * 72 + 69 + c)));
  CHECK(kiln::ZeroPadding1D(1, 2).get_config().at("padding") == Config::list({1, 2}));
  CHECK(kiln::ZeroPadding1D(3, {{"name", "pad"}}).name() == "pad");
  CHECK(kiln::ZeroPadding2D(1, 2).get_config().at("padding") ==
        Config::list({Config::list({1, 1}), Config::list({2, 2})}));
  CHECK(kiln::ZeroPadding2D({1, 0}, {0, 2}).get_config().at("padding") ==
        Config::list({Config::list({1, 0}), Config::list({0, 2})}));
  CHECK(kiln::Cropping2D({1, 2}, {3, 4}).get_config().at("cropping") ==
        Config::list({Config::list({1, 2}), Config::list({3, 4})}));
  CHECK(kiln::Cropping2D(1, 2).get_config().at("cropping") ==
        Config::list({Config::list({1, 1}), Config::list({2, 2})}));
  CHECK(kiln::UpSampling2D(2, 3).get_config().at("size") == Config::list({2, 3}));
  CHECK(kiln::Cropping1D({{"cropping", {1, 2}}, {"name", "c"}}).get_config().at("cropping") == Config::list({1, 2}));
}
