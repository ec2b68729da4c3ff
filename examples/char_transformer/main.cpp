// A character-level GPT on Shakespeare, nanoGPT's CPU run of shakespeare_char in kiln: 4 pre-norm decoder
// blocks of 4 heads over 128 features, context 64, batch 12, dropout 0, 2000 iterations of AdamW (learning
// rate 1e-3 after 100 warmup steps, cosine decay to 1e-4 at step 2000, β2 0.99, weight decay 0.1, gradient
// norm clipped at 1), learned positions and the output head tied to the token embedding. The first 90 % of
// the text trains, the last 10 % validates, as nanoGPT splits it.
//
// It prints the validation loss (nats per character) beside two baselines, a bigram model counted from the
// training text and an LSTM language model trained the same way, saves the model with its tokenizer,
// reloads it, and samples 500 characters from a prompt with the key/value cache.
// nanoGPT's README reports 1.88 for this run (about 3 minutes on a laptop CPU).
//
//   char_transformer [--quick] [--policy NAME] [text file] [model file]
// --quick runs a tiny version in seconds (the test suite runs it). --policy mixed_bfloat16 makes the models under
// that Keras dtype policy (kiln::set_dtype_policy: float32 variables, bfloat16 matrix products).
// Data: data/tinyshakespeare.txt (karpathy/char-rnn; see data/README.md).
#include <kiln/kiln.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#ifndef KILN_DATA_DIR
#define KILN_DATA_DIR "data"
#endif

namespace {

constexpr std::int64_t None = kiln::Shape::unknown;

struct Settings {
  std::int64_t blocks = 4, heads = 4, width = 128, context = 64, batch = 12, iterations = 2000, warmup = 100;
  std::int64_t eval_batches = 20, sample_length = 500, lstm_units = 256;
  double learning_rate = 1e-3, min_learning_rate = 1e-4;
};

Settings quick_settings() {
  Settings s;
  s.blocks = 1;
  s.heads = 2;
  s.width = 32;
  s.context = 16;
  s.batch = 8;
  s.iterations = 40;
  s.warmup = 5;
  s.eval_batches = 4;
  s.sample_length = 60;
  s.lstm_units = 32;
  return s;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw kiln::ValueError("cannot read " + path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// Random windows of context + 1 tokens from `tokens`: x their first `context`, y the next token of each.
class Windows {
 public:
  Windows(const std::vector<std::int64_t>& tokens, const Settings& s, std::uint64_t seed)
      : tokens_(tokens), s_(s), rng_(seed), x_({s.batch, s.context}), y_({s.batch, s.context}) {}

  void draw() {
    const auto starts = static_cast<double>(tokens_.size() - static_cast<std::size_t>(s_.context) - 1);
    for (std::int64_t b = 0; b < s_.batch; ++b) {
      const auto start = static_cast<std::size_t>(std::floor(rng_.uniform() * starts));
      for (std::int64_t t = 0; t < s_.context; ++t) {
        const auto at = static_cast<std::size_t>(b * s_.context + t);
        x_.set_flat(at, static_cast<double>(tokens_[start + static_cast<std::size_t>(t)]));
        y_.set_flat(at, static_cast<double>(tokens_[start + static_cast<std::size_t>(t) + 1]));
      }
    }
  }
  const kiln::Array& x() const { return x_; }
  const kiln::Array& y() const { return y_; }

 private:
  const std::vector<std::int64_t>& tokens_;
  Settings s_;
  kiln::Rng rng_;
  kiln::Array x_, y_;
};

kiln::Loss logits_loss() {
  return kiln::Loss::from_config(
      kiln::Config{{"class_name", "SparseCategoricalCrossentropy"}, {"config", kiln::Config{{"from_logits", true}}}});
}

// nanoGPT's optimizer and schedule, in Keras's terms.
kiln::OptimizerPtr adamw(const Settings& s) {
  const kiln::Config schedule = {
      {"class_name", "CosineDecay"},
      {"config",
       kiln::Config{{"initial_learning_rate", 0.0},
                    {"decay_steps", s.iterations - s.warmup},
                    {"alpha", s.min_learning_rate / s.learning_rate},
                    {"warmup_target", s.learning_rate},
                    {"warmup_steps", s.warmup}}}};
  return kiln::create_optimizer("adamw", {{"learning_rate", schedule},
                                          {"beta_2", 0.99},
                                          {"weight_decay", 0.1},
                                          {"global_clipnorm", 1.0}});
}

kiln::Model gpt(std::int64_t vocabulary, const Settings& s) {
  const kiln::Tensor ids = kiln::Input({None, s.context}, kiln::DType::float32, "ids");
  kiln::ReversibleEmbedding tokens(vocabulary, s.width, {{"name", "token_embedding"}});
  kiln::Tensor h = tokens(ids);
  h = kiln::Add()({h, kiln::PositionEmbedding(s.context, {{"name", "position_embedding"}})(h)});
  for (std::int64_t block = 0; block < s.blocks; ++block)
    h = kiln::TransformerDecoder(4 * s.width, s.heads, {{"normalize_first", true}, {"activation", "gelu"}})(h);
  h = kiln::LayerNormalization({{"epsilon", 1e-5}, {"name", "final_norm"}})(h);
  return kiln::Model(ids, tokens(h, kiln::CallArgs().option("reverse", true)), "char_gpt");
}

kiln::Model lstm(std::int64_t vocabulary, const Settings& s) {
  const kiln::Tensor ids = kiln::Input({None, s.context}, kiln::DType::float32, "ids");
  kiln::Tensor h = kiln::Embedding(vocabulary, s.width)(ids);
  h = kiln::LSTM(s.lstm_units, {{"return_sequences", true}})(h);
  return kiln::Model(ids, kiln::Dense(vocabulary)(h), "char_lstm");
}

// Trains `model` for the iterations on random training windows; the mean loss of fixed random validation
// windows (nanoGPT's estimate_loss: eval_iters batches).
double train_and_validate(kiln::Model& model, const std::vector<std::int64_t>& train,
                          const std::vector<std::int64_t>& validation, const Settings& s, const char* label) {
  model.compile(adamw(s), logits_loss());
  Windows batches(train, s, 1337);
  const auto started = std::chrono::steady_clock::now();
  for (std::int64_t step = 0; step < s.iterations; ++step) {
    batches.draw();
    const double loss = model.train_on_batch(batches.x(), batches.y()).at("loss");
    if (step % (s.iterations / 10 > 0 ? s.iterations / 10 : 1) == 0 || step + 1 == s.iterations)
      std::printf("%s  step %5lld  train loss %.4f\n", label, static_cast<long long>(step), loss);
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  Windows held_out(validation, s, 2024);
  double total = 0;
  for (std::int64_t b = 0; b < s.eval_batches; ++b) {
    held_out.draw();
    total += model.evaluate(held_out.x(), held_out.y(), s.batch).at("loss");
  }
  std::printf("%s  %lld iterations in %.1f s\n", label, static_cast<long long>(s.iterations), seconds);
  return total / static_cast<double>(s.eval_batches);
}

// A bigram model counted from the training text (add-one smoothing): the validation loss of predicting
// each character from the one before.
double bigram_loss(const std::vector<std::int64_t>& train, const std::vector<std::int64_t>& validation,
                   std::int64_t vocabulary) {
  const auto v = static_cast<std::size_t>(vocabulary);
  std::vector<double> counts(v * v, 1.0), totals(v, static_cast<double>(v));
  for (std::size_t i = 1; i < train.size(); ++i) {
    counts[static_cast<std::size_t>(train[i - 1]) * v + static_cast<std::size_t>(train[i])] += 1;
    totals[static_cast<std::size_t>(train[i - 1])] += 1;
  }
  double loss = 0;
  for (std::size_t i = 1; i < validation.size(); ++i) {
    const auto previous = static_cast<std::size_t>(validation[i - 1]);
    loss -= std::log(counts[previous * v + static_cast<std::size_t>(validation[i])] / totals[previous]);
  }
  return loss / static_cast<double>(validation.size() - 1);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    const bool quick = !args.empty() && args[0] == "--quick";
    if (quick) args.erase(args.begin());
    if (args.size() >= 2 && args[0] == "--policy") {
      kiln::set_dtype_policy(args[1]);
      std::printf("dtype policy %s\n", args[1].c_str());
      args.erase(args.begin(), args.begin() + 2);
    }
    const Settings s = quick ? quick_settings() : Settings();
    const std::string text = read_text(args.size() > 0 ? args[0] : KILN_DATA_DIR "/tinyshakespeare.txt");
    const std::string path = args.size() > 1 ? args[1] : "char_transformer.kiln";

    const kiln::CharacterTokenizer tokenizer = kiln::CharacterTokenizer::from_text(text);
    const std::vector<std::int64_t> tokens = tokenizer.encode(text);
    const auto split = static_cast<std::ptrdiff_t>(0.9 * static_cast<double>(tokens.size()));
    const std::vector<std::int64_t> train(tokens.begin(), tokens.begin() + split);
    const std::vector<std::int64_t> validation(tokens.begin() + split, tokens.end());
    const std::int64_t vocabulary = tokenizer.vocabulary_size();
    std::printf("%zu characters, %lld distinct; %zu train, %zu validation\n", tokens.size(),
                static_cast<long long>(vocabulary), train.size(), validation.size());

    kiln::Model model = gpt(vocabulary, s);
    model.summary();
    const double gpt_loss = train_and_validate(model, train, validation, s, "gpt ");
    kiln::Model baseline = lstm(vocabulary, s);
    const double lstm_loss = train_and_validate(baseline, train, validation, s, "lstm");
    const double bigram = bigram_loss(train, validation, vocabulary);
    std::printf("\nvalidation loss (nats per character)\n");
    const std::string lstm_name = "LSTM(" + std::to_string(s.lstm_units) + "), " +
                                  std::to_string(baseline.count_params()) + " params";
    const std::string gpt_name = "GPT, " + std::to_string(model.count_params()) + " params";
    std::printf("  %-28s %.4f\n", "bigram counts", bigram);
    std::printf("  %-28s %.4f\n", lstm_name.c_str(), lstm_loss);
    std::printf("  %-28s %.4f   (nanoGPT's README: 1.88)\n", gpt_name.c_str(), gpt_loss);

    tokenizer.attach(model);
    model.save(path);
    const kiln::Model reloaded = kiln::load_model(path);
    Windows probe(validation, s, 7);
    probe.draw();
    const bool same = reloaded.predict(probe.x()).bitwise_equal(model.predict(probe.x()));
    std::printf("\nsaved to %s and reloaded: predictions %s\n", path.c_str(), same ? "identical" : "DIFFER");

    const kiln::CharacterTokenizer saved = kiln::CharacterTokenizer::of(reloaded);
    kiln::GenerateOptions options;
    options.sampler = "top_k";
    options.k = 200;  // nanoGPT's sample.py: every character, at temperature 0.8
    options.temperature = 0.8;
    options.max_new_tokens = s.sample_length;
    options.seed = 42;
    const std::string prompt = "ROMEO:";
    const auto started = std::chrono::steady_clock::now();
    const std::string sample = saved.decode(kiln::generate(reloaded, saved.encode(prompt), options));
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::printf("\n%lld characters in %.2f s:\n%s\n", static_cast<long long>(s.sample_length), seconds,
                sample.c_str());
    // The full run must beat the bigram counts; the quick one, after a few dozen steps, a uniform guess.
    const bool learned = gpt_loss < (quick ? std::log(static_cast<double>(vocabulary)) : bigram);
    return same && learned && sample.size() >= prompt.size() + static_cast<std::size_t>(s.sample_length) ? 0 : 1;
  } catch (const kiln::Error& error) {
    std::fprintf(stderr, "char_transformer: %s\n", error.what());
    return 1;
  }
}
