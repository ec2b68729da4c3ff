#include <catch2/catch.hpp>

#include <cmath>

#include <kiln/core/error.hpp>
#include <kiln/layers/model_base.hpp>
#include <kiln/layers/attention/multi_head_attention.hpp>
#include "support/attention_reference.hpp"
#include "support/layer_check.hpp"

using kiln::Array;
using kiln::CallArgs;
using kiln::Config;
using kiln::Shape;
using kiln::Tensor;
using namespace kiln::testing;

namespace {

constexpr std::int64_t None = Shape::unknown;

// Head h's slice of a (E, N, depth) kernel as an (E, depth) matrix, and of an (N, depth) bias.
Array head_kernel(const Array& kernel, std::int64_t h) {
  const std::int64_t rows = kernel.shape()[0], heads = kernel.shape()[1], depth = kernel.shape()[2];
  Array out({rows, depth}, kiln::DType::float64);
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t d = 0; d < depth; ++d)
      out.set_flat(static_cast<std::size_t>(r * depth + d),
                   kernel.flat(static_cast<std::size_t>((r * heads + h) * depth + d)));
  return out;
}
Array head_bias(const Array& bias, std::int64_t h) {
  if (bias.empty()) return Array();
  const std::int64_t depth = bias.shape()[1];
  Array out({depth}, kiln::DType::float64);
  for (std::int64_t d = 0; d < depth; ++d)
    out.set_flat(static_cast<std::size_t>(d), bias.flat(static_cast<std::size_t>(h * depth + d)));
  return out;
}

// Multi-head attention from the layer's weights, one head at a time, in plain loops.
Array reference_mha(const std::vector<Array>& w, bool use_bias, std::int64_t heads, const Array& query,
                    const Array& key, const Array& value, const Array& mask, bool causal) {
  const std::size_t step = use_bias ? 2 : 1;
  auto bias = [&](std::size_t index) { return use_bias ? w[index + 1] : Array(); };
  const Array& wq = w[0];
  const Array& wk = w[step];
  const Array& wv = w[2 * step];
  const Array& wo = w[3 * step];
  const std::int64_t key_dim = wq.shape()[2], value_dim = wv.shape()[2], out_dim = wo.shape()[2];
  std::vector<Array> contexts;
  for (std::int64_t h = 0; h < heads; ++h) {
    const Array q = reference_dense(query, head_kernel(wq, h), head_bias(bias(0), h));
    const Array k = reference_dense(key, head_kernel(wk, h), head_bias(bias(step), h));
    const Array v = reference_dense(value, head_kernel(wv, h), head_bias(bias(2 * step), h));
    contexts.push_back(
        reference_attention(q, k, v, mask, causal, 1.0 / std::sqrt(static_cast<double>(key_dim))).output);
  }
  const Array merged = last_axis_concat(contexts);
  return reference_dense(merged, wo.reshape({heads * value_dim, out_dim}), bias(3 * step));
}

Array random_mask(const Shape& shape, std::uint64_t seed) {
  Array mask = random_input(shape, seed);
  for (std::size_t i = 0; i < mask.size(); ++i) mask.set_flat(i, mask.flat(i) > -0.4 ? 1.0 : 0.0);
  return mask;
}

}  // namespace

TEST_CASE("MultiHeadAttention(h): the TF2 form infers d_model and has bias-free per-head projections",
          "[layers][mha]") {
  kiln::MultiHeadAttention mha(4);
  LayerCase c({random_input({2, 5, 8}, 1), random_input({2, 6, 8}, 2), random_input({2, 6, 8}, 3)});  // [q, v, k]
  c.options = {{"return_attention_scores", true}};
  const std::vector<Shape> shapes = symbolic_output_shapes(*mha, c);
  CHECK(shapes == std::vector<Shape>{Shape{None, 5, 8}, Shape{None, 4, 5, 6}});
  CHECK(mha->key_dim() == 2);
  const std::vector<kiln::Weight> weights = mha.weights();
  REQUIRE(weights.size() == 4);
  CHECK(weights[0].path == "query/kernel");
  CHECK(weights[0].value.shape() == Shape{8, 4, 2});
  CHECK(weights[3].path == "attention_output/kernel");
  CHECK(weights[3].value.shape() == Shape{4, 2, 8});
  CHECK(mha.get_config().at("key_dim").is_null());
  CHECK(mha.get_config().get_bool("use_bias") == false);
}

TEST_CASE("MultiHeadAttention: Keras's form has Keras's weights, config keys and output shapes", "[layers][mha]") {
  kiln::MultiHeadAttention mha(2, 3, {{"value_dim", 5}, {"output_shape", 6}});
  const Tensor query = kiln::Input({None, 4, 7}), value = kiln::Input({None, 9, 10});
  const Tensor output = mha(query, value);
  CHECK(output.shape() == Shape{None, 4, 6});
  const std::vector<kiln::Weight> weights = mha.weights();
  const std::vector<std::pair<std::string, Shape>> expected = {{"query/kernel", {7, 2, 3}},
                                                               {"query/bias", {2, 3}},
                                                               {"key/kernel", {10, 2, 3}},
                                                               {"key/bias", {2, 3}},
                                                               {"value/kernel", {10, 2, 5}},
                                                               {"value/bias", {2, 5}},
                                                               {"attention_output/kernel", {2, 5, 6}},
                                                               {"attention_output/bias", {6}}};
  REQUIRE(weights.size() == expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    CHECK(weights[i].path == expected[i].first);
    CHECK(weights[i].value.shape() == expected[i].second);
  }
  const Config config = mha.get_config();
  for (const char* key :
       {"name", "trainable", "dtype", "num_heads", "key_dim", "value_dim", "dropout", "use_bias", "output_shape",
        "attention_axes", "kernel_initializer", "bias_initializer", "kernel_regularizer", "bias_regularizer",
        "activity_regularizer", "kernel_constraint", "bias_constraint", "seed"})
    CHECK(config.contains(key));
  CHECK(config.get_int("value_dim") == 5);
  CHECK(kiln::MultiHeadAttention(2, 3).get_config().get_int("value_dim") == 3);  // stored resolved, like Keras
}

TEST_CASE("MultiHeadAttention: matches a per-head plain-loop reference with masks and several head counts",
          "[layers][mha][reference]") {
  for (std::int64_t heads : {1, 2, 4})
    for (bool causal : {false, true})
      for (bool masked : {false, true}) {
        kiln::MultiHeadAttention mha(heads, 3, {{"bias_initializer", "random_normal"}});
        LayerCase c({random_input({2, 4, 6}, 1), random_input({2, 4, 7}, 2), random_input({2, 4, 5}, 3)});  // [q, v, k]
        Array mask;
        if (masked) {
          mask = random_mask({2, 4, 4}, 9);
          for (std::int64_t j = 0; j < 4; ++j)
            mask.set_flat(static_cast<std::size_t>(4 + j), 0.0);  // batch 0, query 1: nothing
          c.tensor_args = {{"attention_mask", mask}};
        }
        c.options = {{"use_causal_mask", causal}};
        const Array output = run_layer(*mha, c)[0];
        const Array expected =
            reference_mha(mha.get_weights(), true, heads, c.inputs[0], c.inputs[2], c.inputs[1], mask, causal);
        INFO("heads " << heads << " causal " << causal << " masked " << masked);
        CHECK(max_relative_difference(output, expected) <= 1e-10);
      }
}

TEST_CASE("MultiHeadAttention: the TF2 form matches the reference too", "[layers][mha][reference]") {
  kiln::MultiHeadAttention mha(2);
  const LayerCase c({random_input({3, 5, 8}, 4), random_input({3, 5, 8}, 5), random_input({3, 5, 8}, 6)});
  const Array output = run_layer(*mha, c)[0];
  const Array expected =
      reference_mha(mha.get_weights(), false, 2, c.inputs[0], c.inputs[2], c.inputs[1], Array(), false);
  CHECK(max_relative_difference(output, expected) <= 1e-10);
  const GradcheckReport report = gradcheck_layer(*mha, c);
  INFO(report.worst_entry());
  CHECK(report.max_relative_error <= 1e-6);
}

TEST_CASE("MultiHeadAttention: the handle's list call is the TF2 order, [query, key, value]", "[layers][mha]") {
  kiln::MultiHeadAttention mha(2, 2);
  const Tensor q = kiln::Input({None, 3, 4}), k = kiln::Input({None, 5, 6}), v = kiln::Input({None, 5, 7});
  const Tensor tf2 = mha({q, k, v});
  const Tensor keras = mha(q, v, k);
  CHECK(tf2.shape() == Shape{None, 3, 4});
  CHECK(keras.shape() == Shape{None, 3, 4});
  CHECK(mha.weights()[2].value.shape() == Shape{6, 2, 2});  // key/kernel from the key's 6 features
  CHECK(mha.weights()[4].value.shape() == Shape{7, 2, 2});  // value/kernel from the value's 7
}

TEST_CASE("MultiHeadAttention: a key given by keyword at the first call sizes the key projection", "[layers][mha]") {
  kiln::MultiHeadAttention mha(2, 2);
  const Tensor q = kiln::Input({None, 3, 4}), k = kiln::Input({None, 5, 6}), v = kiln::Input({None, 5, 7});
  const Tensor out = mha({q, v}, CallArgs().tensor("key", k));
  CHECK(out.shape() == Shape{None, 3, 4});
  CHECK(mha.weights()[2].value.shape() == Shape{6, 2, 2});  // key/kernel from the key's 6 features
  CHECK(mha.weights()[4].value.shape() == Shape{7, 2, 2});
  // Its build_config holds the key's shape, so a copy rebuilt from its config has the same weights' shapes.
  const kiln::LayerPtr copy = kiln::layer_from_config(kiln::serialize_layer(*mha.ptr()));
  REQUIRE(copy->built());
  CHECK(copy->weights()[2].value.shape() == Shape{6, 2, 2});
}

TEST_CASE("MultiHeadAttention: padding masks, causal masks with T != S, and nonbinary masks",
          "[layers][mha][reference]") {
  kiln::MultiHeadAttention mha(2, 3, {{"bias_initializer", "random_normal"}});
  LayerCase c({random_input({2, 3, 4}, 1), random_input({2, 5, 4}, 2)});  // [query, value]: T = 3, S = 5
  Array padding({2, 5}, kiln::DType::float64);
  for (std::int64_t j = 0; j < 5; ++j) {
    padding.set_flat(static_cast<std::size_t>(j), 1.0);
    padding.set_flat(static_cast<std::size_t>(5 + j), j < 2 ? 2.0 : 0.0);  // any nonzero means "may attend"
  }
  c.tensor_args = {{"attention_mask", padding}};
  c.options = {{"use_causal_mask", true}};
  const Array output = run_layer(*mha, c)[0];
  const Array expected = reference_mha(mha.get_weights(), true, 2, c.inputs[0], c.inputs[1], c.inputs[1],
                                       expand_padding_mask(padding, 3), true);
  CHECK(max_relative_difference(output, expected) <= 1e-10);
}

TEST_CASE("MultiHeadAttention: a fully masked query row gives zeros before the output projection",
          "[layers][mha][mask]") {
  kiln::MultiHeadAttention mha(2, 2, {{"use_bias", false}});
  LayerCase c({random_input({1, 3, 4}, 1), random_input({1, 3, 4}, 2)});  // [query, value]
  Array mask = Array::full({1, 3, 3}, 1.0, kiln::DType::float64);
  for (std::int64_t j = 0; j < 3; ++j) mask.set_flat(static_cast<std::size_t>(3 + j), 0.0);  // query 1 attends nothing
  c.tensor_args = {{"attention_mask", mask}};
  c.options = {{"return_attention_scores", true}};
  const std::vector<Array> outputs = run_layer(*mha, c);
  for (std::int64_t d = 0; d < 4; ++d) CHECK(outputs[0].flat(static_cast<std::size_t>(4 + d)) == 0.0);
  for (std::size_t i = 0; i < outputs[1].size(); ++i) CHECK(std::isfinite(outputs[1].flat(i)));
}

TEST_CASE("MultiHeadAttention: gradients of inputs and every weight match central differences", "[layers][mha][grad]") {
  kiln::MultiHeadAttention mha(2, 3, {{"value_dim", 2}, {"bias_initializer", "random_normal"}});
  LayerCase c({random_input({2, 3, 4}, 1), random_input({2, 4, 5}, 2), random_input({2, 4, 3}, 3)});
  c.tensor_args = {{"attention_mask", random_mask({2, 3, 4}, 4)}};
  c.options = {{"use_causal_mask", true}};
  const GradcheckReport report = gradcheck_layer(*mha, c);
  INFO(report.worst_entry());
  CHECK(report.max_relative_error <= 1e-6);
}

TEST_CASE("MultiHeadAttention: dropout acts only in training and is reproducible", "[layers][mha][dropout]") {
  kiln::MultiHeadAttention mha(2, 2, {{"dropout", 0.5}, {"seed", 3}});
  LayerCase c({random_input({2, 4, 4}, 1), random_input({2, 4, 4}, 2)});
  const Array inference = run_layer(*mha, c)[0];
  c.training = true;
  const Array first = run_layer(*mha, c)[0];
  const Array second = run_layer(*mha, c)[0];
  CHECK_FALSE(first.bitwise_equal(inference));
  CHECK(first.bitwise_equal(second));
  const GradcheckReport report = gradcheck_layer(*mha, c);
  INFO(report.worst_entry());
  CHECK(report.max_relative_error <= 1e-6);
}

TEST_CASE("MultiHeadAttention: config round trip for both forms", "[layers][mha][config]") {
  kiln::MultiHeadAttention keras(2, 3, {{"name", "keras_mha"}, {"use_bias", true}, {"dropout", 0.1}});
  check_config_round_trip(keras, LayerCase({random_input({2, 3, 4}, 1), random_input({2, 5, 6}, 2)}));
  kiln::MultiHeadAttention tf2(4);
  check_config_round_trip(
      tf2, LayerCase({random_input({2, 3, 8}, 1), random_input({2, 3, 8}, 2), random_input({2, 3, 8}, 3)}));
}

TEST_CASE("MultiHeadAttention: bad shapes fail at graph-build time naming the layer and shapes",
          "[layers][mha][errors]") {
  const Tensor x = kiln::Input({None, 5, 10});
  kiln::MultiHeadAttention tf2(kiln::Config{{"num_heads", 3}, {"name", "tf2"}});
  CHECK_THROWS_AS(tf2({x, x, x}), kiln::ShapeError);
  CHECK_THROWS_WITH(tf2({x, x, x}), Catch::Contains("MultiHeadAttention 'tf2'") && Catch::Contains("divisible") &&
                                        Catch::Contains("(None, 5, 10)"));

  kiln::MultiHeadAttention mha(2, 4, {{"name", "mha"}});
  const Tensor key = kiln::Input({None, 6, 10}), value = kiln::Input({None, 7, 10});
  CHECK_THROWS_WITH(mha(x, value, key), Catch::Contains("key and value differ") && Catch::Contains("(None, 6, 10)"));
  const Tensor good_value = kiln::Input({None, 6, 10});
  const Tensor bad_mask = kiln::Input({None, 5, 5});
  CHECK_THROWS_WITH(
      mha(x, good_value, CallArgs().tensor("attention_mask", bad_mask)),
      Catch::Contains("MultiHeadAttention 'mha'") && Catch::Contains("mask") && Catch::Contains("(None, 5, 5)"));
  CHECK_THROWS_AS(kiln::MultiHeadAttention(0, 4), kiln::ConfigError);
  CHECK_THROWS_AS(kiln::MultiHeadAttention(2, 4, {{"attention_axes", kiln::Config::list({2})}}), kiln::ConfigError);
}

// ---- the layer harness (Keras's form, with a mask; the TF2 form is the same class) -----------------------------

namespace {
LayerSpec multi_head_attention_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::MultiHeadAttention(2, 3, {{"bias_initializer", "random_normal"}})); };
  spec.call = LayerCase({random_input({2, 3, 4}, 1), random_input({2, 5, 4}, 2)});  // [query, value]
  spec.call.tensor_args = {{"attention_mask", random_mask({2, 3, 5}, 4)}};
  spec.call.options = {{"use_causal_mask", true}};
  spec.output_shapes = {Shape{None, 3, 4}};
  spec.bad_inputs = {{"another query size", {{None, 3, 5}, {None, 5, 4}}, "was built for other feature sizes"}};
  return spec;
}
}  // namespace

KILN_LAYER_HARNESS("kiln>MultiHeadAttention", multi_head_attention_spec)
