#include <catch2/catch.hpp>

#include <cmath>

#include <kiln/core/error.hpp>
#include <kiln/layers/attention/attention.hpp>
#include <kiln/layers/model_base.hpp>
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

// 1/0 padding over keys: batch b may attend the first `lengths[b]` keys.
Array padding_mask(const std::vector<std::int64_t>& lengths, std::int64_t keys) {
  Array mask({static_cast<std::int64_t>(lengths.size()), keys}, kiln::DType::float64);
  for (std::size_t b = 0; b < lengths.size(); ++b)
    for (std::int64_t j = 0; j < keys; ++j)
      mask.set_flat(b * static_cast<std::size_t>(keys) + static_cast<std::size_t>(j), j < lengths[b] ? 1.0 : 0.0);
  return mask;
}

LayerCase qkv_case(std::int64_t batch, std::int64_t queries, std::int64_t keys, std::int64_t depth,
                   std::int64_t value_depth) {
  return LayerCase({random_input({batch, queries, depth}, 11), random_input({batch, keys, depth}, 12),
                    random_input({batch, keys, value_depth}, 13)});
}

}  // namespace

TEST_CASE("DotProductAttention: output and weight shapes with an unknown batch", "[layers][attention]") {
  kiln::DotProductAttention attention(true);
  LayerCase c = qkv_case(2, 5, 7, 8, 3);
  c.options = {{"return_attention_scores", true}};
  const std::vector<Shape> shapes = symbolic_output_shapes(*attention, c);
  REQUIRE(shapes.size() == 2);
  CHECK(shapes[0] == Shape{None, 5, 3});
  CHECK(shapes[1] == Shape{None, 5, 7});
  CHECK(attention.count_params() == 0);
}

TEST_CASE("DotProductAttention: matches a plain-loop reference with padding and causal masks",
          "[layers][attention][reference]") {
  for (bool use_scale : {true, false})
    for (bool causal : {false, true})
      for (int mask_kind : {0, 1, 2}) {  // none, (B, S) padding, (B, T, S)
        kiln::DotProductAttention attention(use_scale);
        LayerCase c = qkv_case(3, 4, 4, 6, 5);
        Array full_mask;
        if (mask_kind == 1) {
          const Array padding = padding_mask({4, 2, 0}, 4);  // the last batch attends nothing
          c.tensor_args = {{"mask", padding}};
          full_mask = expand_padding_mask(padding, 4);
        } else if (mask_kind == 2) {
          full_mask = random_input({3, 4, 4}, 5);
          for (std::size_t i = 0; i < full_mask.size(); ++i)
            full_mask.set_flat(i, full_mask.flat(i) > -0.3 ? 1.0 : 0.0);
          c.tensor_args = {{"mask", full_mask}};
        }
        c.options = {{"use_causal_mask", causal}, {"return_attention_scores", true}};
        const std::vector<Array> outputs = run_layer(*attention, c);
        const double scale = use_scale ? 1.0 / std::sqrt(6.0) : 1.0;
        const ReferenceAttention expected =
            reference_attention(c.inputs[0], c.inputs[1], c.inputs[2], full_mask, causal, scale);
        INFO("use_scale " << use_scale << " causal " << causal << " mask kind " << mask_kind);
        CHECK(max_relative_difference(outputs[0], expected.output) <= 1e-10);
        CHECK(max_relative_difference(outputs[1], expected.weights) <= 1e-10);
      }
}

TEST_CASE("DotProductAttention: the causal mask is top-left aligned when T != S", "[layers][attention][reference]") {
  for (const auto& [queries, keys] : {std::pair<std::int64_t, std::int64_t>{3, 5}, {5, 3}}) {
    kiln::DotProductAttention attention(true);
    LayerCase c = qkv_case(2, queries, keys, 4, 3);
    c.options = {{"use_causal_mask", true}, {"return_attention_scores", true}};
    const std::vector<Array> outputs = run_layer(*attention, c);
    const ReferenceAttention expected = reference_attention(c.inputs[0], c.inputs[1], c.inputs[2], Array(), true, 0.5);
    INFO("T " << queries << " S " << keys);
    CHECK(max_relative_difference(outputs[0], expected.output) <= 1e-10);
    CHECK(max_relative_difference(outputs[1], expected.weights) <= 1e-10);
  }
}

TEST_CASE("DotProductAttention: a query with nothing to attend gets zeros, not NaN", "[layers][attention][mask]") {
  kiln::DotProductAttention attention(true);
  LayerCase c = qkv_case(1, 3, 3, 2, 2);
  c.tensor_args = {{"mask", padding_mask({0}, 3)}};
  for (const Array& output : run_layer(*attention, c))
    for (std::size_t i = 0; i < output.size(); ++i) CHECK(output.flat(i) == 0.0);
}

TEST_CASE("DotProductAttention: gradients match central differences with masks", "[layers][attention][grad]") {
  kiln::DotProductAttention attention(true);
  LayerCase c = qkv_case(2, 3, 4, 5, 2);
  c.tensor_args = {{"mask", padding_mask({3, 2}, 4)}};
  c.options = {{"use_causal_mask", true}};
  const GradcheckReport report = gradcheck_layer(*attention, c);
  INFO(report.worst_entry());
  CHECK(report.max_relative_error <= 1e-6);
}

TEST_CASE("DotProductAttention: config round trip and two-input form", "[layers][attention][config]") {
  kiln::DotProductAttention attention(false, {{"name", "dot"}});
  check_config_round_trip(attention, qkv_case(2, 3, 3, 4, 4));
  CHECK(attention.get_config().get_bool("use_scale") == false);
  // [query, value] uses the value as the key.
  kiln::DotProductAttention two(true);
  const LayerCase c({random_input({2, 3, 4}, 1), random_input({2, 5, 4}, 2)});
  const Array output = run_layer(*two, c)[0];
  const ReferenceAttention expected = reference_attention(c.inputs[0], c.inputs[1], c.inputs[1], Array(), false, 0.5);
  CHECK(max_relative_difference(output, expected.output) <= 1e-10);
}

TEST_CASE("DotProductAttention: bad shapes throw ShapeError naming the layer at graph-build time",
          "[layers][attention][errors]") {
  const Tensor q = kiln::Input({None, 5, 8}), k = kiln::Input({None, 6, 8}), v = kiln::Input({None, 7, 8});
  kiln::DotProductAttention attention(true, {{"name", "att"}});
  CHECK_THROWS_WITH(attention({q, k, v}), Catch::Contains("DotProductAttention 'att'") &&
                                              Catch::Contains("(None, 6, 8)") && Catch::Contains("(None, 7, 8)"));
  kiln::DotProductAttention other(true, {{"name", "att2"}});
  const Tensor wrong_mask = kiln::Input({None, 4});
  CHECK_THROWS_WITH(other({q, k, k}, CallArgs().tensor("mask", wrong_mask)),
                    Catch::Contains("DotProductAttention 'att2'") && Catch::Contains("(None, 4)"));
  // (batch, depth) inputs would let the samples of a batch attend to each other.
  const Tensor flat = kiln::Input({None, 8});
  CHECK_THROWS_WITH(kiln::DotProductAttention()({flat, flat, flat}), Catch::Contains("(batch, ..., length, depth)"));
  CHECK_THROWS_AS(other({q}), kiln::ConfigError);
  CHECK_THROWS_WITH(other({q, k, k}, CallArgs().option("causal", true)), Catch::Contains("use_causal_mask"));
}

TEST_CASE("Attention (Keras): dot scores, learned scale, query and value masks", "[layers][attention][keras]") {
  kiln::Attention attention(true);
  LayerCase c({random_input({2, 3, 4}, 1), random_input({2, 5, 4}, 2)});  // [query, value]
  const Array value_mask = padding_mask({5, 3}, 5);
  const Array query_mask = padding_mask({3, 2}, 3);
  c.tensor_args = {{"value_mask", value_mask}, {"query_mask", query_mask}};
  c.options = {{"return_attention_scores", true}};
  run_layer(*attention, c);  // builds
  REQUIRE(attention.weights().size() == 1);
  CHECK(attention.weights()[0].path == "scale");
  attention.set_weights({Array::full({}, 0.7, kiln::DType::float64)});  // the learned scale, not 1/sqrt(d)
  const std::vector<Array> outputs = run_layer(*attention, c);
  const ReferenceAttention expected =
      reference_attention(c.inputs[0], c.inputs[1], c.inputs[1], expand_padding_mask(value_mask, 3), false, 0.7);
  CHECK(max_relative_difference(outputs[1], expected.weights) <= 1e-10);
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t i = 0; i < 3; ++i)
      for (std::int64_t d = 0; d < 4; ++d) {
        const std::size_t index = static_cast<std::size_t>(((b * 3) + i) * 4 + d);
        const bool kept = query_mask.flat(static_cast<std::size_t>(b * 3 + i)) != 0.0;
        CHECK(outputs[0].flat(index) == Approx(kept ? expected.output.flat(index) : 0.0).margin(1e-12));
      }
  const GradcheckReport report = gradcheck_layer(*attention, c);
  INFO(report.worst_entry());
  CHECK(report.max_relative_error <= 1e-6);
}

TEST_CASE("Attention (Keras): query_mask on (batch, heads, T, d) inputs masks each query row",
          "[layers][attention][mask]") {
  kiln::Attention attention(false);
  LayerCase c({random_input({2, 2, 3, 4}, 6), random_input({2, 2, 5, 4}, 7)});  // [query, value], rank 4
  const Array query_mask = padding_mask({3, 1}, 3);                             // (batch, T)
  c.tensor_args = {{"query_mask", query_mask}};
  const Array masked = run_layer(*attention, c)[0];
  c.tensor_args = {};
  const Array plain = run_layer(*attention, c)[0];
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t h = 0; h < 2; ++h)
      for (std::int64_t i = 0; i < 3; ++i)
        for (std::int64_t d = 0; d < 4; ++d) {
          const std::size_t index = static_cast<std::size_t>(((b * 2 + h) * 3 + i) * 4 + d);
          const bool kept = query_mask.flat(static_cast<std::size_t>(b * 3 + i)) != 0.0;
          CHECK(masked.flat(index) == (kept ? plain.flat(index) : 0.0));
        }
  const Tensor q = kiln::Input({4, 2, 3, 8}), v = kiln::Input({4, 2, 5, 8});
  CHECK_THROWS_WITH(kiln::Attention()({q, v}, CallArgs().tensor("query_mask", kiln::Input({3, 3}))),
                    Catch::Contains("query_mask must be (batch, query_length)") && Catch::Contains("(3, 3)"));
  CHECK_THROWS_AS(kiln::Attention()({q, v}, CallArgs().tensor("query_mask", kiln::Input({4, 2}))), kiln::ShapeError);
}

TEST_CASE("Attention (Keras): concat scores match their formula", "[layers][attention][keras][reference]") {
  kiln::Attention attention(true, "concat");
  const LayerCase c({random_input({1, 2, 3}, 4), random_input({1, 3, 3}, 5)});  // [query, value]
  run_layer(*attention, c);
  attention.set_weights({Array::full({}, 0.8, kiln::DType::float64), Array::full({}, 1.3, kiln::DType::float64)});
  const Array output = run_layer(*attention, c)[0];
  // scores[i][j] = 1.3 * sum_d tanh(0.8 * (q[i][d] + k[j][d])), softmax over j, times v (= k here).
  const Array& q = c.inputs[0];
  const Array& v = c.inputs[1];
  for (std::int64_t i = 0; i < 2; ++i) {
    std::vector<double> scores(3);
    double total = 0;
    for (std::int64_t j = 0; j < 3; ++j) {
      double sum = 0;
      for (std::int64_t d = 0; d < 3; ++d)
        sum += std::tanh(0.8 *
                         (q.flat(static_cast<std::size_t>(i * 3 + d)) + v.flat(static_cast<std::size_t>(j * 3 + d))));
      scores[static_cast<std::size_t>(j)] = std::exp(1.3 * sum);
      total += scores[static_cast<std::size_t>(j)];
    }
    for (std::int64_t d = 0; d < 3; ++d) {
      double expected = 0;
      for (std::int64_t j = 0; j < 3; ++j)
        expected += scores[static_cast<std::size_t>(j)] / total * v.flat(static_cast<std::size_t>(j * 3 + d));
      CHECK(output.flat(static_cast<std::size_t>(i * 3 + d)) == Approx(expected).epsilon(1e-12));
    }
  }
}

TEST_CASE("Attention (Keras): concat scores have gradients and round-trip their config", "[layers][attention][keras]") {
  kiln::Attention attention(true, "concat", {{"name", "additive"}});
  LayerCase c({random_input({2, 3, 4}, 1), random_input({2, 5, 4}, 2), random_input({2, 5, 4}, 3)});
  c.options = {{"use_causal_mask", true}};
  CHECK(symbolic_output_shapes(*attention, c) == std::vector<Shape>{Shape{None, 3, 4}});
  const GradcheckReport report = gradcheck_layer(*attention, c);
  INFO(report.worst_entry());
  CHECK(report.max_relative_error <= 1e-6);
  check_config_round_trip(attention, c);
  const Config config = attention.get_config();
  CHECK(config.get_string("score_mode") == "concat");
  CHECK(config.get_double("dropout") == 0.0);
  CHECK(config.at("seed").is_null());
  CHECK_THROWS_AS(kiln::Attention(false, "additive"), kiln::ConfigError);
}

// ---- the layer harness ---------------------------------------------------------------------------------

namespace {
LayerSpec dot_product_attention_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::DotProductAttention(true)); };
  spec.call = qkv_case(2, 3, 5, 4, 6);
  spec.call.tensor_args = {{"mask", padding_mask({5, 2}, 5)}};
  spec.call.options = {{"use_causal_mask", true}, {"return_attention_scores", true}};
  spec.output_shapes = {Shape{None, 3, 6}, Shape{None, 3, 5}};
  spec.bad_inputs = {{"another query depth",
                      {{None, 3, 5}, {None, 5, 5}, {None, 5, 6}},
                      "was built (and scaled) for another query depth"}};
  return spec;
}

// Keras's Attention with its scale weight: [query, value] and the value's padding mask.
LayerSpec attention_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::Attention(/*use_scale=*/true)); };
  spec.call = LayerCase({random_input({2, 3, 4}, 1), random_input({2, 5, 4}, 2)});
  spec.call.tensor_args = {{"value_mask", padding_mask({5, 3}, 5)}};
  spec.output_shapes = {Shape{None, 3, 4}};
  spec.bad_inputs = {{"one input", {{None, 3, 4}}, "takes 2 to 3 inputs, got 1"}};
  return spec;
}
}  // namespace

KILN_LAYER_HARNESS("kiln>DotProductAttention", dot_product_attention_spec)
KILN_LAYER_HARNESS("kiln>Attention", attention_spec)
