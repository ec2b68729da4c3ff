// keras-hub's decoder blocks and RMS norms (kiln/hub/layers) through the layer harness, and their semantics
// against compositions written out here: grouped-query heads as repeated key/value heads, the sliding window,
// Llama 3's rope frequencies and Gemma's soft cap.
#include <catch2/catch.hpp>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include <kiln/hub/layers/decoder_blocks.hpp>
#include <kiln/hub/layers/grouped_query_attention.hpp>
#include <kiln/hub/layers/rms_norm.hpp>
#include <kiln/kiln.hpp>
#include "support/layer_check.hpp"

using kiln::Array;
using kiln::Config;
using kiln::Shape;
using kiln::testing::LayerCase;
using kiln::testing::LayerSpec;
using kiln::testing::random_input;
constexpr std::int64_t None = Shape::unknown;

namespace {

LayerSpec block_spec(const std::string& key, const Config& config, const std::string& mask_argument) {
  LayerSpec spec;
  spec.make = [key, config] { return kiln::create_layer(key, config); };
  spec.call = LayerCase({random_input({2, 5, 4}, 21)});
  Array mask = Array::full(Shape{2, 5}, 1.0, kiln::DType::float64);
  mask.set_flat(9, 0.0);  // the second row's last token is padding
  spec.call.tensor_args = {{mask_argument, mask}};
  spec.output_shapes = {Shape{None, 5, 4}};
  spec.tolerance = 1e-5;
  spec.bad_inputs = {{"other features", {{None, 5, 3}}, "built for"}};
  return spec;
}

LayerSpec llama_spec() {
  return block_spec("keras_hub>LlamaTransformerDecoder",
                    {{"intermediate_dim", 6}, {"num_query_heads", 2}, {"num_key_value_heads", 1},
                     {"rope_frequency_adjustment_factor", 8.0}, {"rope_low_freq_factor", 1.0},
                     {"rope_high_freq_factor", 4.0}, {"rope_pretraining_sequence_length", 16}},
                    "decoder_padding_mask");
}
LayerSpec mistral_spec() {
  return block_spec("keras_hub>MistralTransformerDecoder",
                    {{"intermediate_dim", 6}, {"num_query_heads", 4}, {"num_key_value_heads", 2}, {"sliding_window", 2},
                     {"head_dim", 2}},
                    "decoder_padding_mask");
}
LayerSpec qwen_spec() {
  return block_spec("keras_hub>QwenTransformerDecoder",
                    {{"intermediate_dim", 6}, {"num_query_heads", 2}, {"num_key_value_heads", 2},
                     {"use_sliding_window_attention", true}, {"sliding_window_size", 3}},
                    "decoder_padding_mask");
}
LayerSpec qwen3_spec() {  // head_dim 2 (not hidden / heads), per-head query and key norms, a window of 2
  return block_spec("keras_hub>Qwen3TransformerDecoder",
                    {{"intermediate_dim", 6}, {"num_query_heads", 4}, {"num_key_value_heads", 2}, {"head_dim", 2},
                     {"sliding_window_size", 2}},
                    "decoder_padding_mask");
}
LayerSpec phi3_spec() {  // Phi-3's "su" rotary scaling: 5 steps past a pretraining length of 4 take the long factors
  return block_spec("keras_hub>Phi3Decoder",
                    {{"hidden_dim", 4}, {"intermediate_dim", 6}, {"num_query_heads", 1}, {"num_key_value_heads", 1},
                     {"max_sequence_length", 8}, {"pretraining_sequence_length", 4}, {"rope_scaling_type", "su"},
                     {"rope_scaling_short_factor", Config{1.0, 2.0}}, {"rope_scaling_long_factor", Config{3.0, 5.0}}},
                    "decoder_padding_mask");
}
LayerSpec falcon_spec() {  // 3 heads: ALiBi's slopes for a head count that is not a power of 2
  LayerSpec spec = block_spec("keras_hub>FalconTransformerDecoder",
                              {{"num_attention_heads", 3}, {"intermediate_dim", 6}, {"layer_norm_epsilon", 1e-3}},
                              "decoder_padding_mask");
  spec.call = LayerCase({random_input({2, 5, 6}, 21)});
  Array mask = Array::full(Shape{2, 5}, 1.0, kiln::DType::float64);
  mask.set_flat(9, 0.0);
  spec.call.tensor_args = {{"decoder_padding_mask", mask}};
  spec.output_shapes = {Shape{None, 5, 6}};
  spec.bad_inputs = {{"other features", {{None, 5, 3}}, "built for"}};
  return spec;
}
LayerSpec gemma_spec() {
  return block_spec("keras_hub>GemmaDecoderBlock",
                    {{"hidden_dim", 4}, {"intermediate_dim", 6}, {"head_dim", 2}, {"num_query_heads", 2},
                     {"num_key_value_heads", 1}, {"logit_soft_cap", 1.5}, {"use_post_ffw_norm", true},
                     {"use_post_attention_norm", true}, {"use_sliding_window_attention", true},
                     {"sliding_window_size", 2}},
                    "padding_mask");
}

LayerSpec norm_spec(const std::string& key) {
  LayerSpec spec;
  spec.make = [key] { return kiln::create_layer(key, {{"epsilon", 1e-5}}); };
  spec.call = LayerCase({random_input({2, 3, 5}, 23)});
  spec.output_shapes = {Shape{None, 3, 5}};
  spec.bad_inputs = {{"another last axis", {{None, 3, 4}}, "built for another last axis"}};
  return spec;
}
LayerSpec llama_norm_spec() { return norm_spec("keras_hub>LlamaLayerNorm"); }
LayerSpec mistral_norm_spec() { return norm_spec("keras_hub>MistralLayerNormalization"); }
LayerSpec qwen_norm_spec() { return norm_spec("keras_hub>QwenLayerNorm"); }
LayerSpec qwen3_norm_spec() { return norm_spec("keras_hub>Qwen3LayerNorm"); }
LayerSpec phi3_norm_spec() { return norm_spec("keras_hub>Phi3LayerNorm"); }
LayerSpec gemma_norm_spec() { return norm_spec("keras_hub>RMSNormalization"); }

// softmax over the allowed keys of one query row.
std::vector<double> softmax_row(const std::vector<double>& scores, const std::vector<bool>& allowed) {
  double top = -1e300, total = 0;
  for (std::size_t j = 0; j < scores.size(); ++j)
    if (allowed[j]) top = std::max(top, scores[j]);
  std::vector<double> weights(scores.size(), 0.0);
  for (std::size_t j = 0; j < scores.size(); ++j)
    if (allowed[j]) total += weights[j] = std::exp(scores[j] - top);
  for (double& w : weights) w /= total;
  return weights;
}

}  // namespace

KILN_LAYER_HARNESS("keras_hub>LlamaTransformerDecoder", llama_spec)
KILN_LAYER_HARNESS("keras_hub>MistralTransformerDecoder", mistral_spec)
KILN_LAYER_HARNESS("keras_hub>QwenTransformerDecoder", qwen_spec)
KILN_LAYER_HARNESS("keras_hub>Qwen3TransformerDecoder", qwen3_spec)
KILN_LAYER_HARNESS("keras_hub>Phi3Decoder", phi3_spec)
KILN_LAYER_HARNESS("keras_hub>GemmaDecoderBlock", gemma_spec)
KILN_LAYER_HARNESS("keras_hub>FalconTransformerDecoder", falcon_spec)
KILN_LAYER_HARNESS("keras_hub>LlamaLayerNorm", llama_norm_spec)
KILN_LAYER_HARNESS("keras_hub>MistralLayerNormalization", mistral_norm_spec)
KILN_LAYER_HARNESS("keras_hub>QwenLayerNorm", qwen_norm_spec)
KILN_LAYER_HARNESS("keras_hub>Qwen3LayerNorm", qwen3_norm_spec)
KILN_LAYER_HARNESS("keras_hub>Phi3LayerNorm", phi3_norm_spec)
KILN_LAYER_HARNESS("keras_hub>RMSNormalization", gemma_norm_spec)

TEST_CASE("keras-hub's RMS norms: x * rsqrt(mean(x^2) + eps) * scale, Gemma's times 1 + scale", "[hub][layers]") {
  const Array x = random_input({2, 3, 5}, 5);
  for (const std::string key : {"keras_hub>LlamaLayerNorm", "keras_hub>RMSNormalization"}) {
    INFO(key);
    const kiln::LayerPtr norm = kiln::create_layer(key, {{"epsilon", 1e-5}, {"dtype", "float64"}});
    norm->build_for(Shape{None, 3, 5});
    Array scale = Array(Shape{5}, kiln::DType::float64);
    for (std::size_t i = 0; i < 5; ++i) scale.set_flat(i, 0.5 + 0.25 * static_cast<double>(i));
    norm->set_weights({scale});
    const Array y = kiln::testing::run_layer(*norm, LayerCase({x})).at(0);
    const double offset = key == "keras_hub>RMSNormalization" ? 1.0 : 0.0;
    for (std::size_t row = 0; row < 6; ++row) {
      double squares = 0;
      for (std::size_t j = 0; j < 5; ++j) squares += x.flat(row * 5 + j) * x.flat(row * 5 + j);
      const double inverse = 1.0 / std::sqrt(squares / 5 + 1e-5);
      for (std::size_t j = 0; j < 5; ++j)
        CHECK(y.flat(row * 5 + j) == Approx(x.flat(row * 5 + j) * inverse * (offset + scale.flat(j))).epsilon(1e-12));
    }
  }
}

TEST_CASE("grouped-query attention: each query head reads its group's key/value head, within the window, capped",
          "[hub][layers]") {
  // 4 query heads over 2 key/value heads of depth 2 (so RoPE's one frequency is 1), hidden 4.
  kiln::hub::GroupedQueryAttentionOptions options;
  options.num_query_heads = 4;
  options.num_key_value_heads = 2;
  options.head_dim = 2;
  options.sliding_window = 2;
  options.logit_soft_cap = 0.7;
  const auto layer = std::make_shared<kiln::hub::GroupedQueryAttentionLayer>(options);
  const std::int64_t T = 4, hidden = 4, heads = 4, depth = 2;
  const Array x = random_input({1, T, hidden}, 35);
  kiln::testing::run_layer(*layer, LayerCase({x}));  // builds it for float64
  const std::vector<Array> weights = {random_input({hidden, heads, depth}, 31), random_input({hidden, 2, depth}, 32),
                                      random_input({hidden, 2, depth}, 33), random_input({heads, depth, hidden}, 34)};
  layer->set_weights(weights);
  const Array y = kiln::testing::run_layer(*layer, LayerCase({x})).at(0);

  // The same by hand: projections, keras-hub's rotate-half RoPE (theta_i = 10000^(-2i/depth)), repeated heads.
  auto project = [&](const Array& kernel, std::int64_t n) {
    std::vector<double> out(static_cast<std::size_t>(T * n * depth), 0.0);
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t h = 0; h < n; ++h)
        for (std::int64_t d = 0; d < depth; ++d) {
          double sum = 0;
          for (std::int64_t m = 0; m < hidden; ++m)
            sum += x.flat(static_cast<std::size_t>(t * hidden + m)) *
                   kernel.flat(static_cast<std::size_t>((m * n + h) * depth + d));
          out[static_cast<std::size_t>((t * n + h) * depth + d)] = sum;
        }
    return out;
  };
  auto rotate = [&](std::vector<double> v, std::int64_t n) {
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t h = 0; h < n; ++h) {
        const std::size_t at = static_cast<std::size_t>((t * n + h) * depth);
        const double angle = static_cast<double>(t) * 1.0;  // theta_0 = 1 for depth 2
        const double a = v[at], b = v[at + 1];
        v[at] = a * std::cos(angle) - b * std::sin(angle);
        v[at + 1] = b * std::cos(angle) + a * std::sin(angle);
      }
    return v;
  };
  const std::vector<double> q = rotate(project(weights[0], heads), heads), k = rotate(project(weights[1], 2), 2),
                            v = project(weights[2], 2);
  std::vector<double> attended(static_cast<std::size_t>(T * heads * depth), 0.0);
  for (std::int64_t h = 0; h < heads; ++h) {
    const std::int64_t g = h / 2;  // keras-hub's ops.repeat: heads 0, 1 read kv head 0; 2, 3 read kv head 1
    for (std::int64_t i = 0; i < T; ++i) {
      std::vector<double> scores(static_cast<std::size_t>(T));
      std::vector<bool> allowed(static_cast<std::size_t>(T));
      for (std::int64_t j = 0; j < T; ++j) {
        double dot = 0;
        for (std::int64_t d = 0; d < depth; ++d)
          dot += q[static_cast<std::size_t>((i * heads + h) * depth + d)] * k[static_cast<std::size_t>((j * 2 + g) * depth + d)];
        scores[static_cast<std::size_t>(j)] = 0.7 * std::tanh(dot / std::sqrt(2.0) / 0.7);
        allowed[static_cast<std::size_t>(j)] = j <= i && i - j < 2;
      }
      const std::vector<double> w = softmax_row(scores, allowed);
      for (std::int64_t j = 0; j < T; ++j)
        for (std::int64_t d = 0; d < depth; ++d)
          attended[static_cast<std::size_t>((i * heads + h) * depth + d)] +=
              w[static_cast<std::size_t>(j)] * v[static_cast<std::size_t>((j * 2 + g) * depth + d)];
    }
  }
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t m = 0; m < hidden; ++m) {
      double expected = 0;
      for (std::int64_t hd = 0; hd < heads * depth; ++hd)
        expected += attended[static_cast<std::size_t>(t * heads * depth + hd)] *
                    weights[3].flat(static_cast<std::size_t>(hd * hidden + m));
      CHECK(y.flat(static_cast<std::size_t>(t * hidden + m)) == Approx(expected).epsilon(1e-10));
    }
}

TEST_CASE("bad arguments of the Qwen 3, Phi-3 and Falcon blocks are refused by name", "[hub][layers]") {
  const Config qwen3 = {{"intermediate_dim", 6}, {"num_query_heads", 2}, {"num_key_value_heads", 1}, {"head_dim", 2}};
  CHECK_NOTHROW(kiln::create_layer("keras_hub>Qwen3TransformerDecoder", qwen3));
  CHECK_NOTHROW(kiln::create_layer("keras_hub>Qwen3TransformerDecoder", qwen3.with("head_dim", Config())));
  Config no_head_dim = Config::map();
  for (const auto& [key, value] : qwen3.items())
    if (key != "head_dim") no_head_dim.set(key, value);
  CHECK_THROWS_WITH(kiln::create_layer("keras_hub>Qwen3TransformerDecoder", no_head_dim), Catch::Contains("head_dim"));
  CHECK_THROWS_AS(kiln::create_layer("keras_hub>Qwen3TransformerDecoder", qwen3.with("sliding_window_size", 0)),
                  kiln::ConfigError);

  const Config phi3 = {{"hidden_dim", 8},          {"intermediate_dim", 6}, {"num_query_heads", 2},
                       {"num_key_value_heads", 1}, {"rope_scaling_type", "su"},
                       {"rope_scaling_short_factor", Config{1.0, 2.0}}, {"rope_scaling_long_factor", Config{3.0, 4.0}}};
  CHECK_NOTHROW(kiln::create_layer("keras_hub>Phi3Decoder", phi3));
  CHECK_THROWS_WITH(kiln::create_layer("keras_hub>Phi3Decoder", phi3.with("rope_scaling_type", "yarn")),
                    Catch::Contains("rope_scaling_type"));
  // hidden_dim 8 over 2 heads: 4 deep, 2 factors of each kind.
  CHECK_THROWS_WITH(kiln::create_layer("keras_hub>Phi3Decoder", phi3.with("rope_scaling_long_factor", Config{1.0})),
                    Catch::Contains("rope_scaling_long_factor") && Catch::Contains("2 factors"));
  CHECK_THROWS_WITH(kiln::create_layer("keras_hub>Phi3Decoder", phi3.with("rope_scaling_short_factor", Config())),
                    Catch::Contains("rope_scaling_short_factor"));
  CHECK_THROWS_WITH(kiln::create_layer("keras_hub>Phi3Decoder", phi3.with("rope_scaling_short_factor", Config{1.0, 0.0})),
                    Catch::Contains("positive"));
  CHECK_THROWS_WITH(kiln::create_layer("keras_hub>Phi3Decoder", phi3.with("pretraining_sequence_length", 1)),
                    Catch::Contains("ln(1)"));
  CHECK_THROWS_AS(kiln::create_layer("keras_hub>Phi3Decoder", phi3.with("max_sequence_length", 0)), kiln::ConfigError);

  const Config falcon = {{"num_attention_heads", 2}, {"intermediate_dim", 6}};
  CHECK_NOTHROW(kiln::create_layer("keras_hub>FalconTransformerDecoder", falcon));
  CHECK_THROWS_WITH(kiln::create_layer("keras_hub>FalconTransformerDecoder", falcon.with("attention_dropout_rate", 1.0)),
                    Catch::Contains("attention_dropout_rate"));
  CHECK_THROWS_WITH(kiln::create_layer("keras_hub>FalconTransformerDecoder", falcon.with("num_attention_heads", 0)),
                    Catch::Contains("num_attention_heads"));
  // 3 heads cannot split a hidden size of 4: refused when the block is built.
  const kiln::LayerPtr block = kiln::create_layer("keras_hub>FalconTransformerDecoder", falcon.with("num_attention_heads", 3));
  CHECK_THROWS_AS(block->build_for(Shape{None, 5, 4}), kiln::ShapeError);
}
