// Keras's bfloat16 dtype policies: "mixed_bfloat16" (float32 variables, bfloat16 products) and "bfloat16"
// (bfloat16 variables and products), on a layer or as the global policy.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/layers/core/dense.hpp>
#include <kiln/layers/model_base.hpp>
#include <kiln/models/model.hpp>
#include <kiln/ops/ops.hpp>
#include <kiln/optim/optimizer.hpp>
#include "support/gradcheck.hpp"
#include "support/layer_check.hpp"

using kiln::Array;
using kiln::Config;
using kiln::DType;
using kiln::Shape;
using kiln::Tensor;
using namespace kiln::testing;

namespace {
// x·W + b in float64 over x and W rounded to bfloat16: what a Dense computing its product in bfloat16 gives, up to the
// order of its float32 sums.
Array rounded_dense(const Array& x, const Array& kernel, const Array& bias) {
  const Array rx = kiln::ops::round_to_bfloat16(x), rw = kiln::ops::round_to_bfloat16(kernel);
  // (x and kernel float32: rounding reads float32 values)
  const std::int64_t rows = x.shape()[0], k = x.shape()[1], units = kernel.shape()[1];
  Array out({rows, units}, DType::float64);
  for (std::int64_t i = 0; i < rows; ++i)
    for (std::int64_t j = 0; j < units; ++j) {
      double total = bias.flat(static_cast<std::size_t>(j));
      for (std::int64_t p = 0; p < k; ++p)
        total += rx.flat(static_cast<std::size_t>(i * k + p)) * rw.flat(static_cast<std::size_t>(p * units + j));
      out.set_flat(static_cast<std::size_t>(i * units + j), total);
    }
  return out;
}

bool holds_bfloat16_values(const Array& values) {
  const Array rounded = kiln::ops::round_to_bfloat16(values);
  return rounded.bitwise_equal(values);
}

// Restores the global policy when a test ends, however it ends.
struct GlobalPolicy {
  explicit GlobalPolicy(const std::string& name) { kiln::set_dtype_policy(name); }
  ~GlobalPolicy() { kiln::set_dtype_policy("float32"); }
};
}  // namespace

TEST_CASE("mixed_bfloat16: a Dense keeps float32 weights and computes its product in bfloat16", "[layers][bfloat16]") {
  kiln::Dense mixed(6, "linear", {{"dtype", "mixed_bfloat16"}, {"bias_initializer", "random_normal"}});
  const Array x = random_input({9, 40}, 1).astype(DType::float32);
  const Array out = run_layer(*mixed, LayerCase{{x}})[0];
  CHECK(mixed->policy_name() == "mixed_bfloat16");
  CHECK(mixed->dtype() == DType::float32);
  CHECK(mixed->bfloat16_products());
  CHECK_FALSE(mixed->bfloat16_variables());
  const std::vector<kiln::Weight> weights = mixed.weights();
  CHECK_FALSE(holds_bfloat16_values(weights[0].value));  // float32 variables (Glorot draws are not bfloat16)
  const Array expected = rounded_dense(x, weights[0].value, weights[1].value);
  CHECK(max_abs_difference(out.astype(DType::float64), expected) < 1e-5);
  // Within bfloat16's error of the float32 layer on the same weights, and not equal to it.
  kiln::Dense plain(6, "linear");
  run_layer(*plain, LayerCase{{x}});
  plain.set_weights(mixed.get_weights());
  const Array exact = run_layer(*plain, LayerCase{{x}})[0];
  const double difference = max_abs_difference(out, exact);
  CHECK(difference > 0.0);
  CHECK(difference < 3e-2);
}

TEST_CASE("bfloat16 policies: written back as Keras writes them and read from a DTypePolicy", "[layers][bfloat16]") {
  for (const std::string name : {"mixed_bfloat16", "bfloat16"}) {
    INFO(name);
    kiln::Dense dense(3, "tanh", {{"dtype", name}});
    check_config_round_trip(dense, LayerCase{{random_input({2, 5}, 3).astype(DType::float32)}});
    CHECK(dense.get_config().get_string("dtype") == name);
    const Config policy = {{"module", "keras"},
                           {"class_name", "DTypePolicy"},
                           {"config", {{"name", name}}},
                           {"registered_name", Config()}};
    kiln::LayerPtr from_policy = kiln::create_layer("kiln>Dense", Config{{"units", 3}, {"dtype", policy}});
    CHECK(from_policy->policy_name() == name);
    // A quantized policy's source may be a bfloat16 policy: written back with it.
    kiln::LayerPtr quantized =
        kiln::create_layer("kiln>Dense", Config{{"units", 3}, {"dtype", "int8_from_" + name}});
    CHECK(quantized->policy_name() == name);
    CHECK(quantized->quantization_mode() == "int8");
  }
  CHECK_THROWS_WITH(kiln::Dense(Config{{"units", 2}, {"dtype", "mixed_float16"}}),
                    Catch::Contains("Dense") && Catch::Contains("mixed_float16") && Catch::Contains("bfloat16"));
  CHECK_THROWS_AS(kiln::Dense(Config{{"units", 2}, {"dtype", "float16"}}), kiln::ConfigError);
}

TEST_CASE("bfloat16: a layer's variables hold bfloat16 values when drawn and when set", "[layers][bfloat16]") {
  kiln::Dense dense(5, "linear", {{"dtype", "bfloat16"}, {"bias_initializer", "random_normal"}});
  run_layer(*dense, LayerCase{{random_input({2, 7}, 4).astype(DType::float32)}});
  CHECK(dense->bfloat16_variables());
  for (const kiln::Weight& weight : dense.weights()) {
    CHECK(weight.bfloat16);
    CHECK(holds_bfloat16_values(weight.value));
  }
  std::vector<Array> values = dense.get_weights();
  values[0] = random_input(values[0].shape(), 9).astype(DType::float32);
  dense.set_weights(values);
  const Array kept = dense.get_weights()[0];
  CHECK(holds_bfloat16_values(kept));
  CHECK(kept.bitwise_equal(kiln::ops::round_to_bfloat16(values[0])));
}

TEST_CASE("the global dtype policy: layers made after it take it, a layer's own dtype wins", "[layers][bfloat16]") {
  {
    GlobalPolicy policy("mixed_bfloat16");
    CHECK(kiln::dtype_policy() == "mixed_bfloat16");
    kiln::Dense taken(2);
    kiln::Dense own(2, "linear", {{"dtype", "float32"}});
    CHECK(taken->policy_name() == "mixed_bfloat16");
    CHECK(taken.get_config().get_string("dtype") == "mixed_bfloat16");
    CHECK(own->policy_name() == "float32");
    CHECK_FALSE(own->bfloat16_products());
  }
  CHECK(kiln::dtype_policy() == "float32");
  CHECK(kiln::Dense(2)->policy_name() == "float32");
  CHECK_THROWS_WITH(kiln::set_dtype_policy("mixed_float16"), Catch::Contains("mixed_float16"));
  CHECK(kiln::dtype_policy() == "float32");
}

TEST_CASE("mixed_bfloat16: a float32 layer inside computes in float32, products outside layers too",
          "[layers][bfloat16]") {
  const Array x = random_input({4, 16}, 5).astype(DType::float32);
  kiln::Dense inner(3, "linear", {{"dtype", "float32"}});
  run_layer(*inner, LayerCase{{x}});
  const Array out = evaluate(
      [&](const std::vector<Tensor>& in) {
        kiln::Graph::ProductPrecision bf16(in[0].graph(), true);
        const Tensor y = inner(in[0]);
        CHECK(in[0].graph().bfloat16_products());  // the scope is back after the layer's call
        return y;
      },
      {x});
  kiln::Dense plain(3);
  run_layer(*plain, LayerCase{{x}});
  plain.set_weights(inner.get_weights());
  CHECK(max_abs_difference(out, run_layer(*plain, LayerCase{{x}})[0]) == 0.0);
}

TEST_CASE("mixed_bfloat16: training updates float32 variables and the loss falls", "[layers][bfloat16][train]") {
  GlobalPolicy policy("mixed_bfloat16");
  kiln::Sequential model({kiln::Dense(16, "tanh"), kiln::Dense(1)});
  model.build({Shape::unknown, 8});
  model.compile(kiln::create_optimizer("adam", Config{{"learning_rate", 0.01}}), "mse");
  const Array x = random_input({64, 8}, 6).astype(DType::float32);
  Array y({64, 1}, DType::float32);
  for (std::int64_t i = 0; i < 64; ++i) {
    double total = 0;
    for (std::int64_t j = 0; j < 8; ++j) total += x.flat(static_cast<std::size_t>(i * 8 + j)) * (j % 3 - 1);
    y.set_flat(static_cast<std::size_t>(i), std::sin(total));
  }
  const kiln::History history = model.fit(x, y, kiln::FitOptions().epochs(30).batch_size(16).verbose(0));
  const std::vector<double>& loss = history["loss"];
  CHECK(loss.back() < 0.5 * loss.front());
  // Adam's small steps stay in the float32 variables (bfloat16 ones would round most of them away).
  bool any_float32 = false;
  for (const kiln::Weight& weight : model.weights()) {
    CHECK(weight.value.dtype() == DType::float32);
    CHECK_FALSE(weight.bfloat16);
    any_float32 = any_float32 || !holds_bfloat16_values(weight.value);
  }
  CHECK(any_float32);
}
