#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/layers/normalization/group_normalization.hpp>
#include <kiln/layers/model_base.hpp>
#include <kiln/models/model.hpp>
#include "support/layer_check.hpp"

using kiln::Array;
using kiln::Config;
using kiln::Shape;
using namespace kiln::testing;
using Catch::Contains;

namespace {
constexpr std::int64_t any = Shape::unknown;

// Random gamma and beta, so the gradients of both weights are checked away from ones and zeros.
Config random_affine() { return Config{{"gamma_initializer", "random_normal"}, {"beta_initializer", "random_normal"}}; }

LayerSpec group_normalization_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::GroupNormalization(2, random_affine())); };
  spec.call = LayerCase{{random_input({3, 4, 6}, 1)}};
  spec.output_shapes = {Shape{any, 4, 6}};
  spec.bad_inputs = {{"another channel count", {{any, 4, 8}}, "was built for inputs of rank 3 with 6 channels"},
                     {"another rank", {{any, 6}}, "was built for inputs of rank 3"}};
  return spec;
}

LayerSpec rms_normalization_spec() {
  LayerSpec spec;
  spec.make = [] {
    kiln::RMSNormalization layer(1e-6, {{"axis", Config::list({-2, -1})}});
    return kiln::LayerPtr(layer);
  };
  spec.call = LayerCase{{random_input({2, 3, 4, 5}, 2)}};
  spec.output_shapes = {Shape{any, 3, 4, 5}};
  spec.bad_inputs = {{"other sizes", {{any, 3, 4, 6}}, "was built for other sizes of the normalized axes"},
                     {"rank 1", {{any}}, "axis -2 does not exist in inputs of rank 1"}};
  return spec;
}
}  // namespace

KILN_LAYER_HARNESS("kiln>GroupNormalization", group_normalization_spec)
KILN_LAYER_HARNESS("kiln>RMSNormalization", rms_normalization_spec)

TEST_CASE("GroupNormalization: each sample's groups normalized, by hand", "[layers][group_norm]") {
  // One sample, 2 positions × 4 channels in 2 groups: group 0 is channels 0-1, i.e. the values
  // 1 3 5 7 (mean 4, variance 5); group 1 is 0 0 2 10 (mean 3, variance 17).
  const Array x = Array::from_vector(std::vector<double>{1, 3, 0, 0, 5, 7, 2, 10}, {1, 2, 4});
  const std::vector<double> y =
      run_layer(*kiln::GroupNormalization(2, {{"epsilon", 0.01}}), LayerCase{{x}}).at(0).to_vector<double>();
  const double mean[2] = {4, 3}, variance[2] = {5, 17};
  for (std::size_t i = 0; i < 8; ++i) {
    const std::size_t group = (i % 4) / 2;
    CHECK(y[i] == Approx((x.flat(i) - mean[group]) / std::sqrt(variance[group] + 0.01)).epsilon(1e-12));
  }
  // Samples are independent: a batch of two gives each the output it has alone.
  const Array pair =
      Array::from_vector(std::vector<double>{1, 3, 0, 0, 5, 7, 2, 10, 9, 9, 9, 1, 2, 3, 4, 5}, {2, 2, 4});
  const std::vector<double> both =
      run_layer(*kiln::GroupNormalization(2, {{"epsilon", 0.01}}), LayerCase{{pair}}).at(0).to_vector<double>();
  for (std::size_t i = 0; i < 8; ++i) CHECK(both[i] == Approx(y[i]).epsilon(1e-14));
}

TEST_CASE("GroupNormalization: Keras's defaults, config, weights and groups = -1", "[layers][group_norm]") {
  kiln::GroupNormalization defaults;
  const Config config = defaults.get_config();
  CHECK(config.get_int("groups") == 32);
  CHECK(config.get_int("axis") == -1);
  CHECK(config.get_double("epsilon") == 1e-3);
  CHECK(config.get_bool("center"));
  CHECK(config.get_bool("scale"));
  CHECK(config.at("gamma_initializer").get_string("class_name") == "Ones");

  // Instance normalization: one group per channel, written back as the count once built, as Keras does.
  kiln::GroupNormalization instance(-1, {{"axis", 1}});
  const kiln::Tensor input = kiln::Input({any, 3, 5});
  kiln::Model model(input, instance(input));
  CHECK(instance.get_config().get_int("groups") == 3);
  const std::vector<kiln::Weight> weights = instance.weights();
  REQUIRE(weights.size() == 2);
  CHECK(weights[0].path == "gamma");
  CHECK(weights[1].path == "beta");
  CHECK(weights[0].value.shape() == Shape{3});

  kiln::GroupNormalization plain(1, {{"center", false}, {"scale", false}});
  const kiln::Tensor features = kiln::Input({any, 4});
  kiln::Model bare(features, plain(features));
  CHECK(plain.weights().empty());
  const std::vector<double> y =
      run_layer(*plain, LayerCase{{Array::from_vector(std::vector<double>{1, 2, 3, 4}, {1, 4})}})
          .at(0)
          .to_vector<double>();
  CHECK(y[0] == Approx(-1.5 / std::sqrt(1.25 + 1e-3)).epsilon(1e-12));
}

TEST_CASE("GroupNormalization refuses bad arguments and inputs when called", "[layers][group_norm][errors]") {
  CHECK_THROWS_AS(kiln::GroupNormalization(0), kiln::ConfigError);
  CHECK_THROWS_WITH(kiln::GroupNormalization(-2), Contains("groups must be a positive integer"));
  CHECK_THROWS_WITH(kiln::GroupNormalization(2, {{"epsilon", 0.0}}), Contains("epsilon must be positive"));
  const kiln::Tensor input = kiln::Input({any, 4, 6});
  CHECK_THROWS_AS(kiln::GroupNormalization(4)(input), kiln::ShapeError);
  CHECK_THROWS_WITH(kiln::GroupNormalization(4)(input),
                    Contains("GroupNormalization") && Contains("the 6 channels do not split into 4 equal groups"));
  CHECK_THROWS_WITH(kiln::GroupNormalization(32)(input), Contains("do not split into 32 equal groups"));
  CHECK_THROWS_WITH(kiln::GroupNormalization(2, {{"axis", 3}})(input), Contains("axis 3 does not exist"));
  CHECK_THROWS_WITH(kiln::GroupNormalization(2, {{"axis", 0}})(input), Contains("axis 0 is the batch axis"));
  CHECK_THROWS_WITH(kiln::GroupNormalization(2)(kiln::Input({any, 4, any})), Contains("channel axis -1 is known"));
}

TEST_CASE("RMSNormalization: x / rms(x) · scale, Keras's config", "[layers][rms_norm]") {
  const Array x = Array::from_vector(std::vector<double>{3, 4, 0, 0}, {2, 2});
  const std::vector<double> y = run_layer(*kiln::RMSNormalization(), LayerCase{{x}}).at(0).to_vector<double>();
  const double rms = std::sqrt(12.5 + 1e-6);
  CHECK(y[0] == Approx(3 / rms).epsilon(1e-14));
  CHECK(y[1] == Approx(4 / rms).epsilon(1e-14));
  CHECK(y[2] == 0.0);  // a zero row stays zero (epsilon keeps it finite)
  CHECK(y[3] == 0.0);

  kiln::RMSNormalization layer;
  CHECK(layer.get_config().get_int("axis") == -1);
  CHECK(layer.get_config().get_double("epsilon") == 1e-6);
  const kiln::Tensor input = kiln::Input({any, 5, 8});
  kiln::Model model(input, layer(input));
  // Keras's build turns axis into a list, so a saved RMSNormalization holds [-1].
  CHECK(layer.get_config().at("axis") == Config::from_ints({-1}));
  REQUIRE(layer.weights().size() == 1);
  CHECK(layer.weights()[0].path == "scale");
  CHECK(layer.weights()[0].value.shape() == Shape{8});
}

TEST_CASE("RMSNormalization refuses bad arguments and inputs when called", "[layers][rms_norm][errors]") {
  CHECK_THROWS_WITH(kiln::RMSNormalization(0.0), Contains("epsilon must be positive"));
  CHECK_THROWS_WITH(kiln::RMSNormalization(Config{{"axis", Config::list({})}}), Contains("at least one axis"));
  const kiln::Tensor input = kiln::Input({any, 5, 8});
  CHECK_THROWS_AS(kiln::RMSNormalization(1e-6, {{"axis", 1}})(input), kiln::ShapeError);
  CHECK_THROWS_WITH(kiln::RMSNormalization(1e-6, {{"axis", 1}})(input),
                    Contains("RMSNormalization") && Contains("trailing axes only"));
  CHECK_THROWS_WITH(kiln::RMSNormalization(1e-6, {{"axis", 3}})(input), Contains("axis 3 does not exist"));
  CHECK_THROWS_WITH(kiln::RMSNormalization()(kiln::Input({any, 5, any})), Contains("normalized axes are known"));
}
