// generate(): keras-hub's samplers, cached decoding that gives the tokens the window-recomputing path
// gives, and the errors of bad prompts and options.
#include <catch2/catch.hpp>

#include <functional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/kiln.hpp>

using kiln::Array;
using kiln::Config;
using kiln::GenerateOptions;
using kiln::Tensor;

namespace {

constexpr std::int64_t None = kiln::Shape::unknown;

// A two-block GPT over 11 tokens with a context of 12, trained a little on a repeating sequence so that its
// logits are far from uniform.
kiln::Model small_gpt() {
  const Tensor ids = kiln::Input({None, 12});
  kiln::ReversibleEmbedding tokens(11, 16);
  Tensor h = tokens(ids);
  h = kiln::Add()({h, kiln::PositionEmbedding(12)(h)});
  for (int block = 0; block < 2; ++block)
    h = kiln::TransformerDecoder(32, 2, {{"normalize_first", true}, {"activation", "gelu"}})(h);
  h = kiln::LayerNormalization()(h);
  kiln::Model gpt(ids, tokens(h, kiln::CallArgs().option("reverse", true)), "gpt");
  gpt.compile(kiln::create_optimizer("adam", Config{{"learning_rate", 0.01}}),
              kiln::Loss::from_config(Config{{"class_name", "SparseCategoricalCrossentropy"},
                                                     {"config", Config{{"from_logits", true}}}}));
  Array x({8, 12}), y({8, 12});
  for (std::size_t i = 0; i < 96; ++i) {
    x.set_flat(i, static_cast<double>((i * 3) % 11));
    y.set_flat(i, static_cast<double>((i * 3 + 3) % 11));
  }
  for (int step = 0; step < 100; ++step) gpt.train_on_batch({x}, {y});
  return gpt;
}

std::vector<std::int64_t> run(const kiln::Model& model, std::vector<std::int64_t> prompt, GenerateOptions options,
                              bool cache) {
  options.use_cache = cache;
  return kiln::generate(model, prompt, options);
}

}  // namespace

TEST_CASE("generate: cached decoding gives the tokens that re-reading the window gives", "[train][generate]") {
  const kiln::Model gpt = small_gpt();
  for (const std::string sampler : {"greedy", "random", "top_k", "top_p"}) {
    INFO(sampler);
    GenerateOptions options;
    options.sampler = sampler;
    options.max_new_tokens = 20;  // past the context of 12: the last 12 tokens are kept
    options.seed = 5;
    options.temperature = 1.5;
    options.p = 0.9;
    const std::vector<std::int64_t> cached = run(gpt, {1, 4, 7}, options, true);
    const std::vector<std::int64_t> window = run(gpt, {1, 4, 7}, options, false);
    REQUIRE(cached.size() == 23);
    CHECK(cached == window);
    CHECK(std::vector<std::int64_t>(cached.begin(), cached.begin() + 3) == std::vector<std::int64_t>{1, 4, 7});
    for (const std::int64_t token : cached) CHECK((token >= 0 && token < 11));
  }
  // Trained to step by 3 (mod 11), greedy continues the pattern.
  GenerateOptions greedy;
  greedy.max_new_tokens = 6;
  CHECK(kiln::generate(gpt, {1, 4, 7}, greedy) == std::vector<std::int64_t>{1, 4, 7, 10, 2, 5, 8, 0, 3});
}

TEST_CASE("generate: recurrent layers and rotary positions decode a token at a time too", "[train][generate]") {
  // Recurrent layers keep their states in the step's caches; RotaryEmbedding rotates by the step's position.
  std::vector<std::pair<std::string, std::function<Tensor(const Tensor&)>>> bodies = {
      {"LSTM", [](const Tensor& x) { return kiln::LSTM(8, {{"return_sequences", true}})(x); }},
      {"GRU then SimpleRNN",
       [](const Tensor& x) {
         return kiln::SimpleRNN(6, {{"return_sequences", true}})(kiln::GRU(8, {{"return_sequences", true}})(x));
       }},
      {"RotaryEmbedding then TransformerDecoder",
       [](const Tensor& x) { return kiln::TransformerDecoder(16, 2)(kiln::RotaryEmbedding(100.0)(x)); }},
  };
  for (const auto& [label, body] : bodies) {
    INFO(label);
    const Tensor ids = kiln::Input({None, 10});
    kiln::Model model(ids, kiln::Dense(7)(body(kiln::Embedding(7, 8)(ids))));
    for (const std::string sampler : {"greedy", "random"}) {
      GenerateOptions options;
      options.sampler = sampler;
      options.max_new_tokens = 12;  // past the context of 10: the window is re-read from there on
      options.seed = 3;
      const std::vector<std::int64_t> cached = run(model, {2, 5, 1}, options, true);
      CHECK(cached.size() == 15);
      CHECK(cached == run(model, {2, 5, 1}, options, false));
    }
  }
}

TEST_CASE("generate: the samplers as keras-hub defines them", "[train][generate]") {
  const kiln::Model gpt = small_gpt();
  GenerateOptions greedy;
  greedy.max_new_tokens = 8;
  const std::vector<std::int64_t> most_likely = kiln::generate(gpt, {2}, greedy);
  // top_k with k = 1, and top_p with a tiny p, can only take the most likely token.
  GenerateOptions one = greedy;
  one.sampler = "top_k";
  one.k = 1;
  CHECK(kiln::generate(gpt, {2}, one) == most_likely);
  one.sampler = "top_p";
  one.p = 1e-9;
  CHECK(kiln::generate(gpt, {2}, one) == most_likely);
  // random: the same seed draws the same tokens; a hot temperature with other seeds draws others.
  GenerateOptions random = greedy;
  random.sampler = "random";
  random.temperature = 50.0;
  random.max_new_tokens = 30;
  random.seed = 1;
  const std::vector<std::int64_t> first = kiln::generate(gpt, {2}, random);
  CHECK(kiln::generate(gpt, {2}, random) == first);
  std::set<std::vector<std::int64_t>> draws;
  for (std::uint64_t seed = 2; seed < 6; ++seed) {
    random.seed = seed;
    draws.insert(kiln::generate(gpt, {2}, random));
  }
  CHECK(draws.size() > 1);
}

TEST_CASE("generate: bad prompts, options and models are refused before any step", "[train][generate][errors]") {
  const kiln::Model gpt = small_gpt();
  CHECK_THROWS_WITH(kiln::generate(gpt, {}), Catch::Contains("prompt is empty"));
  CHECK_THROWS_WITH(kiln::generate(gpt, {1, 11}), Catch::Contains("outside the vocabulary [0, 11)"));
  CHECK_THROWS_WITH(kiln::generate(gpt, {-1}), Catch::Contains("outside the vocabulary"));
  GenerateOptions options;
  options.sampler = "beam";
  CHECK_THROWS_AS(kiln::generate(gpt, {1}, options), kiln::ConfigError);
  options.sampler = "random";
  options.temperature = 0.0;
  CHECK_THROWS_WITH(kiln::generate(gpt, {1}, options), Catch::Contains("temperature"));
  // A prompt longer than the context keeps its last 12 tokens and still generates.
  GenerateOptions greedy;
  greedy.max_new_tokens = 2;
  CHECK(kiln::generate(gpt, std::vector<std::int64_t>(20, 3), greedy).size() == 22);
  // A bidirectional model reads the future: it cannot decode a token at a time; without the cache it generates.
  const Tensor ids = kiln::Input({None, 6});
  const Tensor h = kiln::Bidirectional(kiln::LSTM(8, {{"return_sequences", true}}))(kiln::Embedding(5, 4)(ids));
  const kiln::Model both_ways(ids, kiln::Dense(5)(h));
  CHECK_THROWS_WITH(kiln::generate(both_ways, {1, 2}),
                    Catch::Contains("Bidirectional") && Catch::Contains("use_cache = false"));
  greedy.use_cache = false;
  CHECK(kiln::generate(both_ways, {1, 2}, greedy).size() == 4);
  // A recurrent layer given its initial states as inputs would start every step from them: refused.
  {
    const Tensor tokens = kiln::Input({None, 6});
    const Tensor embedded = kiln::Embedding(5, 4)(tokens);
    const kiln::LSTM states(4, {{"return_sequences", true}, {"return_state", true}});
    const std::vector<Tensor> first = (*states)(std::vector<Tensor>{embedded}, kiln::CallArgs());
    const Tensor second = kiln::LSTM(4, {{"return_sequences", true}})({first[0], first[1], first[2]});
    const kiln::Model chained(tokens, kiln::Dense(5)(second));
    CHECK_THROWS_WITH(kiln::generate(chained, {1, 2}), Catch::Contains("initial states") &&
                                                          Catch::Contains("use_cache = false"));
    CHECK(kiln::generate(chained, {1, 2}, greedy).size() == 4);
  }
  // Not a language model: the shapes say so.
  const Tensor x = kiln::Input({None, 4});
  CHECK_THROWS_AS(kiln::generate(kiln::Model(x, kiln::Dense(3)(x)), {1}), kiln::ShapeError);
}
