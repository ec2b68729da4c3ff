#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/layers/normalization/layer_normalization.hpp>
#include <kiln/layers/model_base.hpp>
#include "support/layer_check.hpp"

using kiln::Array;
using kiln::Config;
using kiln::Shape;
using namespace kiln::testing;

namespace {

// (x - mean) / sqrt(biased variance + epsilon) * gamma + beta over the last axis, in double.
std::vector<double> layer_norm_reference(const Array& x, const std::vector<double>& gamma,
                                         const std::vector<double>& beta, double epsilon) {
  const std::size_t features = gamma.size();
  std::vector<double> out(x.size());
  for (std::size_t row = 0; row < x.size() / features; ++row) {
    double mean = 0, variance = 0;
    for (std::size_t j = 0; j < features; ++j) mean += x.flat(row * features + j);
    mean /= static_cast<double>(features);
    for (std::size_t j = 0; j < features; ++j) variance += std::pow(x.flat(row * features + j) - mean, 2);
    variance /= static_cast<double>(features);
    for (std::size_t j = 0; j < features; ++j)
      out[row * features + j] =
          (x.flat(row * features + j) - mean) / std::sqrt(variance + epsilon) * gamma[j] + beta[j];
  }
  return out;
}

double max_difference(const Array& actual, const std::vector<double>& expected) {
  REQUIRE(actual.size() == expected.size());
  double worst = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) worst = std::max(worst, std::fabs(actual.flat(i) - expected[i]));
  return worst;
}

const Config random_weights = {{"beta_initializer", "random_normal"}, {"gamma_initializer", "random_normal"}};

}  // namespace

TEST_CASE("LayerNormalization: output shapes and weights gamma then beta", "[layers][layer_normalization]") {
  kiln::LayerNormalization norm;
  CHECK(symbolic_output_shapes(*norm, LayerCase{{random_input({4, 3, 7}, 1)}}) ==
        std::vector<Shape>{Shape{Shape::unknown, 3, 7}});
  const std::vector<kiln::Weight> weights = norm.weights();
  REQUIRE(weights.size() == 2);
  CHECK(weights[0].path == "gamma");
  CHECK(weights[0].value.shape() == Shape{7});
  CHECK(weights[1].path == "beta");
  CHECK(weights[1].value.shape() == Shape{7});
  CHECK(weights[0].value.flat(0) == 1.0);  // ones
  CHECK(weights[1].value.flat(0) == 0.0);  // zeros

  kiln::LayerNormalization no_center(1e-3, {{"center", false}}), no_scale(1e-3, {{"scale", false}});
  no_center->build_for(Shape{Shape::unknown, 5});
  no_scale->build_for(Shape{Shape::unknown, 5});
  REQUIRE(no_center.weights().size() == 1);
  CHECK(no_center.weights()[0].path == "gamma");
  REQUIRE(no_scale.weights().size() == 1);
  CHECK(no_scale.weights()[0].path == "beta");
}

TEST_CASE("LayerNormalization: gradients of inputs, gamma and beta match central differences",
          "[layers][layer_normalization][grad]") {
  for (const bool center : {true, false})
    for (const bool scale : {true, false}) {
      kiln::LayerNormalization norm(1e-3, random_weights.with("center", center).with("scale", scale));
      const GradcheckReport report = gradcheck_layer(*norm, LayerCase{{random_input({3, 2, 6}, 2)}});
      INFO("center " << center << ", scale " << scale << ": " << report.worst_entry());
      CHECK(report.num_checked == 36u + (center ? 6u : 0u) + (scale ? 6u : 0u));
      CHECK(report.max_relative_error <= 1e-6);
    }
}

TEST_CASE("LayerNormalization: config round trip with Keras's keys", "[layers][layer_normalization][config]") {
  kiln::LayerNormalization norm(1e-5, random_weights.with("axis", Config::from_ints({-1})).with("name", "ln"));
  check_config_round_trip(norm, LayerCase{{random_input({2, 3, 4}, 3)}});
  const Config config = norm.get_config();
  // As Keras's build does, a built layer holds its axes as a sorted list of non-negative axes.
  CHECK(config.at("axis") == Config::from_ints({2}));
  CHECK(config.get_double("epsilon") == 1e-5);
  CHECK(config.get_bool("center"));
  CHECK(config.get_bool("scale"));
  CHECK_FALSE(config.get_bool("rms_scaling"));
  CHECK(config.at("gamma_initializer").get_string("class_name") == "RandomNormal");
  CHECK(config.at("beta_initializer").get_string("class_name") == "RandomNormal");
  CHECK(kiln::LayerNormalization().get_config().get_int("axis") == -1);
  CHECK(kiln::LayerNormalization().get_config().get_double("epsilon") == 1e-3);

  kiln::LayerNormalization bare(1e-3, {{"center", false}, {"scale", false}});
  check_config_round_trip(bare, LayerCase{{random_input({2, 4}, 4)}});
}

TEST_CASE("LayerNormalization: values match a plain double reference", "[layers][layer_normalization][values]") {
  const Array x = random_input({3, 4, 8}, 5, -2.0, 5.0);
  const Array gamma = random_input({8}, 6), beta = random_input({8}, 7);
  const std::vector<double> ones(8, 1.0), zeros(8, 0.0);
  const double epsilon = 1e-3;

  // Built before the call, so the dtype cannot come from the input.
  kiln::LayerNormalization both(epsilon, {{"dtype", "float64"}});
  both->build_for(x.shape());
  both.set_weights({gamma, beta});
  CHECK(max_difference(run_layer(*both, LayerCase{{x}})[0],
                       layer_norm_reference(x, gamma.to_vector<double>(), beta.to_vector<double>(), epsilon)) <= 1e-10);

  kiln::LayerNormalization only_scale(epsilon, {{"center", false}, {"dtype", "float64"}});
  only_scale->build_for(x.shape());
  only_scale.set_weights({gamma});
  CHECK(max_difference(run_layer(*only_scale, LayerCase{{x}})[0],
                       layer_norm_reference(x, gamma.to_vector<double>(), zeros, epsilon)) <= 1e-10);

  kiln::LayerNormalization only_center(epsilon, {{"scale", false}, {"dtype", "float64"}});
  only_center->build_for(x.shape());
  only_center.set_weights({beta});
  CHECK(max_difference(run_layer(*only_center, LayerCase{{x}})[0],
                       layer_norm_reference(x, ones, beta.to_vector<double>(), epsilon)) <= 1e-10);

  kiln::LayerNormalization neither(0.5, {{"center", false}, {"scale", false}, {"axis", 2}});
  CHECK(max_difference(run_layer(*neither, LayerCase{{x}})[0], layer_norm_reference(x, ones, zeros, 0.5)) <= 1e-10);
}

// Over the axes `axes` of a (batch, a, b) array (a list of 1 and 2, or one of them): each group of elements
// that differ only along those axes is normalized, and gamma/beta are indexed by the normalized positions.
std::vector<double> axes_reference(const Array& x, const std::vector<int>& axes, const Array& gamma, const Array& beta,
                                   double epsilon) {
  const auto n = x.shape()[0], a = x.shape()[1], b = x.shape()[2];
  const bool over_a = std::find(axes.begin(), axes.end(), 1) != axes.end();
  const bool over_b = std::find(axes.begin(), axes.end(), 2) != axes.end();
  std::vector<double> out(x.size());
  auto index = [&](std::int64_t i, std::int64_t j, std::int64_t k) {
    return static_cast<std::size_t>((i * a + j) * b + k);
  };
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j0 = 0; j0 < (over_a ? 1 : a); ++j0)
      for (std::int64_t k0 = 0; k0 < (over_b ? 1 : b); ++k0) {
        std::vector<std::pair<std::int64_t, std::int64_t>> group;
        for (std::int64_t j = over_a ? 0 : j0; j < (over_a ? a : j0 + 1); ++j)
          for (std::int64_t k = over_b ? 0 : k0; k < (over_b ? b : k0 + 1); ++k) group.emplace_back(j, k);
        double mean = 0, variance = 0;
        for (auto [j, k] : group) mean += x.flat(index(i, j, k));
        mean /= static_cast<double>(group.size());
        for (auto [j, k] : group) variance += std::pow(x.flat(index(i, j, k)) - mean, 2);
        variance /= static_cast<double>(group.size());
        for (auto [j, k] : group) {
          const std::size_t w =
              over_a && over_b ? static_cast<std::size_t>(j * b + k) : static_cast<std::size_t>(over_a ? j : k);
          out[index(i, j, k)] =
              (x.flat(index(i, j, k)) - mean) / std::sqrt(variance + epsilon) * gamma.flat(w) + beta.flat(w);
        }
      }
  return out;
}

TEST_CASE("LayerNormalization: any axes, as Keras normalizes them", "[layers][layer_normalization][values]") {
  const Array x = random_input({3, 4, 5}, 8, -2.0, 3.0);
  struct Case {
    Config axis;
    std::vector<int> axes;
    Shape weights;
  };
  for (const Case& c :
       {Case{Config::from_ints({1, 2}), {1, 2}, Shape{4, 5}}, Case{Config(1), {1}, Shape{4}},
        Case{Config::from_ints({-2}), {1}, Shape{4}}, Case{Config::from_ints({2, -2}), {1, 2}, Shape{4, 5}}}) {
    INFO("axis " << c.axis.to_string());
    kiln::LayerNormalization norm(1e-3, random_weights.with("axis", c.axis).with("dtype", "float64"));
    const std::vector<Array> out = run_layer(*norm, LayerCase{{x}});
    REQUIRE(norm.weights().size() == 2);
    CHECK(norm.weights()[0].value.shape() == c.weights);
    CHECK(max_difference(out[0], axes_reference(x, c.axes, norm.weights()[0].value, norm.weights()[1].value, 1e-3)) <=
          1e-10);
    // Keras's build sorts the axes and makes them non-negative; the config keeps that.
    std::vector<std::int64_t> sorted(c.axes.begin(), c.axes.end());
    CHECK(norm.get_config().at("axis") == Config::from_ints(sorted));
    const GradcheckReport report = gradcheck_layer(*norm, LayerCase{{random_input({2, 4, 5}, 9)}});
    INFO(report.worst_entry());
    CHECK(report.max_relative_error <= 1e-6);
  }
}

TEST_CASE("LayerNormalization: bad axes and shapes fail, naming the layer", "[layers][layer_normalization][errors]") {
  const kiln::Tensor x = kiln::Input({Shape::unknown, 3, 4});
  kiln::LayerNormalization missing(1e-3, {{"axis", 3}, {"name", "ln"}});
  CHECK_THROWS_AS(missing(x), kiln::ShapeError);
  CHECK_THROWS_WITH(missing(x), Catch::Contains("LayerNormalization 'ln'") &&
                                    Catch::Contains("axis 3 does not exist") && Catch::Contains("(None, 3, 4)"));
  CHECK_FALSE(missing.built());
  kiln::LayerNormalization twice(1e-3, {{"axis", Config::from_ints({2, -1})}});
  CHECK_THROWS_WITH(twice(x), Catch::Contains("names an axis twice"));
  kiln::LayerNormalization batch(1e-3, {{"axis", 0}});
  CHECK_THROWS_WITH(batch(x), Catch::Contains("needs inputs whose normalized axes are known"));

  CHECK_THROWS_WITH(kiln::LayerNormalization(1e-3, {{"rms_scaling", true}}), Catch::Contains("rms_scaling"));
  CHECK_THROWS_WITH(kiln::LayerNormalization(1e-3, {{"gamma_regularizer", "l3"}}), Catch::Contains("l3"));
  CHECK_THROWS_AS(kiln::LayerNormalization(0.0), kiln::ConfigError);
  CHECK_THROWS_WITH(kiln::LayerNormalization(Config{{"epsilonn", 1e-5}}),
                    Catch::Contains("unknown argument 'epsilonn'"));

  kiln::LayerNormalization norm(1e-3, {{"name", "ln"}});
  norm(x);
  const kiln::Tensor wider = kiln::Input({Shape::unknown, 3, 5});
  CHECK_THROWS_AS(norm(wider), kiln::ShapeError);
  CHECK_THROWS_WITH(norm(wider), Catch::Contains("LayerNormalization 'ln'") && Catch::Contains("(None, 3, 5)") &&
                                     Catch::Contains("(None, 3, 4)"));
}

// ---- the layer harness ---------------------------------------------------------------------------------

namespace {
LayerSpec layer_normalization_spec() {
  constexpr std::int64_t any = Shape::unknown;
  LayerSpec spec;
  spec.make = [] {
    return kiln::LayerPtr(kiln::LayerNormalization(
        1e-3, {{"gamma_initializer", "random_normal"}, {"beta_initializer", "random_normal"}}));
  };
  spec.call = LayerCase{{random_input({2, 3, 5}, 2)}};
  spec.output_shapes = {Shape{any, 3, 5}};
  spec.bad_inputs = {{"another last dimension", {{any, 3, 6}}, "was built for other sizes of the normalized axes"},
                     {"another rank", {{any, 5}}, "was built for inputs of another rank"}};
  return spec;
}
}  // namespace

KILN_LAYER_HARNESS("kiln>LayerNormalization", layer_normalization_spec)
