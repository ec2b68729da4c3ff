#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/layers/core/dense.hpp>
#include <kiln/layers/model_base.hpp>
#include "support/layer_check.hpp"

using kiln::Config;
using kiln::Shape;
using namespace kiln::testing;

TEST_CASE("Dense: output shapes keep an unknown batch and act on the last axis", "[layers][dense]") {
  kiln::Dense dense(5, "relu");
  const LayerCase c{{random_input({4, 3, 7}, 1)}};
  REQUIRE(symbolic_output_shapes(*dense, c) == std::vector<Shape>{Shape{Shape::unknown, 3, 5}});
  REQUIRE(dense->built());
  const std::vector<kiln::Weight> weights = dense.weights();
  REQUIRE(weights.size() == 2);
  CHECK(weights[0].path == "kernel");
  CHECK(weights[0].value.shape() == Shape{7, 5});
  CHECK(weights[1].path == "bias");
  CHECK(weights[1].value.shape() == Shape{5});
  CHECK(dense.count_params() == 7 * 5 + 5);
}

TEST_CASE("Dense: gradients of inputs, kernel and bias match central differences", "[layers][dense][grad]") {
  for (const char* activation : {"linear", "tanh", "swish"}) {
    kiln::Dense dense(4, activation, {{"bias_initializer", "random_normal"}});
    const LayerCase c{{random_input({3, 2, 5}, 2)}};
    const GradcheckReport report = gradcheck_layer(*dense, c);
    INFO(activation << ": " << report.worst_entry());
    CHECK(report.max_relative_error <= 1e-6);
  }
}

TEST_CASE("Dense: config round trip rebuilds an equal layer with identical outputs", "[layers][dense][config]") {
  kiln::Dense dense(3, "sigmoid", {{"use_bias", false}, {"kernel_initializer", "he_normal"}, {"name", "fc"}});
  check_config_round_trip(dense, LayerCase{{random_input({2, 6}, 3)}});
  const Config config = dense.get_config();
  CHECK(config.get_int("units") == 3);
  CHECK(config.get_string("activation") == "sigmoid");
  CHECK(config.get_bool("use_bias") == false);
  CHECK(config.at("kernel_initializer").get_string("class_name") == "HeNormal");
  CHECK(config.get_string("name") == "fc");
  CHECK(config.get_string("dtype") == "float64");
}

TEST_CASE("Dense: weights follow Keras's glorot_uniform bound and are reproducible", "[layers][dense][init]") {
  kiln::Dense a(50, "", {{"name", "same"}}), b(50, "", {{"name", "same"}});
  a->build_for(Shape{Shape::unknown, 30});
  b->build_for(Shape{Shape::unknown, 30});
  const kiln::Array kernel = a.get_weights()[0];
  const double limit = std::sqrt(6.0 / (30 + 50));
  double largest = 0;
  for (std::size_t i = 0; i < kernel.size(); ++i) largest = std::max(largest, std::fabs(kernel.flat(i)));
  CHECK(largest <= limit);
  CHECK(largest > 0.9 * limit);
  CHECK(kernel.bitwise_equal(b.get_weights()[0]));
  a->initialize_weights(7);
  CHECK_FALSE(a.get_weights()[0].bitwise_equal(b.get_weights()[0]));
}

TEST_CASE("Dense: bad arguments and shapes fail early, naming the layer", "[layers][dense][errors]") {
  CHECK_THROWS_AS(kiln::Dense(0), kiln::ConfigError);
  CHECK_THROWS_WITH(kiln::Dense(4, "reluu"), Catch::Contains("did you mean 'relu'"));
  CHECK_THROWS_WITH(kiln::Dense(Config{{"units", 4}, {"unit", 3}}), Catch::Contains("unknown argument 'unit'"));
  CHECK_THROWS_WITH(kiln::Dense(Config{{"units", "four"}}), Catch::Contains("units"));
  kiln::Dense dense(4, "", {{"name", "fc"}});
  const kiln::Tensor x = kiln::Input({Shape::unknown, 3});
  dense(x);
  const kiln::Tensor wider = kiln::Input({Shape::unknown, 5});
  CHECK_THROWS_AS(dense(wider), kiln::ShapeError);
  CHECK_THROWS_WITH(dense(wider), Catch::Contains("Dense 'fc'") && Catch::Contains("(None, 5)"));
  CHECK_THROWS_AS(dense.set_weights({kiln::Array({2, 2})}), kiln::ValueError);
  CHECK_THROWS_AS(dense.set_weights({kiln::Array({3, 5}), kiln::Array({4})}), kiln::ShapeError);
}

TEST_CASE("Dense: zero input features give the bias, not a crash", "[layers][dense]") {
  // An empty kernel (0, 3): the product over an inner size of 0 is zeros (BLAS refuses such operands).
  kiln::Dense dense(3, "linear", {{"bias_initializer", "ones"}});
  const std::vector<kiln::Array> out = run_layer(*dense, LayerCase{{kiln::Array({2, 0}, kiln::DType::float64)}});
  REQUIRE(out.at(0).shape() == Shape{2, 3});
  for (std::size_t i = 0; i < out[0].size(); ++i) CHECK(out[0].flat(i) == 1.0);
}

// ---- the layer harness ---------------------------------------------------------------------------------

namespace {
LayerSpec dense_spec() {
  constexpr std::int64_t any = Shape::unknown;
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::Dense(4, "tanh", {{"bias_initializer", "random_normal"}})); };
  spec.call = LayerCase{{random_input({3, 2, 5}, 2)}};
  spec.output_shapes = {Shape{any, 2, 4}};
  spec.bad_inputs = {{"another last dimension", {{any, 2, 6}}, "was built for inputs with last dimension 5"},
                     {"two inputs", {{any, 5}, {any, 5}}, "takes 1 inputs, got 2"}};
  return spec;
}
// Keras's int8 Dense (a QuantizedDTypePolicy): built, its int8 kernel and scales set, through the same harness but
// for the gradients (the input gradient is Keras's straight-through one, not the quantized function's: checked in
// tests/ops/quantize_test.cpp).
LayerSpec int8_dense_spec() {
  constexpr std::int64_t any = Shape::unknown;
  LayerSpec spec;
  spec.make = [] {
    kiln::LayerPtr layer = kiln::create_layer("kiln>Dense", Config{{"units", 4}, {"activation", "tanh"}, {"dtype", "int8_from_float64"}});
    layer->build_for(Shape{any, 2, 5});
    std::vector<std::int8_t> kernel(20);
    for (std::size_t i = 0; i < kernel.size(); ++i) kernel[i] = static_cast<std::int8_t>(static_cast<int>(i * 37 % 255) - 127);
    kiln::Array scale = kiln::Array::from_vector(std::vector<double>{90.0, 120.5, 64.25, 300.0}, Shape{4});
    kiln::Array bias = kiln::Array::from_vector(std::vector<double>{0.1, -0.2, 0.3, 0.05}, Shape{4});
    layer->set_weights({kiln::Array::from_vector(kernel, Shape{5, 4}), bias, scale});
    return layer;
  };
  spec.call = LayerCase{{random_input({3, 2, 5}, 2)}};
  spec.output_shapes = {Shape{any, 2, 4}};
  spec.differentiable = false;
  spec.bad_inputs = {{"another last dimension", {{any, 2, 6}}, "was built for inputs with last dimension 5"}};
  return spec;
}

}  // namespace

KILN_LAYER_HARNESS("kiln>Dense", dense_spec)

TEST_CASE("kiln>Dense in int8: the layer harness (shapes, config, file, bad input)", "[layers][harness][quantize]") {
  check_layer(int8_dense_spec());
}
