#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/layers/normalization/batch_normalization.hpp>
#include <kiln/layers/core/dense.hpp>
#include <kiln/layers/model_base.hpp>
#include <kiln/optim/optimizer.hpp>
#include <kiln/models/model.hpp>
#include "support/layer_check.hpp"

using kiln::Array;
using kiln::Config;
using kiln::Shape;
using namespace kiln::testing;
using Catch::Contains;

namespace {
constexpr std::int64_t any = Shape::unknown;

// Non-trivial moving statistics and gamma, so inference is not the identity.
Config perturbed() {
  return Config{
      {"gamma_initializer",
       Config{{"class_name", "RandomUniform"}, {"config", Config{{"minval", 0.5}, {"maxval", 1.5}, {"seed", 1}}}}},
      {"beta_initializer", "random_normal"},
      {"moving_mean_initializer", "random_normal"},
      {"moving_variance_initializer", Config{{"class_name", "Constant"}, {"config", Config{{"value", 2.5}}}}}};
}

LayerSpec batch_normalization_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::BatchNormalization(-1, perturbed())); };
  spec.call = LayerCase{{random_input({4, 3, 5}, 1)}};
  spec.output_shapes = {Shape{any, 3, 5}};
  spec.bad_inputs = {{"another feature size", {{any, 3, 6}}, "was built for inputs of rank 3 with 5 features"},
                     {"another rank", {{any, 5}}, "was built for inputs of rank 3"}};
  return spec;
}

// x: 4 samples of 2 features; column 0 is 1 2 3 6 (mean 3, variance 3.5), column 1 is 0 0 4 4 (mean 2,
// variance 4).
Array four_samples() { return Array::from_vector(std::vector<double>{1, 0, 2, 0, 3, 4, 6, 4}, {4, 2}); }
}  // namespace

KILN_LAYER_HARNESS("kiln>BatchNormalization", batch_normalization_spec)

TEST_CASE("BatchNormalization: training-mode gradients of inputs, gamma and beta", "[layers][batch_norm][grad]") {
  for (const std::int64_t axis : {-1, 1}) {
    kiln::BatchNormalization bn(axis, perturbed());
    LayerCase c{{random_input({3, 4, 2}, 2)}};
    c.training = true;
    const GradcheckReport report = gradcheck_layer(*bn, c);
    INFO("axis " << axis << ": " << report.worst_entry());
    CHECK(report.max_relative_error <= 1e-6);
  }
}

TEST_CASE("BatchNormalization: training output, moving statistics after N steps, inference output",
          "[layers][batch_norm]") {
  const kiln::Tensor x = kiln::Input({any, 2}, kiln::DType::float64);
  kiln::BatchNormalization bn(-1, {{"momentum", 0.9}, {"epsilon", 0.01}});
  kiln::Model model(x, bn(x));
  // A learning rate of 0: gamma and beta stay 1 and 0, so only the moving statistics move.
  model.compile(kiln::create_optimizer("sgd", {{"learning_rate", 0.0}}), "mse");
  const Array data = four_samples();
  const std::vector<double> mean{3, 2}, variance{3.5, 4};

  // Training mode by hand: (x − batch mean) / sqrt(batch variance + ε).
  const Array trained = run_layer(*bn,
                                  [&] {
                                    LayerCase c{{data}};
                                    c.training = true;
                                    return c;
                                  }())
                            .at(0);
  for (std::size_t i = 0; i < 8; ++i)
    CHECK(trained.flat(i) == Approx((data.flat(i) - mean[i % 2]) / std::sqrt(variance[i % 2] + 0.01)).epsilon(1e-12));

  const int steps = 5;
  for (int step = 0; step < steps; ++step) model.train_on_batch(data, data);
  // moving = moving·m + batch·(1 − m) each step: after N steps, initial·mᴺ + batch·(1 − mᴺ).
  const double kept = std::pow(0.9, steps);
  const std::vector<Array> weights = bn.get_weights();  // gamma, beta, moving_mean, moving_variance
  REQUIRE(weights.size() == 4);
  for (std::size_t f = 0; f < 2; ++f) {
    CHECK(weights[0].flat(f) == 1.0);
    CHECK(weights[1].flat(f) == 0.0);
    CHECK(weights[2].flat(f) == Approx(0.0 * kept + mean[f] * (1 - kept)).epsilon(1e-12));
    CHECK(weights[3].flat(f) == Approx(1.0 * kept + variance[f] * (1 - kept)).epsilon(1e-12));
  }
  // Inference: the moving statistics normalize.
  const Array predicted = model.predict(data);
  for (std::size_t i = 0; i < 8; ++i)
    CHECK(predicted.flat(i) ==
          Approx((data.flat(i) - weights[2].flat(i % 2)) / std::sqrt(weights[3].flat(i % 2) + 0.01)).epsilon(1e-12));
  // Evaluation does not move them.
  model.test_on_batch(data, data);
  CHECK(bn.get_weights()[2].bitwise_equal(weights[2]));
}

TEST_CASE("BatchNormalization: not trainable, it normalizes with the moving statistics and keeps them",
          "[layers][batch_norm]") {
  const kiln::Tensor x = kiln::Input({any, 2}, kiln::DType::float64);
  kiln::BatchNormalization bn(-1, perturbed());
  kiln::Model model(x, kiln::Dense(1)(bn(x)));
  bn->set_trainable(false);
  model.compile("sgd", "mse");
  const Array data = four_samples();
  const std::vector<Array> before = bn.get_weights();
  const Array y = Array::from_vector(std::vector<double>{1, 2, 3, 4}, {4, 1});
  model.train_on_batch(data, y);
  const std::vector<Array> after = bn.get_weights();
  for (std::size_t i = 0; i < 4; ++i) CHECK(after[i].bitwise_equal(before[i]));
  LayerCase c{{data}};
  c.training = true;
  const Array trained = run_layer(*bn, c).at(0);
  c.training = false;
  CHECK(trained.bitwise_equal(run_layer(*bn, c).at(0)));
}

TEST_CASE("BatchNormalization inside a frozen model runs in inference mode (Keras 3's fine-tuning)",
          "[layers][batch_norm]") {
  // A base model holding a BatchNormalization, frozen as a whole and trained under a new head: the
  // freeze reaches the inner layer, which keeps its moving statistics and normalizes with them.
  const kiln::Tensor x = kiln::Input({any, 2}, kiln::DType::float64);
  kiln::BatchNormalization bn(-1, perturbed());
  kiln::Model base(x, bn(x));
  base->set_trainable(false);
  CHECK_FALSE(bn->trainable());
  CHECK_FALSE(bn.get_config().get_bool("trainable"));
  const kiln::Tensor input = kiln::Input({any, 2}, kiln::DType::float64);
  kiln::Model model(input, kiln::Dense(1)(base(input)));
  model.compile(kiln::create_optimizer("sgd", {{"learning_rate", 0.1}}), "mse");
  const std::vector<Array> before = bn.get_weights();
  const Array y = Array::from_vector(std::vector<double>{1, 2, 3, 4}, {4, 1});
  model.fit(four_samples(), y, kiln::FitOptions().epochs(2).batch_size(2).verbose(0));
  const std::vector<Array> after = bn.get_weights();
  for (std::size_t i = 0; i < 4; ++i) CHECK(after[i].bitwise_equal(before[i]));
  // Unfreezing the base unfreezes the layer again, and training moves its statistics.
  base->set_trainable(true);
  CHECK(bn->trainable());
  model.compile(kiln::create_optimizer("sgd", {{"learning_rate", 0.1}}), "mse");
  model.fit(four_samples(), y, kiln::FitOptions().epochs(1).batch_size(4).verbose(0));
  CHECK_FALSE(bn.get_weights()[2].bitwise_equal(before[2]));
}

TEST_CASE("BatchNormalization: Keras's weights, config and summary", "[layers][batch_norm][config]") {
  kiln::BatchNormalization bn;
  bn->build_for(Shape{any, 8, 8, 16});
  const std::vector<kiln::Weight> weights = bn.weights();
  REQUIRE(weights.size() == 4);
  CHECK(weights[0].path == "gamma");
  CHECK(weights[1].path == "beta");
  CHECK(weights[2].path == "moving_mean");
  CHECK(weights[3].path == "moving_variance");
  CHECK(bn->trainable_weights().size() == 2);
  CHECK(bn->non_trainable_weights().size() == 2);
  const Config config = bn.get_config();
  CHECK(config.get_int("axis") == -1);
  CHECK(config.get_double("momentum") == 0.99);
  CHECK(config.get_double("epsilon") == 1e-3);
  CHECK(config.get_bool("center"));
  CHECK(config.get_bool("scale"));
  CHECK(config.at("moving_variance_initializer").get_string("class_name") == "Ones");
  CHECK_FALSE(config.get_bool("renorm"));

  kiln::BatchNormalization plain(-1, {{"center", false}, {"scale", false}});
  plain->build_for(Shape{any, 3});
  CHECK(plain.weights().size() == 2);

  const kiln::Tensor x = kiln::Input({any, 4});
  kiln::Model model(x, kiln::BatchNormalization()(x));
  const std::string summary = model.summary_string();
  CHECK_THAT(summary, Contains("Trainable params: 8") && Contains("Non-trainable params: 8"));
}

TEST_CASE("BatchNormalization: bad arguments and axes fail early, naming the layer", "[layers][batch_norm][errors]") {
  CHECK_THROWS_WITH(kiln::BatchNormalization(-1, {{"epsilon", 0.0}}), Contains("epsilon must be positive"));
  CHECK_THROWS_WITH(kiln::BatchNormalization(-1, {{"momentum", 1.5}}), Contains("momentum must be in [0, 1]"));
  CHECK_THROWS_WITH(kiln::BatchNormalization(-1, {{"renorm", true}}), Contains("renorm=true is not supported"));
  CHECK_THROWS_WITH(kiln::BatchNormalization(-1, {{"gamma_regularizer", "l3"}}), Contains("l3"));
  kiln::BatchNormalization far(3, {{"name", "far"}});
  CHECK_THROWS_WITH(far(kiln::Input({any, 4})),
                    Contains("BatchNormalization 'far'") && Contains("axis 3 does not exist in inputs of rank 2"));
}
