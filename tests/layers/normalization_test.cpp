#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/layers/core/dense.hpp>
#include <kiln/layers/preprocessing/normalization.hpp>
#include <kiln/models/model.hpp>
#include "support/layer_check.hpp"

using kiln::Array;
using kiln::Config;
using kiln::Shape;
using namespace kiln::testing;
using Catch::Contains;

namespace {
constexpr std::int64_t any = Shape::unknown;

LayerSpec normalization_spec() {
  LayerSpec spec;
  spec.make = [] {
    kiln::Normalization layer(-1);
    layer.adapt(random_input({10, 3, 4}, 7, -2.0, 5.0));
    return kiln::LayerPtr(layer);
  };
  spec.call = LayerCase{{random_input({2, 3, 4}, 1)}};
  spec.output_shapes = {Shape{any, 3, 4}};
  spec.bad_inputs = {{"another kept size", {{any, 3, 5}}, "was built for inputs whose kept axes have the sizes (4,)"},
                     {"rank 2", {{any, 4}}, "was built for inputs of rank 3"}};
  return spec;
}

// Rows of 2 features: column 0 is 1 2 3 6 (mean 3, variance 3.5), column 1 is 0 0 4 4 (mean 2, variance 4).
Array four_rows() { return Array::from_vector(std::vector<double>{1, 0, 2, 0, 3, 4, 6, 4}, {4, 2}); }
}  // namespace

KILN_LAYER_HARNESS("kiln>Normalization", normalization_spec)

TEST_CASE("Normalization.adapt: per-feature mean and biased variance, then (x - mean) / std",
          "[layers][normalization]") {
  kiln::Normalization norm;
  norm.adapt(four_rows());
  const std::vector<kiln::Weight> weights = norm.weights();
  REQUIRE(weights.size() == 3);
  CHECK(weights[0].path == "mean");
  CHECK(weights[1].path == "variance");
  CHECK(weights[2].path == "count");
  CHECK_FALSE(weights[0].trainable);
  CHECK(weights[0].value.to_vector<double>() == std::vector<double>{3, 2});
  CHECK(weights[1].value.to_vector<double>() == std::vector<double>{3.5, 4});
  const std::vector<double> y = run_layer(*norm, LayerCase{{four_rows()}}).at(0).to_vector<double>();
  const double mean[2] = {3, 2}, variance[2] = {3.5, 4};
  for (std::size_t i = 0; i < 8; ++i)
    CHECK(y[i] == Approx((four_rows().flat(i) - mean[i % 2]) / std::sqrt(variance[i % 2])).epsilon(1e-14));

  // Batches combine as one data set: the same statistics from halves as from the whole.
  kiln::Normalization halves;
  halves.adapt(std::vector<Array>{four_rows().rows(0, 1), four_rows().rows(1, 3)});
  CHECK(halves.weights()[0].value.to_vector<double>()[0] == Approx(3).epsilon(1e-15));
  CHECK(halves.weights()[1].value.to_vector<double>()[0] == Approx(3.5).epsilon(1e-15));
  CHECK(halves.weights()[1].value.to_vector<double>()[1] == Approx(4).epsilon(1e-15));

  // invert maps normalized values back; a constant feature (variance 0) divides by 1e-7, not by zero.
  kiln::Normalization invert(-1, {{"invert", true}});
  invert.adapt(four_rows());
  const std::vector<double> back =
      run_layer(*invert, LayerCase{{Array::from_vector(y, {4, 2})}}).at(0).to_vector<double>();
  for (std::size_t i = 0; i < 8; ++i) CHECK(back[i] == Approx(four_rows().flat(i)).epsilon(1e-13));
  kiln::Normalization flat;
  flat.adapt(Array::full({3, 1}, 2.0, kiln::DType::float64));
  CHECK(run_layer(*flat, LayerCase{{Array::full({1, 1}, 2.5, kiln::DType::float64)}}).at(0).flat(0) ==
        Approx(0.5 / 1e-7));
}

TEST_CASE("Normalization over several axes, over everything, and with given statistics", "[layers][normalization]") {
  // axis (1, 2) of (n, 2, 3): one statistic per (i, j); axis null: one over all values.
  const Array data = random_input({6, 2, 3}, 11, -1, 3);
  kiln::Normalization both(Config{{"axis", Config::list({1, 2})}});
  both.adapt(data);
  REQUIRE(both.weights()[0].value.shape() == Shape{2, 3});
  for (std::size_t p = 0; p < 6; ++p) {
    double mean = 0;
    for (std::size_t n = 0; n < 6; ++n) mean += data.flat(n * 6 + p) / 6;
    CHECK(both.weights()[0].value.flat(p) == Approx(mean).epsilon(1e-14));
  }
  kiln::Normalization everything(Config{{"axis", Config()}});
  everything.adapt(data);
  REQUIRE(everything.weights()[0].value.shape() == Shape{});
  double total = 0;
  for (std::size_t i = 0; i < data.size(); ++i) total += data.flat(i) / static_cast<double>(data.size());
  CHECK(everything.weights()[0].value.flat(0) == Approx(total).epsilon(1e-14));

  // Given mean and variance: constants, no weights; a number broadcasts to every feature.
  kiln::Normalization given(-1, {{"mean", Config::list({1.0, 2.0})}, {"variance", Config::list({4.0, 9.0})}});
  const std::vector<double> y =
      run_layer(*given, LayerCase{{Array::from_vector(std::vector<double>{3, 8}, {1, 2})}}).at(0).to_vector<double>();
  CHECK(y[0] == Approx(1.0).epsilon(1e-15));
  CHECK(y[1] == Approx(2.0).epsilon(1e-15));
  CHECK(given.weights().empty());
  kiln::Normalization scalar(-1, {{"mean", 1.0}, {"variance", 4.0}});
  CHECK(run_layer(*scalar, LayerCase{{Array::from_vector(std::vector<double>{3, 5}, {1, 2})}})
            .at(0)
            .to_vector<double>() == std::vector<double>{1, 2});
  const Config config = given.get_config();
  CHECK(config.at("axis") == Config::from_ints({-1}));  // Keras keeps axis as a tuple
  CHECK(config.at("mean") == Config::list({1.0, 2.0}));
  CHECK_FALSE(config.get_bool("invert"));
}

TEST_CASE("Normalization in a model: adapted statistics save, reload and stay fixed in fit",
          "[layers][normalization]") {
  kiln::Normalization norm;
  norm.adapt(four_rows());
  const kiln::Tensor x = kiln::Input({any, 2}, kiln::DType::float64);
  kiln::Model model(x, kiln::Dense(1)(norm(x)));
  CHECK_THAT(model.summary_string(), Contains("Non-trainable params: 5"));
  model.compile(kiln::create_optimizer("sgd", {{"learning_rate", 0.1}}), "mse");
  model.fit(four_rows(), Array::full({4, 1}, 1.0, kiln::DType::float64), kiln::FitOptions().epochs(2).verbose(0));
  CHECK(norm.weights()[0].value.to_vector<double>() == std::vector<double>{3, 2});
}

TEST_CASE("Normalization refuses bad arguments and data", "[layers][normalization][errors]") {
  CHECK_THROWS_AS(kiln::Normalization(-1, {{"mean", 1.0}}), kiln::ConfigError);
  CHECK_THROWS_WITH(kiln::Normalization(-1, {{"mean", 1.0}}), Contains("mean and variance must be given together"));
  CHECK_THROWS_WITH(kiln::Normalization(-1, {{"mean", Config::list({1.0})}, {"variance", Config::list({1.0, 2.0})}}),
                    Contains("the same shape"));
  CHECK_THROWS_WITH(kiln::Normalization(-1, {{"mean", Config::list({Config::list({1.0}), 2.0})}, {"variance", 1.0}}),
                    Contains("nested lists of one shape"));
  kiln::Normalization given(-1, {{"mean", 1.0}, {"variance", 4.0}});
  CHECK_THROWS_WITH(given.adapt(four_rows()), Contains("adapt() needs a layer without a given mean"));
  kiln::Normalization norm;
  norm.adapt(four_rows());
  CHECK_THROWS_AS(norm.adapt(Array({4, 3}, kiln::DType::float64)), kiln::ShapeError);
  CHECK_THROWS_WITH(norm.adapt(Array({4, 3}, kiln::DType::float64)), Contains("kept axis 1 differs"));
  CHECK_THROWS_WITH(kiln::Normalization(0).adapt(four_rows()), Contains("needs the kept axis 0 known"));
  CHECK_THROWS_WITH(kiln::Normalization(2).adapt(four_rows()), Contains("axis 2 does not exist"));
}
