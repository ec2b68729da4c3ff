// Sequences whose length is known only when data arrives: Input({None, None, features}). Every sequence
// layer gives, for each length, what the same layer with the same weights gives when the length is fixed
// in the model; a language model trains on batches of several lengths.
#include <catch2/catch.hpp>

#include <functional>
#include <string>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/kiln.hpp>
#include "support/layer_check.hpp"

using kiln::Array;
using kiln::CallArgs;
using kiln::Config;
using kiln::Shape;
using kiln::Tensor;
using namespace kiln::testing;

namespace {

constexpr std::int64_t None = Shape::unknown;
const Config float64{{"dtype", "float64"}};

struct SequenceCase {
  std::string label;
  std::function<Tensor(const Tensor&)> apply;  // makes fresh layers and calls them on a (batch, steps, 8) input
};

// float64 layer options with one more key.
Config with(const Config& options, const std::string& key, const Config& value) { return options.with(key, value); }

std::vector<SequenceCase> sequence_cases() {
  return {
      {"MultiHeadAttention, causal",
       [](const Tensor& x) {
         return kiln::MultiHeadAttention(2, 3, float64)(x, x, CallArgs().option("use_causal_mask", true));
       }},
      {"MultiHeadAttention, scores returned",
       [](const Tensor& x) {
         const std::vector<Tensor> out =
             kiln::MultiHeadAttention(2, 3, float64)({x, x}, CallArgs().option("return_attention_scores", true));
         return out.at(0);
       }},
      {"MHAttention", [](const Tensor& x) { return kiln::MHAttention(4, 2, float64)(x); }},
      {"Attention, causal",
       [](const Tensor& x) {
         return kiln::Attention(true, "dot", float64)({x, x}, CallArgs().option("use_causal_mask", true));
       }},
      {"LSTM", [](const Tensor& x) { return kiln::LSTM(5, with(float64, "return_sequences", true))(x); }},
      {"GRU, last output", [](const Tensor& x) { return kiln::GRU(5, float64)(x); }},
      {"SimpleRNN, backwards",
       [](const Tensor& x) { return kiln::SimpleRNN(4, with(float64, "go_backwards", true))(x); }},
      {"Bidirectional LSTM",
       [](const Tensor& x) { return kiln::Bidirectional(kiln::LSTM(3, float64), "concat", float64)(x); }},
      {"LayerNormalization", [](const Tensor& x) { return kiln::LayerNormalization(1e-3, float64)(x); }},
      {"TimeDistributed Dense",
       [](const Tensor& x) { return kiln::TimeDistributed(kiln::Dense(3, "tanh", float64), float64)(x); }},
      {"GlobalAveragePooling1D",
       [](const Tensor& x) { return kiln::GlobalAveragePooling1D("channels_last", float64)(x); }},
      {"PositionEmbedding", [](const Tensor& x) { return kiln::Add(float64)({x, kiln::PositionEmbedding(12, float64)(x)}); }},
      {"SinePositionEncoding", [](const Tensor& x) { return kiln::Add(float64)({x, kiln::SinePositionEncoding(100.0, float64)(x)}); }},
      {"RotaryEmbedding", [](const Tensor& x) { return kiln::RotaryEmbedding(100.0, float64)(x); }},
      {"RotaryEmbedding, start_index 3",
       [](const Tensor& x) {
         return kiln::RotaryEmbedding(100.0, float64)(x, CallArgs().option("start_index", 3));
       }},
      {"TransformerEncoder, pre-norm",
       [](const Tensor& x) { return kiln::TransformerEncoder(8, 2, with(float64, "normalize_first", true))(x); }},
      {"TransformerDecoder", [](const Tensor& x) { return kiln::TransformerDecoder(8, 2, float64)(x); }},
  };
}

}  // namespace

TEST_CASE("sequence layers give, for any length, what they give with that length fixed in the model",
          "[layers][sequences]") {
  for (const SequenceCase& c : sequence_cases()) {
    INFO(c.label);
    const Tensor any_length = kiln::Input({None, None, 8}, kiln::DType::float64);
    kiln::Model open(any_length, c.apply(any_length));
    for (const std::int64_t length : {5, 2, 9}) {
      INFO("length " << length);
      const Tensor fixed_length = kiln::Input({None, length, 8}, kiln::DType::float64);
      kiln::Model fixed(fixed_length, c.apply(fixed_length));
      fixed->set_weights(open->get_weights());
      const Array x = random_input({3, length, 8}, static_cast<std::uint64_t>(length));
      const Array expected = fixed.predict(x);
      const Array got = open.predict(x, 2);  // two batches, stacked
      REQUIRE(got.shape() == expected.shape());
      CHECK(max_abs_difference(got, expected) <= 1e-12);
    }
  }
}

TEST_CASE("a Transformer language model trains on batches of several lengths and predicts any length",
          "[layers][sequences][train]") {
  const std::int64_t vocabulary = 12;
  const Tensor ids = kiln::Input({None, None});
  Tensor h = kiln::TokenAndPositionEmbedding(vocabulary, 16, 8)(ids);
  h = kiln::TransformerDecoder(16, 2, {{"normalize_first", true}})(h);
  kiln::Model model(ids, kiln::Dense(vocabulary)(h));
  CHECK(model->model_output_shapes() == std::vector<Shape>{Shape{None, None, vocabulary}});
  model.compile(kiln::create_optimizer("adam", {{"learning_rate", 0.01}}),
                kiln::Loss::from_config(Config{{"class_name", "SparseCategoricalCrossentropy"},
                                               {"config", Config{{"from_logits", true}}}}));

  // Next-token targets of a repeating pattern, in batches of 4 and 7 steps.
  auto batch = [&](std::int64_t length, Array& x, Array& y) {
    x = Array({6, length});
    y = Array({6, length});
    for (std::int64_t row = 0; row < 6; ++row)
      for (std::int64_t step = 0; step < length; ++step) {
        x.set_flat(static_cast<std::size_t>(row * length + step), static_cast<double>((row + step) % vocabulary));
        y.set_flat(static_cast<std::size_t>(row * length + step), static_cast<double>((row + step + 1) % vocabulary));
      }
  };
  Array short_x, short_y, long_x, long_y;
  batch(4, short_x, short_y);
  batch(7, long_x, long_y);
  const double first_short = model.test_on_batch(short_x, short_y).at("loss");
  const double first_long = model.test_on_batch(long_x, long_y).at("loss");
  for (int step = 0; step < 30; ++step) {
    model.train_on_batch(short_x, short_y);
    model.train_on_batch(long_x, long_y);
  }
  CHECK(model.test_on_batch(short_x, short_y).at("loss") < 0.5 * first_short);
  CHECK(model.test_on_batch(long_x, long_y).at("loss") < 0.5 * first_long);
  CHECK(model.predict(long_x, 4).shape() == Shape{6, 7, vocabulary});
  // Past the 16 learned positions: refused when the data arrives, naming the positions' gather.
  Array too_long, unused;
  batch(17, too_long, unused);
  CHECK_THROWS_AS(model.predict(too_long), kiln::ValueError);
}

TEST_CASE("lengths that disagree are refused when the data arrives",
          "[layers][sequences][errors]") {
  const Tensor a = kiln::Input({None, None, 4}), b = kiln::Input({None, None, 4});
  kiln::Model added({a, b}, kiln::Add()({a, b}));
  CHECK(added.predict({random_input({2, 3, 4}, 1), random_input({2, 3, 4}, 2)})[0].shape() == Shape{2, 3, 4});
  CHECK_THROWS_WITH(added.predict({random_input({2, 3, 4}, 1), random_input({2, 5, 4}, 2)}),
                    Catch::Contains("planning for the fed shapes") && Catch::Contains("(2, 5, 4)"));
}

TEST_CASE("MultiHeadAttention takes a query mask alone: masked queries, unmasked keys of another length",
          "[layers][sequences][masks]") {
  // Cross-attention from masked decoder steps to an encoder sequence that carries no mask.
  const Tensor ids = kiln::Input({None, None}, kiln::DType::float64);
  const Tensor queries = kiln::Embedding(6, 4, {{"mask_zero", true}, {"dtype", "float64"}})(ids);
  const Tensor encoded = kiln::Input({None, None, 4}, kiln::DType::float64);
  kiln::Model model({ids, encoded}, kiln::MultiHeadAttention(2, 2, float64)({queries, encoded}));
  Array tokens = Array::from_vector(std::vector<double>{3, 1, 0, 2, 5, 4}, {2, 3});
  const std::vector<Array> out = model.predict({tokens, random_input({2, 5, 4}, 3)});
  REQUIRE(out[0].shape() == Shape{2, 3, 4});
  for (int f = 0; f < 4; ++f) CHECK(out[0].flat(static_cast<std::size_t>(2 * 4 + f)) == 0.0);  // the masked query
}
