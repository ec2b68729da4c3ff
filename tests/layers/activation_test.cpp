#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/layers/activations/activation.hpp>
#include <kiln/layers/model_base.hpp>
#include "support/layer_check.hpp"

using kiln::Array;
using kiln::Config;
using kiln::Shape;
using namespace kiln::testing;

namespace {

// Softmax over the last axis, in double, with the row max subtracted as any careful reference does.
std::vector<double> softmax_reference(const Array& x) {
  const auto columns = static_cast<std::size_t>(x.shape().dim(-1));
  std::vector<double> out(x.size());
  for (std::size_t row = 0; row < x.size() / columns; ++row) {
    double largest = -INFINITY, total = 0;
    for (std::size_t j = 0; j < columns; ++j) largest = std::max(largest, x.flat(row * columns + j));
    for (std::size_t j = 0; j < columns; ++j) total += std::exp(x.flat(row * columns + j) - largest);
    for (std::size_t j = 0; j < columns; ++j)
      out[row * columns + j] = std::exp(x.flat(row * columns + j) - largest) / total;
  }
  return out;
}

double max_difference(const Array& actual, const std::vector<double>& expected) {
  REQUIRE(actual.size() == expected.size());
  double worst = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) worst = std::max(worst, std::fabs(actual.flat(i) - expected[i]));
  return worst;
}

}  // namespace

TEST_CASE("Activation: output shapes equal the input shapes with an unknown batch", "[layers][activation]") {
  kiln::Activation relu("relu");
  CHECK(symbolic_output_shapes(*relu, LayerCase{{random_input({4, 3, 7}, 1)}}) ==
        std::vector<Shape>{Shape{Shape::unknown, 3, 7}});
  kiln::Activation softmax("softmax");
  CHECK(symbolic_output_shapes(*softmax, LayerCase{{random_input({4, 5}, 2)}}) ==
        std::vector<Shape>{Shape{Shape::unknown, 5}});
  CHECK(relu.weights().empty());
  CHECK(relu.count_params() == 0);
}

TEST_CASE("Activation: gradients match central differences", "[layers][activation][grad]") {
  for (const char* name : {"linear", "tanh", "sigmoid", "softmax", "gelu", "swish", "softplus", "log_softmax"}) {
    kiln::Activation layer(name);
    const GradcheckReport report = gradcheck_layer(*layer, LayerCase{{random_input({3, 2, 5}, 3)}});
    INFO(name << ": " << report.worst_entry());
    CHECK(report.num_checked == 30);
    CHECK(report.max_relative_error <= 1e-6);
  }
}

TEST_CASE("Activation: config round trip keeps the activation name", "[layers][activation][config]") {
  kiln::Activation layer("tanh", {{"name", "squash"}});
  check_config_round_trip(layer, LayerCase{{random_input({2, 6}, 4)}});
  const Config config = layer.get_config();
  CHECK(config.get_string("activation") == "tanh");
  CHECK(config.get_string("name") == "squash");
  CHECK(config.get_bool("trainable"));
  // Keras writes None for the identity; it reads back as linear.
  CHECK(kiln::Activation(Config{{"activation", nullptr}})->activation() == "linear");
  CHECK(kiln::create_layer("kiln>Activation", {{"activation", "relu"}})->get_config().get_string("activation") ==
        "relu");
}

TEST_CASE("Activation: values match a plain double reference", "[layers][activation][values]") {
  const Array x = random_input({3, 4, 5}, 5, -3.0, 3.0);
  std::vector<double> relu(x.size()), tanh(x.size()), sigmoid(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    relu[i] = std::max(0.0, x.flat(i));
    tanh[i] = std::tanh(x.flat(i));
    sigmoid[i] = 1.0 / (1.0 + std::exp(-x.flat(i)));
  }
  kiln::Activation relu_layer("relu"), tanh_layer("tanh"), sigmoid_layer("sigmoid"), softmax_layer("softmax");
  CHECK(max_difference(run_layer(*relu_layer, LayerCase{{x}})[0], relu) == 0.0);
  CHECK(max_difference(run_layer(*tanh_layer, LayerCase{{x}})[0], tanh) <= 1e-14);
  CHECK(max_difference(run_layer(*sigmoid_layer, LayerCase{{x}})[0], sigmoid) <= 1e-14);
  CHECK(max_difference(run_layer(*softmax_layer, LayerCase{{x}})[0], softmax_reference(x)) <= 1e-14);
  kiln::Activation linear("");
  CHECK(run_layer(*linear, LayerCase{{x}})[0].bitwise_equal(x));
}

TEST_CASE("Activation: unknown names and arguments fail early, naming the layer", "[layers][activation][errors]") {
  CHECK_THROWS_AS(kiln::Activation("reluu"), kiln::ConfigError);
  CHECK_THROWS_WITH(kiln::Activation("reluu"),
                    Catch::Contains("Activation 'activation'") && Catch::Contains("did you mean 'relu'"));
  CHECK_THROWS_WITH(kiln::Activation(Config{{"activation", "relu"}, {"activaton", "tanh"}}),
                    Catch::Contains("unknown argument 'activaton'"));
  CHECK_THROWS_WITH(kiln::Activation(Config::map()), Catch::Contains("'activation' is required"));
  CHECK_THROWS_AS(kiln::Activation(Config{{"activation", 3}}), kiln::ConfigError);
}

// ---- the layer harness ---------------------------------------------------------------------------------

namespace {
LayerSpec activation_spec() {
  constexpr std::int64_t any = Shape::unknown;
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::Activation("swish")); };
  spec.call = LayerCase{{random_input({3, 4}, 2)}};
  spec.output_shapes = {Shape{any, 4}};
  spec.bad_inputs = {{"two inputs", {{any, 4}, {any, 4}}, "takes 1 inputs, got 2"}};
  return spec;
}
}  // namespace

KILN_LAYER_HARNESS("kiln>Activation", activation_spec)

// ---- ReLU, LeakyReLU, ELU, Softmax, PReLU ----------------------------------------------------------------

namespace {

// Keras's activations.relu(x, negative_slope, max_value, threshold), element by element.
double keras_relu(double x, double slope, double max_value, double threshold) {
  double y = x > threshold ? x : 0.0;
  if (threshold == 0.0) y = std::max(x, 0.0);
  if (max_value >= 0) y = std::min(y, max_value);
  return y - slope * std::max(threshold - x, 0.0);
}

// Inputs kept away from the kinks (0, the threshold and the cap), where central differences mislead.
Array away_from(const Shape& shape, std::uint64_t seed, std::vector<double> kinks) {
  Array x = random_input(shape, seed, -2.0, 2.0);
  for (std::size_t i = 0; i < x.size(); ++i)
    for (const double kink : kinks)
      if (std::abs(x.flat(i) - kink) < 0.05) x.set_flat(i, kink + 0.1);
  return x;
}

LayerSpec relu_spec() {
  constexpr std::int64_t any = Shape::unknown;
  LayerSpec spec;
  spec.make = [] {
    return kiln::LayerPtr(kiln::ReLU({{"max_value", 1.5}, {"negative_slope", 0.1}, {"threshold", 0.5}}));
  };
  spec.call = LayerCase{{away_from({3, 4}, 2, {0.0, 0.5, 1.5})}};
  spec.output_shapes = {Shape{any, 4}};
  spec.bad_inputs = {{"two inputs", {{any, 4}, {any, 4}}, "takes 1 inputs, got 2"}};
  return spec;
}

LayerSpec leaky_relu_spec() {
  constexpr std::int64_t any = Shape::unknown;
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::LeakyReLU(0.2)); };
  spec.call = LayerCase{{away_from({3, 4}, 3, {0.0})}};
  spec.output_shapes = {Shape{any, 4}};
  spec.bad_inputs = {{"two inputs", {{any, 4}, {any, 4}}, "takes 1 inputs, got 2"}};
  return spec;
}

LayerSpec elu_spec() {
  constexpr std::int64_t any = Shape::unknown;
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::ELU(0.7)); };
  spec.call = LayerCase{{away_from({3, 4}, 4, {0.0})}};
  spec.output_shapes = {Shape{any, 4}};
  spec.bad_inputs = {{"two inputs", {{any, 4}, {any, 4}}, "takes 1 inputs, got 2"}};
  return spec;
}

LayerSpec softmax_spec() {
  constexpr std::int64_t any = Shape::unknown;
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::Softmax(Config{{"axis", Config::from_ints({1, 2})}})); };
  spec.call = LayerCase{{random_input({2, 3, 4}, 5)}};
  spec.output_shapes = {Shape{any, 3, 4}};
  spec.bad_inputs = {{"rank 2", {{any, 4}}, "axis 2 does not exist in inputs of rank 2"}};
  return spec;
}

LayerSpec prelu_spec() {
  constexpr std::int64_t any = Shape::unknown;
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::PReLU({{"alpha_initializer", "random_uniform"}, {"shared_axes", 1}})); };
  spec.call = LayerCase{{away_from({2, 3, 4}, 6, {0.0})}};
  spec.output_shapes = {Shape{any, 3, 4}};
  spec.bad_inputs = {{"another width", {{any, 3, 5}}, "(None, 3, 5)"}};
  return spec;
}

}  // namespace

KILN_LAYER_HARNESS("kiln>ReLU", relu_spec)
KILN_LAYER_HARNESS("kiln>LeakyReLU", leaky_relu_spec)
KILN_LAYER_HARNESS("kiln>ELU", elu_spec)
KILN_LAYER_HARNESS("kiln>Softmax", softmax_spec)
KILN_LAYER_HARNESS("kiln>PReLU", prelu_spec)

TEST_CASE("ReLU: Keras's formula for every combination of cap, leak and threshold", "[layers][activation][values]") {
  const Array x = away_from({5, 8}, 7, {0.0, 0.5, 1.5});
  for (const double slope : {0.0, 0.3})
    for (const double cap : {-1.0, 1.5, 6.0})
      for (const double threshold : {0.0, 0.5}) {
        Config options = {{"negative_slope", slope}, {"threshold", threshold}};
        if (cap >= 0) options.set("max_value", cap);
        INFO(options.to_string());
        kiln::ReLU relu(options);
        const Array y = run_layer(*relu, LayerCase{{x}})[0];
        std::vector<double> expected(x.size());
        for (std::size_t i = 0; i < x.size(); ++i) expected[i] = keras_relu(x.flat(i), slope, cap, threshold);
        CHECK(max_difference(y, expected) <= 1e-12);
      }
  CHECK_THROWS_WITH(kiln::ReLU({{"max_value", -1.0}}), Catch::Contains("max_value must be >= 0"));
  CHECK_THROWS_WITH(kiln::ReLU({{"negative_slope", -0.1}}), Catch::Contains("negative_slope must be >= 0"));
  CHECK_THROWS_WITH(kiln::ReLU({{"threshold", -0.1}}), Catch::Contains("threshold must be >= 0"));
}

TEST_CASE("LeakyReLU, ELU, Softmax and PReLU: values and Keras's configs", "[layers][activation][values]") {
  const Array x = random_input({4, 3, 5}, 8, -3.0, 3.0);
  std::vector<double> leaky(x.size()), elu(x.size()), prelu(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    leaky[i] = x.flat(i) >= 0 ? x.flat(i) : 0.3 * x.flat(i);
    elu[i] = x.flat(i) > 0 ? x.flat(i) : 0.5 * std::expm1(x.flat(i));
  }
  CHECK(max_difference(run_layer(*kiln::LeakyReLU(), LayerCase{{x}})[0], leaky) <= 1e-12);
  CHECK(max_difference(run_layer(*kiln::ELU(0.5), LayerCase{{x}})[0], elu) <= 1e-12);
  // Keras 2's LeakyReLU called its slope alpha; Keras 3 still reads it, and writes negative_slope.
  const kiln::LeakyReLU keras2(Config{{"alpha", 0.3}});
  CHECK(keras2.get_config().get_double("negative_slope") == 0.3);
  CHECK_FALSE(keras2.get_config().contains("alpha"));
  CHECK(kiln::ELU().get_config().get_double("alpha") == 1.0);

  // Softmax over the last axis equals the plain one; over axes 1 and 2 each sample sums to 1.
  CHECK(max_difference(run_layer(*kiln::Softmax(), LayerCase{{x}})[0], softmax_reference(x)) <= 1e-12);
  const Array joint = run_layer(*kiln::Softmax(Config{{"axis", Config::from_ints({1, 2})}}), LayerCase{{x}})[0];
  for (std::size_t sample = 0; sample < 4; ++sample) {
    double total = 0, exp_total = 0;
    for (std::size_t j = 0; j < 15; ++j) exp_total += std::exp(x.flat(sample * 15 + j));
    for (std::size_t j = 0; j < 15; ++j) {
      total += joint.flat(sample * 15 + j);
      CHECK(joint.flat(sample * 15 + j) == Approx(std::exp(x.flat(sample * 15 + j)) / exp_total).epsilon(1e-12));
    }
    CHECK(total == Approx(1.0));
  }
  CHECK(kiln::Softmax().get_config().get_int("axis") == -1);

  // PReLU's alpha spans the non-batch axes, size 1 along the shared ones.
  kiln::PReLU shared({{"alpha_initializer", "random_uniform"}, {"shared_axes", Config::from_ints({1})}});
  const Array y = run_layer(*shared, LayerCase{{x}})[0];
  REQUIRE(shared.weights().size() == 1);
  const Array alpha = shared.weights()[0].value;
  CHECK(alpha.shape() == Shape{1, 5});
  for (std::size_t i = 0; i < x.size(); ++i) prelu[i] = x.flat(i) >= 0 ? x.flat(i) : alpha.flat(i % 5) * x.flat(i);
  CHECK(max_difference(y, prelu) <= 1e-12);
  CHECK(shared.get_config().at("shared_axes") == Config::from_ints({1}));
  kiln::PReLU bad_axis({{"shared_axes", 3}});
  CHECK_THROWS_WITH(run_layer(*bad_axis, LayerCase{{x}}), Catch::Contains("shared axis 3 does not exist"));
}
