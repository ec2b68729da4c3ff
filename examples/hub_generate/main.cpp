// keras-hub in C++: a GPT-2 preset folder with GPT-2's real byte-level BPE tokenizer, loaded with one call, asked
// to continue a prompt with each of keras-hub's samplers, fine-tuned as a CausalLM on tinyshakespeare, saved back.
//
//   hub_generate [--quick] VOCABULARY.json MERGES.txt PRESET_DIR [text file]
//
// When PRESET_DIR holds no preset yet, it is made first: a small GPT2Backbone with random weights (GPT-2's
// vocabulary of 50,257 tokens, narrower and shallower than GPT-2 small) and GPT-2's tokenizer from the two files
// (keras-hub's assets/tokenizer/vocabulary.json and merges.txt; the tests make them from OpenAI's ranks). Then,
// as a user with a preset from keras-hub would: load_preset, the summary, generate with greedy, top_k, top_p
// and random, a few hundred steps of fit on next-token windows of the text, generate again, save_preset.
// --quick runs a tiny version in seconds (the test suite runs it).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include <kiln/core/detail/files.hpp>
#include <kiln/kiln.hpp>

namespace {

struct Settings {
  std::int64_t hidden = 128, layers = 2, heads = 4, context = 64;
  std::int64_t windows = 2048, epochs = 2, batch = 16;
  std::int64_t new_tokens = 32;
};

Settings quick_settings() {
  Settings s;
  s.hidden = 32, s.layers = 1, s.heads = 2, s.context = 32, s.windows = 64, s.epochs = 2, s.batch = 8, s.new_tokens = 8;
  return s;
}

std::string shown(const std::string& text) {
  std::string out;
  for (const char c : text) out += c == '\n' ? std::string("\\n") : std::string(1, c);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::vector<std::string> args(argv + 1, argv + argc);
    const bool quick = !args.empty() && args[0] == "--quick";
    if (quick) args.erase(args.begin());
    if (args.size() < 3) {
      std::cerr << "usage: hub_generate [--quick] VOCABULARY.json MERGES.txt PRESET_DIR [text file]\n";
      return 2;
    }
    const Settings s = quick ? quick_settings() : Settings();
    const std::string folder = args[2];
    const std::string text_file = args.size() > 3 ? args[3] : std::string(KILN_DATA_DIR) + "/tinyshakespeare.txt";

    if (!std::filesystem::exists(std::filesystem::path(folder) / "config.json")) {
      kiln::hub::BytePairOptions options;
      options.unsplittable_tokens = {"<|endoftext|>"};
      const auto tokenizer = kiln::hub::BytePairTokenizer::from_files(args[0], args[1], options);
      kiln::hub::Backbone gpt2("GPT2Backbone", {{"vocabulary_size", tokenizer.vocabulary_size()},
                                                {"num_layers", s.layers},
                                                {"num_heads", s.heads},
                                                {"hidden_dim", s.hidden},
                                                {"intermediate_dim", 4 * s.hidden},
                                                {"max_sequence_length", s.context},
                                                {"dropout", 0.0}});
      gpt2.initialize_weights(1);
      kiln::hub::Preset made = kiln::hub::make_preset(gpt2, kiln::hub::CausalLM(gpt2),
                                                      std::make_shared<kiln::hub::BytePairTokenizer>(tokenizer));
      made.sequence_length = s.context;
      kiln::hub::save_preset(made, folder);
      std::cout << "made a preset of a random GPT-2 (" << gpt2.count_params() << " parameters) with GPT-2's tokenizer in "
                << folder << "\n";
    }

    // What a user with a keras-hub preset does: one call.
    kiln::hub::Preset preset = kiln::hub::load_preset(folder);
    if (!preset.causal_lm || !preset.tokenizer) throw kiln::ValueError(folder + ": not a CausalLM preset with a tokenizer");
    kiln::hub::CausalLM& lm = *preset.causal_lm;
    lm.summary();
    const std::string prompt = "ROMEO:";
    const std::int64_t length = static_cast<std::int64_t>(preset.tokenizer->tokenize(prompt).size()) + 1 + s.new_tokens;
    auto samples = [&](const char* when) {
      for (const std::string sampler : {"greedy", "top_k", "top_p", "random"}) {
        kiln::GenerateOptions options;
        options.sampler = sampler;
        options.k = 10;
        options.p = 0.9;
        options.seed = 42;
        std::cout << when << " " << sampler << ": " << shown(preset.generate(prompt, length, options)) << "\n";
      }
    };
    samples("before");

    // Fine-tuning: windows of the tokenized text, each predicting its next tokens.
    const std::string text = kiln::detail::read_whole_file(text_file);
    const std::vector<std::int64_t> ids =
        preset.tokenizer->tokenize(quick ? text.substr(0, 20000) : text.substr(0, 400000));
    const std::int64_t windows = std::min<std::int64_t>(s.windows, static_cast<std::int64_t>(ids.size()) / s.context - 1);
    kiln::Array x(kiln::Shape{windows, s.context}), y(kiln::Shape{windows, s.context});
    const kiln::Array mask = kiln::Array::full(kiln::Shape{windows, s.context}, 1.0);
    const std::int64_t stride = (static_cast<std::int64_t>(ids.size()) - s.context - 1) / windows;
    for (std::int64_t w = 0; w < windows; ++w)
      for (std::int64_t t = 0; t < s.context; ++t) {
        const auto at = static_cast<std::size_t>(w * stride + t);
        x.set_flat(static_cast<std::size_t>(w * s.context + t), static_cast<double>(ids[at]));
        y.set_flat(static_cast<std::size_t>(w * s.context + t), static_cast<double>(ids[at + 1]));
      }
    lm.compile(kiln::create_optimizer("adamw", {{"learning_rate", 1e-3}}),
               kiln::Loss::from_config(kiln::Config{{"class_name", "SparseCategoricalCrossentropy"},
                                                    {"config", kiln::Config{{"from_logits", true}}}}));
    const double before = lm.evaluate({mask, x}, {y}).at("loss");
    lm.fit({mask, x}, {y}, kiln::FitOptions().epochs(static_cast<int>(s.epochs)).batch_size(s.batch).verbose(quick ? 0 : 1));
    const double after = lm.evaluate({mask, x}, {y}).at("loss");
    std::printf("fine-tuning on %lld windows of %lld tokens: loss %.3f -> %.3f (uniform: %.3f)\n",
                static_cast<long long>(windows), static_cast<long long>(s.context), before, after,
                std::log(static_cast<double>(preset.tokenizer->vocabulary_size())));
    samples("after");
    kiln::hub::save_preset(preset, folder);
    std::cout << "saved the fine-tuned preset to " << folder << "\n";
    return after < before ? 0 : 1;
  } catch (const std::exception& error) {
    std::cerr << "hub_generate: " << error.what() << "\n";
    return 1;
  }
}
