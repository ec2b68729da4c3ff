// Masks as Keras propagates them: Embedding(mask_zero) and Masking make them, layers that keep the steps
// pass them on, recurrent layers, attention and 1-D global pooling use them, and a layer that cannot use
// one says so.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/warnings.hpp>
#include <kiln/kiln.hpp>
#include "support/layer_check.hpp"
#include "support/temp_dir.hpp"

using kiln::Array;
using kiln::Config;
using kiln::Shape;
using kiln::Tensor;
using namespace kiln::testing;

namespace {

constexpr std::int64_t None = Shape::unknown;

// Token ids (batch, steps) as floats, 0 being padding.
Array ids(const std::vector<std::vector<double>>& rows) {
  Array array({static_cast<std::int64_t>(rows.size()), static_cast<std::int64_t>(rows[0].size())},
              kiln::DType::float32);
  for (std::size_t r = 0; r < rows.size(); ++r)
    for (std::size_t c = 0; c < rows[r].size(); ++c) array.set_flat(r * rows[0].size() + c, rows[r][c]);
  return array;
}

// Collects kiln's warnings while alive.
struct Warnings {
  std::vector<std::string> messages;
  kiln::WarningHandler previous;
  Warnings() {
    previous = kiln::set_warning_handler([this](const std::string& message) { messages.push_back(message); });
  }
  ~Warnings() { kiln::set_warning_handler(previous); }
};

}  // namespace

TEST_CASE("a padded sequence through Embedding(mask_zero) gives what the unpadded one gives", "[layers][masking]") {
  // The same layers on sequences of 5 steps, the last two padding, and on the first 3 steps alone.
  for (const std::string kind : {"lstm", "gru", "simple_rnn", "bidirectional", "pooling"}) {
    INFO(kind);
    kiln::Embedding embedding(10, 4, {{"mask_zero", true}, {"name", "embed"}});
    kiln::LayerPtr layer;
    if (kind == "lstm") layer = kiln::LSTM(3);
    if (kind == "gru") layer = kiln::GRU(3, {{"bias_initializer", "random_normal"}});
    if (kind == "simple_rnn") layer = kiln::SimpleRNN(3);
    if (kind == "bidirectional") layer = kiln::Bidirectional(kiln::LSTM(3));
    if (kind == "pooling") layer = kiln::GlobalAveragePooling1D();
    auto model_for = [&](std::int64_t steps) {
      const Tensor x = kiln::Input({None, steps});
      return kiln::Model(x, (*layer)(embedding(x)));
    };
    kiln::Model padded = model_for(5), unpadded = model_for(3);
    const Array long_ids = ids({{3, 1, 7, 0, 0}, {2, 9, 5, 0, 0}});
    const Array short_ids = ids({{3, 1, 7}, {2, 9, 5}});
    CHECK(max_abs_difference(padded.predict(long_ids), unpadded.predict(short_ids)) <= 1e-6);
  }
}

TEST_CASE("masks flow through layers that keep the steps, to recurrent layers, and stop where Keras's do",
          "[layers][masking]") {
  Warnings warnings;
  const Tensor x = kiln::Input({None, 4}, kiln::DType::float32, "ids");
  const Tensor embedded = kiln::Embedding(10, 6, {{"mask_zero", true}})(x);
  kiln::Graph& graph = embedded.graph();
  const Tensor mask = graph.mask_of(embedded);
  REQUIRE(mask.valid());
  CHECK(mask.shape() == Shape{None, 4});
  const Tensor dense = kiln::Dense(5)(kiln::Dropout(0.1)(embedded));
  CHECK(graph.mask_of(dense).valid());
  const Tensor sequence = kiln::LSTM(3, {{"return_sequences", true}})(dense);
  CHECK(graph.mask_of(sequence).valid());
  kiln::LSTM last_layer(3, {{"return_state", true}});
  const kiln::Outputs last = last_layer(std::vector<Tensor>{sequence});
  for (const Tensor& output : last) CHECK_FALSE(graph.mask_of(output).valid());  // no steps left
  CHECK(warnings.messages.empty());
  // Flatten cannot use a mask: it says so, once, and the mask stops there.
  kiln::Flatten flatten(kiln::Config{{"name", "flat"}});
  const Tensor flat = flatten(dense);
  CHECK_FALSE(graph.mask_of(flat).valid());
  REQUIRE(warnings.messages.size() == 1);
  CHECK_THAT(warnings.messages[0], Catch::Contains("Flatten 'flat'") && Catch::Contains("does not support masking"));
  flatten(dense);
  CHECK(warnings.messages.size() == 1);
}

TEST_CASE("Masking marks all-mask_value steps as padding and zeroes them, as Keras's", "[layers][masking]") {
  kiln::Masking masking(-1.0, {{"dtype", "float64"}});
  Array x({1, 3, 2}, kiln::DType::float64);
  const std::vector<double> values = {1, 2, -1, -1, -1, 4};
  for (std::size_t i = 0; i < values.size(); ++i) x.set_flat(i, values[i]);
  const Array y = run_layer(*masking, LayerCase{{x}})[0];
  CHECK(y.to_vector<double>() == std::vector<double>{1, 2, 0, 0, -1, 4});
  const Tensor input = kiln::Input({None, 3, 2}, kiln::DType::float64);
  const Tensor out = masking(input);
  REQUIRE(input.graph().mask_of(out).valid());
  CHECK(input.graph().mask_of(out).shape() == Shape{None, 3});
  CHECK(masking.get_config().get_double("mask_value") == -1.0);
  CHECK_THROWS_WITH(kiln::Masking(Config{{"mask_valu", 1.0}}), Catch::Contains("unknown argument 'mask_valu'"));
  // A masked LSTM equals the LSTM on the kept steps only.
  kiln::LSTM lstm(2, {{"dtype", "float64"}});
  Array kept({1, 2, 2}, kiln::DType::float64);
  for (std::size_t i = 0; i < 4; ++i) kept.set_flat(i, std::vector<double>{1, 2, -1, 4}[i]);
  const Tensor all = kiln::Input({None, 3, 2}, kiln::DType::float64), some = kiln::Input({None, 2, 2}, kiln::DType::float64);
  kiln::Model masked_model(all, lstm(masking(all))), kept_model(some, lstm(some));
  CHECK(max_abs_difference(masked_model.predict(x), kept_model.predict(kept)) <= 1e-12);
}

TEST_CASE("1-D global pooling over the kept steps only", "[layers][masking]") {
  Array x({1, 3, 2}, kiln::DType::float64);
  for (std::size_t i = 0; i < 6; ++i) x.set_flat(i, std::vector<double>{1, -5, 3, 2, 8, 9}[i]);
  Array mask({1, 3}, kiln::DType::float64);
  for (std::size_t i = 0; i < 3; ++i) mask.set_flat(i, i == 2 ? 0.0 : 1.0);
  LayerCase c{{x}};
  c.tensor_args = {{"mask", mask}};
  kiln::GlobalAveragePooling1D average;
  kiln::GlobalMaxPooling1D maximum;
  CHECK(run_layer(*average, c)[0].to_vector<double>() == std::vector<double>{2.0, -1.5});
  CHECK(run_layer(*maximum, c)[0].to_vector<double>() == std::vector<double>{3.0, 2.0});
  // A row without a kept step: Keras's mean gives NaN; the maximum gives 0.
  for (std::size_t i = 0; i < 3; ++i) mask.set_flat(i, 0.0);
  c.tensor_args = {{"mask", mask}};
  CHECK(std::isnan(run_layer(*average, c)[0].flat(0)));
  CHECK(run_layer(*maximum, c)[0].to_vector<double>() == std::vector<double>{0.0, 0.0});
  // Gradients through the masked pooling.
  mask.set_flat(0, 1.0);
  mask.set_flat(2, 1.0);
  c.tensor_args = {{"mask", mask}};
  for (kiln::LayerPtr layer : {kiln::LayerPtr(average), kiln::LayerPtr(maximum)}) {
    const GradcheckReport report = gradcheck_layer(*layer, c);
    INFO(layer->describe() << ": " << report.worst_entry());
    CHECK(report.max_relative_error <= 1e-6);
  }
}

TEST_CASE("attention leaves padded keys out, merges or their masks", "[layers][masking]") {
  // Self-attention on padded and unpadded sequences: the kept positions agree.
  kiln::Embedding embedding(10, 8, {{"mask_zero", true}});
  kiln::MultiHeadAttention attention(2, 4);
  auto model_for = [&](std::int64_t steps) {
    const Tensor x = kiln::Input({None, steps});
    const Tensor e = embedding(x);
    return kiln::Model(x, attention(std::vector<Tensor>{e, e}));
  };
  kiln::Model padded = model_for(5), unpadded = model_for(3);
  const Array long_out = padded.predict(ids({{3, 1, 7, 0, 0}}));
  const Array short_out = unpadded.predict(ids({{3, 1, 7}}));
  for (std::size_t i = 0; i < short_out.size(); ++i) CHECK(long_out.flat(i) == Approx(short_out.flat(i)).margin(1e-6));

  // Add: a step is kept where either input keeps it.
  const Tensor a = kiln::Input({None, 3}), b = kiln::Input({None, 3});
  kiln::Embedding left(5, 2, {{"mask_zero", true}}), right(5, 2, {{"mask_zero", true}});
  const Tensor sum = kiln::Add()({left(a), right(b)});
  kiln::Model model({a, b}, {kiln::GlobalAveragePooling1D()(sum)});
  const Tensor mask = a.graph().mask_of(sum);
  REQUIRE(mask.valid());
  (void)model;
}

TEST_CASE("a model with masks saves, reloads and predicts the same", "[layers][masking][saving]") {
  TempDir folder;
  const Tensor x = kiln::Input({None, 6});
  Tensor h = kiln::Embedding(12, 5, {{"mask_zero", true}})(x);
  h = kiln::Bidirectional(kiln::GRU(4, {{"return_sequences", true}}))(h);
  h = kiln::GlobalAveragePooling1D()(h);
  kiln::Model model(x, kiln::Dense(1)(h));
  const Array data = ids({{1, 4, 2, 0, 0, 0}, {5, 5, 5, 5, 11, 0}});
  const Array before = model.predict(data);
  model.save(folder.file("masked.kiln"));
  kiln::Model again = kiln::load_model(folder.file("masked.kiln"));
  CHECK(again.predict(data).bitwise_equal(before));
  model.save(folder.file("masked.keras"));
  CHECK(max_abs_difference(kiln::load_model(folder.file("masked.keras")).predict(data), before) == 0.0);
}

TEST_CASE("Graph::set_mask checks what it attaches", "[core][masking]") {
  kiln::Graph graph;
  const Tensor x = graph.placeholder({None, 4, 3}, kiln::DType::float32, "x");
  CHECK_THROWS_AS(graph.set_mask(x, graph.placeholder({None, 5}, kiln::DType::float32, "m")), kiln::ShapeError);
  CHECK_THROWS_AS(graph.set_mask(x, graph.placeholder({None, 4}, kiln::DType::float64, "m")), kiln::ShapeError);
  CHECK_THROWS_AS(graph.set_mask(x, graph.placeholder({None, 4, 3}, kiln::DType::float32, "m")), kiln::ShapeError);
  kiln::Graph other;
  CHECK_THROWS_AS(graph.set_mask(x, other.placeholder({None, 4}, kiln::DType::float32, "m")), kiln::Error);
  const Tensor good = graph.placeholder({None, 4}, kiln::DType::float32, "m");
  graph.set_mask(x, good);
  CHECK(graph.mask_of(x).id() == good.id());
  CHECK_FALSE(graph.mask_of(good).valid());
}

// ---- the layer harness ---------------------------------------------------------------------------------

namespace {
LayerSpec masking_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::Masking(0.5)); };
  spec.call = LayerCase{{random_input({2, 3, 4}, 5)}};
  spec.output_shapes = {Shape{None, 3, 4}};
  spec.bad_inputs = {{"no features", {{None}}, "takes inputs of rank 2 or more"}};
  return spec;
}
}  // namespace

KILN_LAYER_HARNESS("kiln>Masking", masking_spec)
