// Keras's bfloat16 dtype policies: "mixed_bfloat16" (float32 variables, bfloat16 products) and "bfloat16"
// (bfloat16 variables and products), on a layer or as the global policy.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/kiln.hpp>
#include <kiln/layers/core/dense.hpp>
#include <kiln/layers/rnn/wrappers.hpp>
#include <kiln/layers/model_base.hpp>
#include <kiln/models/model.hpp>
#include <kiln/ops/ops.hpp>
#include <kiln/optim/optimizer.hpp>
#include "support/gradcheck.hpp"
#include "support/layer_check.hpp"
#include "support/temp_dir.hpp"

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

TEST_CASE("bfloat16: a composite layer's parts take its policy, the global one yields to a parent's",
          "[layers][bfloat16]") {
  const Array x = random_input({2, 5, 8}, 11).astype(DType::float32);
  kiln::TransformerEncoder encoder(16, 2, {{"dtype", "bfloat16"}});
  run_layer(*encoder, LayerCase{{x}});
  const std::vector<kiln::Weight> weights = encoder.weights();
  REQUIRE(weights.size() > 4);
  for (const kiln::Weight& weight : weights) {
    INFO(weight.path);
    CHECK(weight.bfloat16);
    CHECK(holds_bfloat16_values(weight.value));
  }
  for (const kiln::LayerPtr& part : encoder->layers()) CHECK(part->policy_name() == "bfloat16");
  // Made under a global mixed_bfloat16, a float32 parent's parts compute in float32: the parent's policy wins.
  GlobalPolicy policy("mixed_bfloat16");
  kiln::TransformerEncoder plain(16, 2, {{"dtype", "float32"}});
  run_layer(*plain, LayerCase{{x}});
  for (const kiln::LayerPtr& part : plain->layers()) CHECK(part->policy_name() == "float32");
}

TEST_CASE("bfloat16: a wrapped layer keeps its own policy, as Keras fixes it when the layer is made",
          "[layers][bfloat16]") {
  const Array x = random_input({3, 4, 24}, 12).astype(DType::float32);
  kiln::Dense inner(5);  // float32, made before the wrapper
  kiln::TimeDistributed wrapper(inner, {{"dtype", "mixed_bfloat16"}});
  const Array wrapped = run_layer(*wrapper, LayerCase{{x}})[0];
  CHECK(inner->policy_name() == "float32");
  kiln::Dense alone(5);
  run_layer(*alone, LayerCase{{x}});
  alone.set_weights(inner.get_weights());
  CHECK(max_abs_difference(wrapped, run_layer(*alone, LayerCase{{x}})[0]) == 0.0);
}

TEST_CASE("bfloat16: variables stay bfloat16 through training and through loading float32 weights",
          "[layers][bfloat16][train]") {
  const Tensor x = kiln::Input({Shape::unknown, 6}, DType::float32, "x");
  const Tensor y = kiln::Dense(1, "", {{"name", "head"}, {"dtype", "bfloat16"}})(
      kiln::Dense(12, "tanh", {{"name", "hidden"}, {"dtype", "bfloat16"}})(x));
  kiln::Model model(x, y);
  model.compile(kiln::create_optimizer("adam", Config{{"learning_rate", 0.01}}), "mse");
  const Array inputs = random_input({32, 6}, 13).astype(DType::float32);
  const Array targets = random_input({32, 1}, 14).astype(DType::float32);
  const std::vector<Array> before = model.get_weights();
  model.fit(inputs, targets, kiln::FitOptions().epochs(3).batch_size(8).verbose(0));
  const std::vector<Array> after = model.get_weights();
  bool moved = false;
  for (std::size_t i = 0; i < after.size(); ++i) {
    CHECK(holds_bfloat16_values(after[i]));
    moved = moved || !after[i].bitwise_equal(before[i]);
  }
  CHECK(moved);
  // float32 weights from a file Keras wrote for the float32 model read into the bfloat16 one as Keras assigns them.
  kiln::testing::TempDir folder;
  const Tensor fx = kiln::Input({Shape::unknown, 6}, DType::float32, "x");
  kiln::Model float_model(fx, kiln::Dense(1, "", {{"name", "head"}})(kiln::Dense(12, "tanh", {{"name", "hidden"}})(fx)));
  kiln::save_keras_weights(*float_model.ptr(), folder.file("float.weights.h5"));
  kiln::load_keras_weights(*model.ptr(), folder.file("float.weights.h5"));
  const std::vector<Array> loaded = model.get_weights(), source = float_model.get_weights();
  for (std::size_t i = 0; i < loaded.size(); ++i) {
    CHECK(holds_bfloat16_values(loaded[i]));
    CHECK(loaded[i].bitwise_equal(kiln::ops::round_to_bfloat16(source[i])));
  }
}

TEST_CASE("kiln::quantize keeps a mixed_bfloat16 source and leaves bfloat16 layers float", "[layers][bfloat16]") {
  const Tensor x = kiln::Input({Shape::unknown, 6}, DType::float32, "x");
  const Tensor h = kiln::Dense(8, "relu", {{"name", "mixed"}, {"dtype", "mixed_bfloat16"}})(x);
  kiln::Model model(x, kiln::Dense(2, "", {{"name", "stored"}, {"dtype", "bfloat16"}})(h));
  kiln::QuantizationReport report;
  kiln::Model small = kiln::quantize(model, "int8", &report);
  CHECK(small.get_layer("mixed")->quantization_mode() == "int8");
  CHECK(small.get_layer("mixed")->policy_name() == "mixed_bfloat16");
  CHECK(small.get_layer("stored")->quantization_mode().empty());
  REQUIRE(report.skipped.size() == 1);
  CHECK(report.skipped[0].second.find("bfloat16") != std::string::npos);
}

TEST_CASE("mixed_bfloat16: an int4 Dense by blocks multiplies its float kernel in bfloat16, as any product there",
          "[layers][bfloat16][quantize]") {
  // Keras's int4_from_mixed_bfloat16: the kernel made float ((value - zero) · scale), cast to the compute dtype and
  // multiplied; kiln rounds both operands to bfloat16 and sums in float32, as for a float kernel.
  for (const std::int64_t rows : {std::int64_t{1}, std::int64_t{9}}) {  // a token's row, and a batch
    INFO(rows << " rows");
    kiln::Dense dense(6, "linear", {{"dtype", "int4/8_from_mixed_bfloat16"}});
    const Array x = random_input({rows, 40}, 3).astype(DType::float32);
    run_layer(*dense, LayerCase{{x}});
    std::vector<Array> weights = dense.get_weights();  // kernel (40, 3) packed, bias, scale (5, 6), zero, g_idx
    REQUIRE(weights.size() == 5);
    kiln::Rng rng(5);
    std::vector<int> values(40 * 6);
    for (int& v : values) v = static_cast<int>(rng.uniform(0.0, 16.0)) - 8;
    for (std::int64_t p = 0; p < 40; ++p)
      for (std::int64_t b = 0; b < 3; ++b)
        weights[0].set_flat(static_cast<std::size_t>(p * 3 + b),
                            static_cast<std::int8_t>(static_cast<std::uint8_t>((values[p * 6 + 2 * b] & 15) |
                                                                               ((values[p * 6 + 2 * b + 1] & 15) << 4))));
    for (std::size_t i = 0; i < weights[1].size(); ++i) weights[1].set_flat(i, 0.1 * static_cast<double>(i));
    for (std::size_t i = 0; i < weights[2].size(); ++i) weights[2].set_flat(i, 0.05 + 0.01 * static_cast<double>(i));
    for (std::size_t i = 0; i < weights[3].size(); ++i) weights[3].set_flat(i, static_cast<double>(static_cast<int>(i % 5) - 2));
    dense.set_weights(weights);
    Array kernel({40, 6}, DType::float32);
    for (std::int64_t p = 0; p < 40; ++p)
      for (std::int64_t j = 0; j < 6; ++j) {
        const std::size_t at = static_cast<std::size_t>((p / 8) * 6 + j);
        kernel.set_flat(static_cast<std::size_t>(p * 6 + j),
                        (static_cast<float>(values[p * 6 + j]) - static_cast<float>(weights[3].flat(at))) *
                            static_cast<float>(weights[2].flat(at)));
      }
    const Array out = run_layer(*dense, LayerCase{{x}})[0];
    CHECK(max_abs_difference(out.astype(DType::float64), rounded_dense(x, kernel, weights[1])) < 1e-4);
  }
}
