#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <map>

#include <kiln/core/error.hpp>
#include <kiln/layers/attention/mh_attention.hpp>
#include <kiln/layers/model_base.hpp>
#include "support/attention_reference.hpp"
#include "support/layer_check.hpp"

using kiln::Array;
using kiln::Config;
using kiln::Shape;
using namespace kiln::testing;

namespace {

constexpr std::int64_t None = Shape::unknown;

std::map<std::string, Array> weights_by_path(const kiln::Layer& layer) {
  std::map<std::string, Array> result;
  for (const kiln::Weight& weight : layer.weights()) result[weight.path] = weight.value;
  return result;
}

Array swish(const Array& x) {
  Array y(x.shape(), kiln::DType::float64);
  for (std::size_t i = 0; i < x.size(); ++i) y.set_flat(i, x.flat(i) / (1.0 + std::exp(-x.flat(i))));
  return y;
}

Array add(const Array& a, const Array& b) {
  Array y(a.shape(), kiln::DType::float64);
  for (std::size_t i = 0; i < a.size(); ++i) y.set_flat(i, a.flat(i) + b.flat(i));
  return y;
}

// The encoder block in plain loops, from the layer's own weights.
Array reference_block(const kiln::Layer& layer, const Array& x, std::int64_t heads, std::int64_t key_size) {
  std::map<std::string, Array> w = weights_by_path(layer);
  const Array q = reference_dense(x, w["query/kernel"], w["query/bias"]);
  const Array k = reference_dense(x, w["key/kernel"], w["key/bias"]);
  const Array v = reference_dense(x, w["value/kernel"], w["value/bias"]);
  std::vector<Array> contexts;
  for (std::int64_t h = 0; h < heads; ++h)
    contexts.push_back(reference_attention(last_axis_slice(q, h * key_size, key_size),
                                           last_axis_slice(k, h * key_size, key_size),
                                           last_axis_slice(v, h * key_size, key_size), Array(), false,
                                           1.0 / std::sqrt(static_cast<double>(key_size)))
                           .output);
  const Array w0 = reference_dense(last_axis_concat(contexts), w["w0/kernel"], w["w0/bias"]);
  const Array attended = reference_layer_norm(add(x, w0), w["attention_norm/gamma"], w["attention_norm/beta"], 1e-6);
  const Array hidden = swish(reference_dense(attended, w["feed_forward_hidden/kernel"], w["feed_forward_hidden/bias"]));
  const Array feed_forward = reference_dense(hidden, w["feed_forward_output/kernel"], w["feed_forward_output/bias"]);
  return reference_layer_norm(add(attended, feed_forward), w["output_norm/gamma"], w["output_norm/beta"], 1e-6);
}

void set_weight(const kiln::Layer& layer, const std::string& path, const std::vector<double>& values) {
  Array target = weights_by_path(layer).at(path);
  REQUIRE(target.size() == values.size());
  for (std::size_t i = 0; i < values.size(); ++i) target.set_flat(i, values[i]);
}

}  // namespace

TEST_CASE("MHAttention: the encoder block's sublayers, weights and output shape", "[layers][mh_attention]") {
  kiln::MHAttention block(4, 2);
  const LayerCase c({random_input({3, 5, 6}, 1)});
  CHECK(symbolic_output_shapes(*block, c) == std::vector<Shape>{Shape{None, 5, 6}});
  CHECK(block->registered_name() == "Custom>MHAttention");
  std::vector<std::string> paths;
  for (const kiln::Weight& weight : block.weights()) paths.push_back(weight.path);
  CHECK(paths == std::vector<std::string>{"query/kernel", "query/bias", "key/kernel", "key/bias", "value/kernel",
                                          "value/bias", "w0/kernel", "w0/bias", "attention_norm/gamma",
                                          "attention_norm/beta", "feed_forward_hidden/kernel",
                                          "feed_forward_hidden/bias", "feed_forward_output/kernel",
                                          "feed_forward_output/bias", "output_norm/gamma", "output_norm/beta"});
  const std::int64_t projections = 3 * (6 * 8 + 8), w0 = 8 * 6 + 6, norms = 2 * (6 + 6),
                     ffn = (6 * 24 + 24) + (24 * 6 + 6);
  CHECK(block.count_params() == projections + w0 + norms + ffn);
}

TEST_CASE("MHAttention: the config has the original's four keys, dimension = heads * key_size",
          "[layers][mh_attention][config]") {
  // The layer kiln follows computes m_iDimension = heads * key_size in __init__ and takes the window from
  // the input's last dimension in build; the sequence length is not part of its config.
  kiln::MHAttention block(16, 8, {{"name", "encoder"}});
  Config config = block.get_config();
  CHECK(config.get_int("key_size") == 16);
  CHECK(config.get_int("heads") == 8);
  CHECK(config.get_int("dimension") == 128);
  CHECK(config.at("window").is_null());  // until built
  const LayerCase c({random_input({2, 40, 4}, 1)});
  run_layer(*block, c);
  config = block.get_config();
  CHECK(config.get_int("dimension") == 128);  // not the sequence length, 40
  CHECK(config.get_int("window") == 4);
  std::vector<std::string> keys = config.keys();
  std::sort(keys.begin(), keys.end());
  CHECK(keys == std::vector<std::string>{"dimension", "dtype", "heads", "key_size", "name", "trainable", "window"});

  Config wrong = config;
  wrong.set("dimension", 40);
  CHECK_THROWS_AS(kiln::create_layer("Custom>MHAttention", wrong), kiln::ConfigError);
  CHECK_THROWS_WITH(kiln::create_layer("Custom>MHAttention", wrong), Catch::Contains("heads * key_size = 128, got 40"));
}

TEST_CASE("MHAttention: one block takes any sequence length", "[layers][mh_attention]") {
  kiln::MHAttention block(2, 2, {{"window", 3}, {"dtype", "float64"}});
  REQUIRE(block.built());
  for (const std::int64_t length : {1, 4, 9}) {
    INFO("length " << length);
    const LayerCase c({random_input({2, length, 3}, 11)});
    const Array output = run_layer(*block, c)[0];
    CHECK(output.shape() == Shape{2, length, 3});
    CHECK(max_relative_difference(output, reference_block(*block, c.inputs[0], 2, 2)) <= 1e-10);
  }
}

TEST_CASE("MHAttention: hand-checked output for fixed input and weights", "[layers][mh_attention][reference]") {
  kiln::MHAttention block(1, 1, {{"dtype", "float64"}});
  block->build_for(Shape{None, 2, 3});
  // Zero query and key projections: every position attends uniformly, so the context is the mean
  // of V over the sequence. V takes feature 0: v = [1, 3], context = 2 at both positions.
  set_weight(*block, "value/kernel", {1, 0, 0});
  set_weight(*block, "w0/kernel", {1, 0, -1});  // W0 = [2, 0, -2]
  set_weight(*block, "query/kernel", {0, 0, 0});
  set_weight(*block, "key/kernel", {0, 0, 0});
  // Zero hidden layer: swish(0) = 0, so the feed-forward output is its bias [0, 3, 0].
  Array hidden_kernel = weights_by_path(*block).at("feed_forward_hidden/kernel");
  for (std::size_t i = 0; i < hidden_kernel.size(); ++i) hidden_kernel.set_flat(i, 0.0);
  set_weight(*block, "feed_forward_output/bias", {0, 3, 0});
  // x + W0 = [[3, 2, 1], [5, 0, -2]]; both layer norms have gamma 1, beta 0, epsilon 1e-6.
  const Array x = Array::from_vector(std::vector<double>{1, 2, 3, 3, 0, 0}, {1, 2, 3});
  const Array output = run_layer(*block, LayerCase({x}))[0];
  const std::vector<double> expected = {0.129756, 1.154700, -1.284457, 0.235487, 1.089902, -1.325389};
  for (std::size_t i = 0; i < expected.size(); ++i) CHECK(output.flat(i) == Approx(expected[i]).epsilon(1e-5));
}

TEST_CASE("MHAttention: matches the plain-loop encoder block for several head counts",
          "[layers][mh_attention][reference]") {
  for (std::int64_t heads : {1, 2, 3}) {
    kiln::MHAttention block(2, heads);
    const LayerCase c({random_input({2, 4, 5}, 7)});
    const Array output = run_layer(*block, c)[0];
    INFO("heads " << heads);
    CHECK(max_relative_difference(output, reference_block(*block, c.inputs[0], heads, 2)) <= 1e-10);
  }
}

TEST_CASE("MHAttention: gradients of the input and all 16 weights match central differences",
          "[layers][mh_attention][grad]") {
  kiln::MHAttention block(2, 2);
  const GradcheckReport report = gradcheck_layer(*block, LayerCase({random_input({2, 3, 4}, 3)}));
  INFO(report.worst_entry());
  CHECK(report.max_relative_error <= 1e-6);
}

TEST_CASE("MHAttention: a config with the window builds at once, so weights load before any call",
          "[layers][mh_attention][config]") {
  kiln::MHAttention block(3, 2, {{"name", "encoder"}});
  const LayerCase c({random_input({2, 4, 6}, 5)});
  check_config_round_trip(block, c);
  const kiln::LayerPtr rebuilt = kiln::create_layer("Custom>MHAttention", block.get_config());
  REQUIRE(rebuilt->built());
  rebuilt->set_weights(block.get_weights());  // no call needed first
  CHECK(run_layer(*rebuilt, c)[0].bitwise_equal(run_layer(*block, c)[0]));
  CHECK_FALSE(kiln::create_layer("Custom>MHAttention", {{"key_size", 3}, {"heads", 2}})->built());
}

TEST_CASE("MHAttention: a window other than the built one is a ShapeError naming the block",
          "[layers][mh_attention][errors]") {
  kiln::MHAttention block(2, 2, {{"name", "encoder"}, {"window", 6}, {"dimension", 4}});  // dimension = 2 * 2
  const kiln::Tensor x = kiln::Input({None, 4, 5});
  CHECK_THROWS_WITH(block(x), Catch::Contains("MHAttention 'encoder'") && Catch::Contains("(None, 4, 5)"));
  CHECK_THROWS_AS(kiln::MHAttention(0, 2), kiln::ConfigError);
  CHECK_THROWS_AS(kiln::MHAttention(Config{{"key_size", 2}}), kiln::ConfigError);
}

// ---- the layer harness ---------------------------------------------------------------------------------

namespace {
LayerSpec mh_attention_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::MHAttention(2, 2)); };
  spec.call = LayerCase({random_input({2, 4, 6}, 5)});
  spec.output_shapes = {Shape{None, 4, 6}};
  spec.bad_inputs = {{"another window", {{None, 4, 5}}, "was built for a window of 6"}};
  return spec;
}
}  // namespace

KILN_LAYER_HARNESS("Custom>MHAttention", mh_attention_spec)
