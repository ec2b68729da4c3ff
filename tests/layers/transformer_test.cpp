// keras-hub's TransformerEncoder and TransformerDecoder against the same computation written out from
// standalone layers with the block's weights (keras-hub's formulas, step by step), causality, masks and the
// harness.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/kiln.hpp>
#include "support/layer_check.hpp"
#include "support/temp_dir.hpp"

using kiln::Array;
using kiln::CallArgs;
using kiln::Config;
using kiln::Shape;
using kiln::Tensor;
using namespace kiln::testing;

namespace {

constexpr std::int64_t None = Shape::unknown;

// The pieces of a block, standalone, float64, with weights taken in order from `weights`.
struct Pieces {
  std::vector<Array> weights;
  std::size_t next = 0;
  std::vector<Array> take(std::size_t count) {
    std::vector<Array> part(weights.begin() + static_cast<long>(next), weights.begin() + static_cast<long>(next + count));
    next += count;
    return part;
  }
  kiln::LayerPtr attention(std::int64_t heads, std::int64_t depth, const Shape& query, const Shape& value) {
    kiln::MultiHeadAttention layer(heads, depth, {{"dtype", "float64"}});
    layer->build_for(std::vector<Shape>{query, value});
    layer->set_weights(take(8));
    return layer;
  }
  kiln::LayerPtr norm(const Shape& shape) {
    kiln::LayerNormalization layer({{"epsilon", 1e-5}, {"dtype", "float64"}});
    layer->build_for(shape);
    layer->set_weights(take(2));
    return layer;
  }
  kiln::LayerPtr dense(std::int64_t units, const std::string& activation, const Shape& shape) {
    kiln::Dense layer(units, activation, {{"dtype", "float64"}});
    layer->build_for(shape);
    layer->set_weights(take(2));
    return layer;
  }
};

// The residual sum, as a layer (a model is made of layers).
Tensor add(const Tensor& a, const Tensor& b) { return kiln::Add()({a, b}); }

Array predict(const Tensor& input, const Tensor& output, const std::vector<Array>& data) {
  kiln::Model model(std::vector<Tensor>{input}, std::vector<Tensor>{output});
  return model.predict(data).at(0);
}

}  // namespace

TEST_CASE("TransformerEncoder is keras-hub's residual attention and feed-forward parts, post- or pre-norm",
          "[layers][transformer]") {
  for (const bool first : {false, true}) {
    INFO("normalize_first " << first);
    kiln::TransformerEncoder encoder(12, 2, {{"normalize_first", first}, {"dtype", "float64"}});
    const Tensor x = kiln::Input({None, 5, 8}, kiln::DType::float64);
    const Array data = random_input({3, 5, 8}, 11);
    const Array got = predict(x, encoder(x), {data});

    // keras-hub's order of weights: attention (q, k, v, output), attention norm, feed-forward norm, the two
    // dense layers.
    Pieces pieces{encoder->get_weights()};
    REQUIRE(pieces.weights.size() == 16);
    const Shape sequence{None, None, 8};
    const kiln::LayerPtr attention = pieces.attention(2, 4, sequence, sequence);
    const kiln::LayerPtr attention_norm = pieces.norm(sequence);
    const kiln::LayerPtr feed_norm = pieces.norm(sequence);
    const kiln::LayerPtr hidden = pieces.dense(12, "relu", sequence);
    const kiln::LayerPtr output = pieces.dense(8, "linear", Shape{None, None, 12});
    const Tensor r = kiln::Input({None, 5, 8}, kiln::DType::float64);
    Tensor h = first ? (*attention_norm)(r) : r;
    h = add(r, (*attention)(std::vector<Tensor>{h, h})[0]);
    if (!first) h = (*attention_norm)(h);
    Tensor f = first ? (*feed_norm)(h) : h;
    f = add(h, (*output)((*hidden)(f)));
    if (!first) f = (*feed_norm)(f);
    CHECK(max_abs_difference(got, predict(r, f, {data})) < 1e-13);
  }
  kiln::TransformerEncoder encoder(12, 2);
  const Tensor x = kiln::Input({None, 5, 8});
  encoder(x);
  CHECK(encoder->keras_weight_paths().front() == "_self_attention_layer/query_dense/vars/0");
  CHECK(encoder->keras_weight_paths().back() == "_feedforward_output_dense/vars/1");
}

TEST_CASE("TransformerDecoder attends causally, then to the encoder's sequence, then feeds forward",
          "[layers][transformer]") {
  kiln::TransformerDecoder decoder(12, 2, {{"dtype", "float64"}, {"activation", "gelu"}});
  const Tensor target = kiln::Input({None, 4, 8}, kiln::DType::float64);
  const Tensor source = kiln::Input({None, 6, 10}, kiln::DType::float64);
  kiln::Model model({target, source}, {decoder({target, source})[0]});
  const Array target_data = random_input({2, 4, 8}, 12), source_data = random_input({2, 6, 10}, 13);
  const Array got = model.predict({target_data, source_data}).at(0);
  REQUIRE(decoder->has_cross_attention());

  // keras-hub's decoder order: self-attention and its norm, cross-attention and its norm, the dense layers,
  // then the feed-forward norm.
  Pieces pieces{decoder->get_weights()};
  REQUIRE(pieces.weights.size() == 26);
  const Shape sequence{None, None, 8};
  const kiln::LayerPtr self_attention = pieces.attention(2, 4, sequence, sequence);
  const kiln::LayerPtr self_norm = pieces.norm(sequence);
  const kiln::LayerPtr cross_attention = pieces.attention(2, 4, sequence, Shape{None, None, 10});
  const kiln::LayerPtr cross_norm = pieces.norm(sequence);
  const kiln::LayerPtr hidden = pieces.dense(12, "gelu", sequence);
  const kiln::LayerPtr output = pieces.dense(8, "linear", Shape{None, None, 12});
  const kiln::LayerPtr feed_norm = pieces.norm(sequence);
  const Tensor t = kiln::Input({None, 4, 8}, kiln::DType::float64);
  const Tensor s = kiln::Input({None, 6, 10}, kiln::DType::float64);
  Tensor h = (*self_norm)(add(t, (*self_attention)(std::vector<Tensor>{t, t}, CallArgs().option("use_causal_mask", true))[0]));
  h = (*cross_norm)(add(h, (*cross_attention)(std::vector<Tensor>{h, s})[0]));
  h = (*feed_norm)(add(h, (*output)((*hidden)(h))));
  kiln::Model reference({t, s}, {h});
  CHECK(max_abs_difference(got, reference.predict({target_data, source_data}).at(0)) < 1e-13);

  // A config rebuilds the cross-attention from the shapes it saved.
  const kiln::LayerPtr rebuilt = kiln::layer_from_config(kiln::serialize_layer(*decoder));
  CHECK(rebuilt->built());
  CHECK(rebuilt->get_weights().size() == 26);
  CHECK_THROWS_WITH(decoder(std::vector<Tensor>{target}), Catch::Contains("cross-attention"));
}

TEST_CASE("TransformerDecoder: a step's output does not depend on later steps", "[layers][transformer]") {
  kiln::TransformerDecoder decoder(16, 2, {{"normalize_first", true}, {"dtype", "float64"}});
  const Tensor x = kiln::Input({None, 5, 8}, kiln::DType::float64);
  const Tensor y = decoder(x);
  Array data = random_input({1, 5, 8}, 14);
  const Array before = predict(x, y, {data});
  for (std::size_t f = 0; f < 8; ++f) data.set_flat(4 * 8 + f, 3.0);  // change the last step only
  const Array after = predict(x, y, {data});
  for (std::size_t i = 0; i < 4 * 8; ++i) CHECK(after.flat(i) == before.flat(i));
  bool last_changed = false;
  for (std::size_t f = 0; f < 8; ++f) last_changed = last_changed || after.flat(32 + f) != before.flat(32 + f);
  CHECK(last_changed);
}

TEST_CASE("TransformerEncoder: padded steps, by padding_mask or by the input's mask, change no kept step",
          "[layers][transformer][masking]") {
  kiln::TransformerEncoder encoder(12, 2, {{"dtype", "float64"}});
  const Tensor longer = kiln::Input({None, 5, 8}, kiln::DType::float64);
  const Tensor padding = kiln::Input({None, 5}, kiln::DType::float64);
  const Tensor shorter = kiln::Input({None, 3, 8}, kiln::DType::float64);
  kiln::Model padded({longer, padding}, {encoder(longer, CallArgs().tensor("padding_mask", padding))});
  kiln::Model exact(shorter, encoder(shorter));
  const Array data = random_input({1, 5, 8}, 15);
  Array first3({1, 3, 8}, kiln::DType::float64);
  for (std::size_t i = 0; i < 24; ++i) first3.set_flat(i, data.flat(i));
  const Array keep = Array::from_vector(std::vector<double>{1, 1, 1, 0, 0}, {1, 5});
  const Array got = padded.predict({data, keep}).at(0), want = exact.predict(first3);
  for (std::size_t i = 0; i < 24; ++i) CHECK(got.flat(i) == Approx(want.flat(i)).margin(1e-13));

  // The mask of Embedding(mask_zero) does the same, and passes on to the output.
  const Tensor ids = kiln::Input({None, 5});
  const Tensor h = kiln::TransformerEncoder(8, 2)(kiln::Embedding(10, 8, {{"mask_zero", true}})(ids));
  CHECK(h.graph().mask_of(h).valid());
  CHECK_THROWS_WITH(encoder(longer, CallArgs().tensor("padding_mask", kiln::Input({None, 4}, kiln::DType::float64))),
                    Catch::Contains("padding mask"));
}

// ---- the layer harness ----------------------------------------------------------------------------------------

namespace {

LayerSpec encoder_spec() {
  LayerSpec spec;
  spec.make = [] {
    return kiln::LayerPtr(kiln::TransformerEncoder(6, 2, {{"normalize_first", true}, {"activation", "gelu"}}));
  };
  spec.call = LayerCase({random_input({2, 3, 4}, 16)});
  spec.output_shapes = {Shape{None, 3, 4}};
  spec.bad_inputs = {{"other features", {{None, 3, 5}}, "built for other features"}};
  return spec;
}

LayerSpec decoder_spec() {
  LayerSpec spec;
  spec.make = [] { return kiln::LayerPtr(kiln::TransformerDecoder(6, 2)); };
  spec.call = LayerCase({random_input({2, 3, 4}, 17), random_input({2, 2, 6}, 18)});
  spec.output_shapes = {Shape{None, 3, 4}};
  spec.bad_inputs = {{"other features", {{None, 3, 5}, {None, 2, 6}}, "built for other features"}};
  return spec;
}

}  // namespace

KILN_LAYER_HARNESS("keras_hub>TransformerEncoder", encoder_spec)
KILN_LAYER_HARNESS("keras_hub>TransformerDecoder", decoder_spec)

TEST_CASE("a small GPT with its head tied to its embedding trains, saves and reloads", "[layers][transformer][saving]") {
  // As keras-hub's GPT-2: a ReversibleEmbedding for the tokens, used again in reverse as the output head.
  const Tensor ids = kiln::Input({None, 8});
  kiln::ReversibleEmbedding tokens(12, 8, {{"name", "tokens"}});
  Tensor h = tokens(ids);
  h = kiln::Add()({h, kiln::PositionEmbedding(8)(h)});
  h = kiln::TransformerDecoder(16, 2, {{"normalize_first", true}})(h);
  h = kiln::LayerNormalization()(h);
  kiln::Model gpt(ids, tokens(h, CallArgs().option("reverse", true)), "gpt");
  gpt.compile("adam", kiln::Loss::from_config(Config{{"class_name", "SparseCategoricalCrossentropy"},
                                                     {"config", Config{{"from_logits", true}}}}));
  Array x({4, 8}), y({4, 8});
  for (std::size_t i = 0; i < 32; ++i) {
    x.set_flat(i, static_cast<double>(i % 12));
    y.set_flat(i, static_cast<double>((i + 1) % 12));
  }
  const double before = gpt.evaluate(x, y).at("loss");
  for (int step = 0; step < 20; ++step) gpt.train_on_batch({x}, {y});
  CHECK(gpt.evaluate(x, y).at("loss") < before);
  const Array expected = gpt.predict(x);
  TempDir dir;
  for (const std::string file : {"gpt.kiln", "gpt.keras"}) {
    INFO(file);
    gpt.save(dir.file(file));
    kiln::Model loaded = kiln::load_model(dir.file(file));
    CHECK(max_abs_difference(loaded.predict(x), expected) == 0.0);
    CHECK(loaded.count_params() == gpt.count_params());
  }

  // The token embedding of a TokenAndPositionEmbedding called on its own cannot be saved as one layer.
  kiln::TokenAndPositionEmbedding embed(12, 8, 8);
  const Tensor g = embed(ids);
  kiln::Model tied(ids, (*embed->token_embedding())(g, CallArgs().option("reverse", true)));
  CHECK_THROWS_WITH(tied.save(dir.file("tied.kiln")),
                    Catch::Contains("also belongs to") && Catch::Contains("standalone layer"));
}
