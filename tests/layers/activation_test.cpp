#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/layers/activation.hpp>
#include <kiln/layers/model.hpp>
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
