#include <catch2/catch.hpp>

#include <cmath>

#include <kiln/core/error.hpp>
#include <kiln/layers/convolutional/convolution.hpp>
#include <kiln/layers/model_base.hpp>
#include <kiln/ops/ops.hpp>
#include <kiln/models/model.hpp>
#include "support/layer_check.hpp"

using kiln::Config;
using kiln::Shape;
using namespace kiln::testing;
using Catch::Contains;

namespace {
constexpr std::int64_t any = Shape::unknown;

// out[b, t, f] = bias[f] + sum over taps k and channels c of x[b, t·s − pad + k·d, c] · kernel[k, c, f]: the
// layer's formula written out, for one 1-D case with causal padding (pad = d·(size − 1)).
kiln::Array causal_reference(const kiln::Array& x, const kiln::Array& kernel, const kiln::Array& bias,
                             std::int64_t dilation) {
  const Shape& xs = x.shape();
  const std::int64_t steps = xs[1], channels = xs[2], size = kernel.shape()[0], filters = kernel.shape()[2];
  kiln::Array y = kiln::Array::full({xs[0], steps, filters}, 0.0, kiln::DType::float64);
  for (std::int64_t b = 0; b < xs[0]; ++b)
    for (std::int64_t t = 0; t < steps; ++t)
      for (std::int64_t f = 0; f < filters; ++f) {
        double total = bias.flat(static_cast<std::size_t>(f));
        for (std::int64_t k = 0; k < size; ++k) {
          const std::int64_t at = t - dilation * (size - 1) + k * dilation;
          if (at < 0) continue;
          for (std::int64_t c = 0; c < channels; ++c)
            total += x.flat(static_cast<std::size_t>((b * steps + at) * channels + c)) *
                     kernel.flat(static_cast<std::size_t>((k * channels + c) * filters + f));
        }
        y.set_flat(static_cast<std::size_t>((b * steps + t) * filters + f), total);
      }
  return y;
}

LayerSpec conv1d_spec() {
  LayerSpec spec;
  spec.make = [] {
    return kiln::LayerPtr(kiln::Conv1D(
        4, 3, "tanh", {{"padding", "causal"}, {"dilation_rate", 2}, {"bias_initializer", "random_normal"}}));
  };
  spec.call = LayerCase{{random_input({2, 7, 3}, 5)}};
  spec.output_shapes = {Shape{any, 7, 4}};
  spec.bad_inputs = {{"another channel count", {{any, 7, 5}}, "was built for 3 input channels"},
                     {"rank 4", {{any, 7, 7, 3}}, "expects inputs of rank 3"},
                     {"two inputs", {{any, 7, 3}, {any, 7, 3}}, "takes 1 inputs, got 2"}};
  return spec;
}

LayerSpec conv2d_spec() {
  LayerSpec spec;
  spec.make = [] {
    return kiln::LayerPtr(kiln::Conv2D(
        4, {3, 2}, "swish", {{"strides", Config::list({2, 1})}, {"groups", 2}, {"bias_initializer", "random_normal"}}));
  };
  spec.call = LayerCase{{random_input({2, 7, 5, 2}, 6)}};
  spec.output_shapes = {Shape{any, 3, 4, 4}};
  spec.bad_inputs = {{"another channel count", {{any, 7, 5, 4}}, "was built for 2 input channels"},
                     {"a window larger than the input", {{any, 2, 5, 2}}, "cannot convolve its input"},
                     {"rank 3", {{any, 7, 2}}, "expects inputs of rank 4"}};
  return spec;
}

LayerSpec conv2d_channels_first_spec() {
  LayerSpec spec;
  spec.make = [] {
    return kiln::LayerPtr(kiln::Conv2D(
        3, 3, "", {{"padding", "same"}, {"data_format", "channels_first"}, {"bias_initializer", "random_normal"}}));
  };
  spec.call = LayerCase{{random_input({2, 2, 5, 4}, 7)}};
  spec.output_shapes = {Shape{any, 3, 5, 4}};
  spec.bad_inputs = {{"channels last", {{any, 5, 4, 2}}, "was built for 2 input channels"}};
  return spec;
}
}  // namespace

KILN_LAYER_HARNESS("kiln>Conv1D", conv1d_spec)
KILN_LAYER_HARNESS("kiln>Conv2D", conv2d_spec)

TEST_CASE("Conv2D channels_first through the layer harness", "[layers][conv][harness]") {
  check_layer(conv2d_channels_first_spec());
}

TEST_CASE("Conv1D: causal, dilated output equals the formula written out", "[layers][conv]") {
  kiln::Conv1D conv(3, 2, "", {{"padding", "causal"}, {"dilation_rate", 3}, {"bias_initializer", "random_normal"}});
  const LayerCase c{{random_input({2, 9, 4}, 8)}};
  const kiln::Array y = run_layer(*conv, c).at(0);
  const std::vector<kiln::Array> weights = conv.get_weights();
  REQUIRE(y.shape() == Shape{2, 9, 3});
  CHECK(max_relative_difference(y, causal_reference(c.inputs[0], weights[0], weights[1], 3)) < 1e-12);
}

TEST_CASE("Conv: dilations and strides from a file cannot overflow the window's arithmetic", "[layers][conv][errors]") {
  constexpr std::int64_t huge = std::int64_t{1} << 62;
  // A span of 2·2^62 + 1 does not fit in 64 bits: refused, naming the layer, not wrapped to a short window.
  kiln::Conv1D valid(2, 3, "", {{"dilation_rate", huge}, {"name", "c"}});
  CHECK_THROWS_AS(valid(kiln::Input({any, 12, 1})), kiln::ShapeError);
  CHECK_THROWS_WITH(kiln::Conv1D(2, 3, "", {{"dilation_rate", huge}, {"name", "c"}})(kiln::Input({any, 12, 1})),
                    Contains("Conv1D 'c'") && Contains("overflows 64 bits"));
  // A span of 2^62 + 1 fits, and is longer than the input: refused with 'valid' padding.
  CHECK_THROWS_WITH(kiln::Conv1D(2, 3, "", {{"dilation_rate", huge / 2}})(kiln::Input({any, 12, 1})),
                    Contains("spans more than the input"));
  // With 'causal' padding only the last tap reads the input, and only the present: never the future.
  kiln::Conv1D causal(2, 3, "", {{"padding", "causal"}, {"dilation_rate", huge / 2}, {"bias_initializer", "ones"}});
  const LayerCase c{{random_input({2, 12, 3}, 4)}};
  const kiln::Array y = run_layer(*causal, c).at(0);
  REQUIRE(y.shape() == Shape{2, 12, 2});
  const std::vector<kiln::Array> weights = causal.get_weights();
  CHECK(max_relative_difference(y, causal_reference(c.inputs[0], weights[0], weights[1], huge / 2)) < 1e-12);
  // A stride near 2^63 with 'same' padding: ceil(length / stride) would overflow.
  CHECK_THROWS_WITH(kiln::Conv1D(2, 3, "", {{"strides", INT64_MAX}, {"padding", "same"}})(kiln::Input({any, 12, 1})),
                    Contains("overflows 64 bits"));
  // A transposed convolution's output length, length · stride, likewise.
  CHECK_THROWS_WITH(kiln::Conv1DTranspose(2, 3, "", {{"strides", huge}})(kiln::Input({any, 12, 1})),
                    Contains("Conv1DTranspose") && Contains("overflows 64 bits"));
}

TEST_CASE("Conv1D and Conv2D: Keras's weights, config keys and defaults", "[layers][conv][config]") {
  kiln::Conv2D conv(8, 3, "relu", {{"name", "c"}});
  conv->build_for(Shape{any, 10, 12, 5});
  const std::vector<kiln::Weight> weights = conv.weights();
  REQUIRE(weights.size() == 2);
  CHECK(weights[0].path == "kernel");
  CHECK(weights[0].value.shape() == Shape{3, 3, 5, 8});
  CHECK(weights[1].path == "bias");
  CHECK(weights[1].value.shape() == Shape{8});
  CHECK(conv.count_params() == 3 * 3 * 5 * 8 + 8);
  // glorot_uniform with Keras's fans for a kernel: receptive field × channels in and out.
  const double limit = std::sqrt(6.0 / (9 * 5 + 9 * 8));
  double largest = 0;
  for (std::size_t i = 0; i < weights[0].value.size(); ++i)
    largest = std::max(largest, std::fabs(weights[0].value.flat(i)));
  CHECK(largest <= limit);
  CHECK(largest > 0.9 * limit);

  const Config config = conv.get_config();
  CHECK(config.get_int("filters") == 8);
  CHECK(config.at("kernel_size") == Config::from_ints({3, 3}));
  CHECK(config.at("strides") == Config::from_ints({1, 1}));
  CHECK(config.at("dilation_rate") == Config::from_ints({1, 1}));
  CHECK(config.get_string("padding") == "valid");
  CHECK(config.get_string("data_format") == "channels_last");
  CHECK(config.get_int("groups") == 1);
  CHECK(config.get_string("activation") == "relu");
  CHECK(config.get_bool("use_bias"));
  CHECK(config.at("kernel_initializer").get_string("class_name") == "GlorotUniform");

  // Keras's spellings: sizes as lists, upper-case padding, a null data_format.
  kiln::Conv1D keras(Config{{"filters", 2},
                            {"kernel_size", Config::list({5})},
                            {"padding", "SAME"},
                            {"data_format", nullptr},
                            {"kernel_regularizer", nullptr}});
  CHECK(keras->kernel_size() == std::vector<std::int64_t>{5});
  CHECK(keras->padding() == "same");
  CHECK(keras->data_format() == "channels_last");
}

TEST_CASE("Conv: takes other lengths than the one it was built on", "[layers][conv]") {
  kiln::Conv1D conv(2, 3);
  conv(kiln::Input({any, 10, 4}));
  const kiln::Tensor longer = conv(kiln::Input({any, 30, 4}));
  CHECK(longer.shape() == Shape{any, 28, 2});
}

TEST_CASE("Conv: bad arguments and inputs fail early, naming the layer", "[layers][conv][errors]") {
  using kiln::ConfigError;
  CHECK_THROWS_AS(kiln::Conv1D(0, 3), ConfigError);
  CHECK_THROWS_WITH(kiln::Conv1D(4, 0), Contains("kernel_size must be positive"));
  CHECK_THROWS_WITH(kiln::Conv1D(4, 3, "", {{"strides", 0}}), Contains("strides must be positive"));
  CHECK_THROWS_WITH(kiln::Conv1D(4, 3, "", {{"strides", 2}, {"dilation_rate", 2}}),
                    Contains("cannot be combined with dilation_rate > 1"));
  CHECK_THROWS_WITH(kiln::Conv1D(6, 3, "", {{"groups", 4}}), Contains("filters (6) must be divisible by groups (4)"));
  CHECK_THROWS_WITH(kiln::Conv2D(4, 3, "", {{"padding", "causal"}}), Contains("padding must be 'valid' or 'same'"));
  CHECK_THROWS_WITH(kiln::Conv2D(4, 3, "", {{"data_format", "channels_middle"}}), Contains("data_format must be"));
  CHECK_THROWS_WITH(kiln::Conv2D(4, {3, 3, 3}), Contains("must be an int or a list of 2"));
  CHECK_THROWS_WITH(kiln::Conv2D(Config{{"filters", 4}}), Contains("'kernel_size' is required"));
  CHECK_THROWS_WITH(kiln::Conv2D(4, 3, "", {{"kernel_regularizer", "l3"}}), Contains("l3"));
  CHECK_THROWS_WITH(kiln::Conv2D(4, 3, "", {{"filter", 3}}), Contains("unknown argument 'filter'"));

  kiln::Conv2D wide(4, 5, "", {{"name", "wide"}});
  CHECK_THROWS_WITH(wide(kiln::Input({any, 4, 8, 3})),
                    Contains("Conv2D 'wide'") && Contains("spans more than the input's (4, 8)"));
  kiln::Conv2D grouped(4, 3, "", {{"groups", 2}, {"name", "grouped"}});
  CHECK_THROWS_WITH(grouped(kiln::Input({any, 8, 8, 3})),
                    Contains("Conv2D 'grouped'") && Contains("3 channels are not divisible by groups=2"));
  kiln::Conv1D unknown(4, 3, "", {{"name", "unknown"}});
  CHECK_THROWS_WITH(unknown(kiln::Input({any, 8, any})), Contains("channel axis is known"));
}

// ---- transposed convolutions ----------------------------------------------------------------------------

namespace {
// Keras's jax backend, written out: the input dilated by the stride, padded by
// _convert_conv_transpose_padding_args_from_keras_to_jax's (left, right), then correlated with the
// kernel flipped in space and with its channel axes swapped. kernel (k, filters, channels).
kiln::Array transposed_reference(const kiln::Array& x, const kiln::Array& kernel, const kiln::Array& bias,
                                 std::int64_t stride, std::int64_t dilation, const std::string& padding,
                                 std::int64_t output_padding /* -1: None */) {
  const std::int64_t batch = x.shape()[0], in = x.shape()[1], channels = x.shape()[2];
  const std::int64_t k = kernel.shape()[0], filters = kernel.shape()[1], span = (k - 1) * dilation + 1;
  std::int64_t left = 0, right = 0;
  if (padding == "valid") {
    const std::int64_t extra = output_padding < 0 ? std::max(span, stride) - span : output_padding;
    left = span - 1;
    right = span - 1 + extra;
  } else {
    const std::int64_t pad_len = output_padding < 0 ? stride + span - 2 : span + span % 2 - 2 + output_padding;
    left = std::min(pad_len / 2 + pad_len % 2, span - 1);
    right = pad_len - left;
  }
  const std::int64_t padded = left + (in - 1) * stride + 1 + right, out = padded - span + 1;
  kiln::Array y = kiln::Array::full({batch, out, filters}, 0.0, kiln::DType::float64);
  for (std::int64_t b = 0; b < batch; ++b)
    for (std::int64_t t = 0; t < out; ++t)
      for (std::int64_t f = 0; f < filters; ++f) {
        double total = bias.flat(static_cast<std::size_t>(f));
        for (std::int64_t j = 0; j < k; ++j) {
          const std::int64_t at = t + j * dilation - left;  // in the dilated, unpadded input
          if (at < 0 || at % stride != 0 || at / stride >= in) continue;
          for (std::int64_t c = 0; c < channels; ++c)
            total += x.flat(static_cast<std::size_t>((b * in + at / stride) * channels + c)) *
                     kernel.flat(static_cast<std::size_t>(((k - 1 - j) * filters + f) * channels + c));
        }
        y.set_flat(static_cast<std::size_t>((b * out + t) * filters + f), total);
      }
  return y;
}

LayerSpec conv1d_transpose_spec() {
  LayerSpec spec;
  spec.make = [] {
    return kiln::LayerPtr(kiln::Conv1DTranspose(
        3, 3, "tanh", {{"strides", 2}, {"padding", "same"}, {"bias_initializer", "random_normal"}}));
  };
  spec.call = LayerCase{{random_input({2, 4, 2}, 11)}};
  spec.output_shapes = {Shape{any, 8, 3}};
  spec.bad_inputs = {{"another channel count", {{any, 4, 3}}, "was built for 2 input channels"}};
  return spec;
}

LayerSpec conv2d_transpose_spec() {
  LayerSpec spec;
  spec.make = [] {
    return kiln::LayerPtr(kiln::Conv2DTranspose(2, 3, "",
                                                {{"strides", Config::list({2, 1})},
                                                 {"output_padding", Config::list({1, 0})},
                                                 {"bias_initializer", "random_normal"}}));
  };
  spec.call = LayerCase{{random_input({2, 3, 4, 2}, 12)}};
  // Heights: (3 − 1)·2 + 3 + 1 = 8; widths: (4 − 1)·1 + 3 + 0 = 6.
  spec.output_shapes = {Shape{any, 8, 6, 2}};
  spec.bad_inputs = {{"rank 3", {{any, 3, 2}}, "expects inputs of rank 4"}};
  return spec;
}
}  // namespace

KILN_LAYER_HARNESS("kiln>Conv1DTranspose", conv1d_transpose_spec)
KILN_LAYER_HARNESS("kiln>Conv2DTranspose", conv2d_transpose_spec)

TEST_CASE("Conv1DTranspose equals Keras's transposed convolution written out, over a grid", "[layers][conv]") {
  for (const std::int64_t k : {1, 2, 3, 4})
    for (const std::int64_t stride : {1, 2, 3})
      for (const char* padding : {"valid", "same"})
        for (const bool with_output_padding : {false, true}) {
          const std::int64_t output_padding = with_output_padding ? stride - 1 : -1;
          Config options{{"strides", stride}, {"padding", padding}, {"bias_initializer", "random_normal"}};
          if (with_output_padding) options.set("output_padding", output_padding);
          INFO("k " << k << " stride " << stride << " " << padding << " output_padding " << output_padding);
          kiln::Conv1DTranspose conv(3, k, "", options);
          const LayerCase c{{random_input({2, 5, 2}, static_cast<std::uint64_t>(k * 10 + stride))}};
          const kiln::Array y = run_layer(*conv, c).at(0);
          const std::vector<kiln::Array> w = conv.get_weights();
          const kiln::Array expected =
              transposed_reference(c.inputs[0], w[0], w[1], stride, 1, padding, output_padding);
          REQUIRE(y.shape() == expected.shape());
          CHECK(max_relative_difference(y, expected) < 1e-12);
        }
  // A dilated kernel, stride 1.
  kiln::Conv1DTranspose dilated(2, 3, "", {{"dilation_rate", 2}, {"padding", "same"}});
  const LayerCase c{{random_input({1, 6, 2}, 3)}};
  const kiln::Array y = run_layer(*dilated, c).at(0);
  const std::vector<kiln::Array> weights = dilated.get_weights();
  CHECK(max_relative_difference(y, transposed_reference(c.inputs[0], weights[0], weights[1], 1, 2, "same", -1)) <
        1e-12);
}

TEST_CASE("Conv transposes: Keras's kernel layout, config and checks", "[layers][conv][config]") {
  kiln::Conv2DTranspose up(8, 3, "relu", {{"strides", 2}});
  up->build_for(Shape{any, 4, 4, 5});
  CHECK(up.weights()[0].value.shape() == Shape{3, 3, 8, 5});  // (*kernel_size, filters, input channels)
  const Config config = up.get_config();
  CHECK(config.at("output_padding").is_null());
  CHECK_FALSE(config.contains("groups"));
  CHECK_THROWS_WITH(kiln::Conv2DTranspose(4, 3, "", {{"strides", 2}, {"output_padding", 2}}),
                    Contains("strictly less than strides"));
  CHECK_THROWS_WITH(kiln::Conv1DTranspose(4, 3, "", {{"padding", "causal"}}), Contains("'valid' or 'same'"));
  CHECK_THROWS_WITH(kiln::Conv1DTranspose(4, 3, "", {{"groups", 2}}), Contains("unknown argument 'groups'"));
}

// ---- depthwise and separable convolutions ---------------------------------------------------------------

namespace {
LayerSpec depthwise_conv2d_spec() {
  LayerSpec spec;
  spec.make = [] {
    return kiln::LayerPtr(kiln::DepthwiseConv2D(
        3, "tanh", {{"depth_multiplier", 2}, {"padding", "same"}, {"bias_initializer", "random_normal"}}));
  };
  spec.call = LayerCase{{random_input({2, 5, 4, 3}, 21)}};
  spec.output_shapes = {Shape{any, 5, 4, 6}};
  spec.bad_inputs = {{"another channel count", {{any, 5, 4, 2}}, "was built for 3 input channels"},
                     {"rank 3", {{any, 5, 3}}, "expects inputs of rank 4"}};
  return spec;
}
LayerSpec separable_conv1d_spec() {
  LayerSpec spec;
  spec.make = [] {
    return kiln::LayerPtr(kiln::SeparableConv1D(4, 3, "", {{"strides", 2}, {"bias_initializer", "random_normal"}}));
  };
  spec.call = LayerCase{{random_input({2, 9, 3}, 22)}};
  spec.output_shapes = {Shape{any, 4, 4}};
  spec.bad_inputs = {{"a window larger than the input", {{any, 2, 3}}, "cannot convolve its input"}};
  return spec;
}
LayerSpec separable_conv2d_spec() {
  LayerSpec spec;
  spec.make = [] {
    return kiln::LayerPtr(kiln::SeparableConv2D(
        3, 2, "relu",
        {{"depth_multiplier", 2}, {"data_format", "channels_first"}, {"bias_initializer", "random_normal"}}));
  };
  spec.call = LayerCase{{random_input({2, 2, 4, 5}, 23)}};
  spec.output_shapes = {Shape{any, 3, 3, 4}};
  spec.bad_inputs = {{"another channel count", {{any, 3, 4, 5}}, "was built for 2 input channels"}};
  return spec;
}
}  // namespace

KILN_LAYER_HARNESS("kiln>DepthwiseConv2D", depthwise_conv2d_spec)
KILN_LAYER_HARNESS("kiln>SeparableConv1D", separable_conv1d_spec)
KILN_LAYER_HARNESS("kiln>SeparableConv2D", separable_conv2d_spec)

TEST_CASE("DepthwiseConv2D: each channel's own filters, Keras's output order c·m + j", "[layers][conv]") {
  kiln::DepthwiseConv2D conv(2, "", {{"depth_multiplier", 2}, {"bias_initializer", "random_normal"}});
  const LayerCase c{{random_input({2, 4, 3, 3}, 24)}};
  const kiln::Array y = run_layer(*conv, c).at(0);
  const std::vector<kiln::Array> w = conv.get_weights();  // kernel (2, 2, 3, 2), bias (6,)
  REQUIRE(w[0].shape() == Shape{2, 2, 3, 2});
  REQUIRE(y.shape() == Shape{2, 3, 2, 6});
  double worst = 0;
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t i = 0; i < 3; ++i)
      for (std::int64_t j = 0; j < 2; ++j)
        for (std::int64_t ch = 0; ch < 3; ++ch)
          for (std::int64_t m = 0; m < 2; ++m) {
            double total = w[1].flat(static_cast<std::size_t>(ch * 2 + m));
            for (std::int64_t kh = 0; kh < 2; ++kh)
              for (std::int64_t kw = 0; kw < 2; ++kw)
                total += c.inputs[0].flat(static_cast<std::size_t>(((b * 4 + i + kh) * 3 + j + kw) * 3 + ch)) *
                         w[0].flat(static_cast<std::size_t>(((kh * 2 + kw) * 3 + ch) * 2 + m));
            const double got = y.flat(static_cast<std::size_t>(((b * 3 + i) * 2 + j) * 6 + ch * 2 + m));
            worst = std::max(worst, std::abs(got - total));
          }
  CHECK(worst < 1e-12);
  const Config config = conv.get_config();
  CHECK(config.get_int("depth_multiplier") == 2);
  CHECK(config.at("depthwise_initializer").get_string("class_name") == "GlorotUniform");
  CHECK_THROWS_WITH(kiln::DepthwiseConv2D(3, "", {{"depth_multiplier", 0}}), Contains("depth_multiplier must be"));
  CHECK_THROWS_WITH(kiln::DepthwiseConv2D(3, "", {{"filters", 4}}), Contains("unknown argument 'filters'"));
}

TEST_CASE("SeparableConv2D equals its depthwise convolution followed by a 1x1 convolution", "[layers][conv]") {
  kiln::SeparableConv2D separable(
      4, 3, "", {{"depth_multiplier", 2}, {"padding", "same"}, {"bias_initializer", "random_normal"}});
  const LayerCase c{{random_input({2, 5, 5, 3}, 25)}};
  const kiln::Array y = run_layer(*separable, c).at(0);
  const std::vector<kiln::Weight> weights = separable.weights();
  REQUIRE(weights.size() == 3);
  CHECK(weights[0].path == "depthwise_kernel");
  CHECK(weights[0].value.shape() == Shape{3, 3, 3, 2});
  CHECK(weights[1].path == "pointwise_kernel");
  CHECK(weights[1].value.shape() == Shape{1, 1, 6, 4});
  CHECK(weights[2].path == "bias");

  kiln::DepthwiseConv2D depthwise(3, "", {{"depth_multiplier", 2}, {"padding", "same"}, {"use_bias", false}});
  kiln::Conv2D pointwise(4, 1);
  const kiln::Tensor x = kiln::Input({any, 5, 5, 3}, kiln::DType::float64);
  kiln::Model composed(x, pointwise(depthwise(x)));
  depthwise.set_weights({weights[0].value});
  pointwise.set_weights({weights[1].value, weights[2].value});
  CHECK(max_relative_difference(composed.predict(c.inputs[0]), y) < 1e-12);
  CHECK(separable.get_config().at("pointwise_initializer").get_string("class_name") == "GlorotUniform");
}
