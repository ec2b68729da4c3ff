// keras-hub's MaskedLM tasks (BertMaskedLM, DistilBertMaskedLM, RobertaMaskedLM) and their MaskedLMHead: keras-hub's
// files, the head through the layer harness, keras-hub's masking of token rows, fine-tuning with fit, presets.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <kiln/core/detail/files.hpp>
#include <kiln/core/error.hpp>
#include <kiln/hub/layers/masked_lm_head.hpp>
#include <kiln/hub/masked_lm.hpp>
#include <kiln/hub/preset.hpp>
#include <kiln/hub/tokenizers/word_piece_tokenizer.hpp>
#include <kiln/kiln.hpp>
#include <kiln/serialize/json.hpp>
#include "support/layer_check.hpp"
#include "support/hub_fixtures.hpp"
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
using kiln::Array;
using kiln::Config;
using kiln::DType;
using kiln::Model;
using kiln::Shape;
using kiln::testing::archive_config;
using kiln::testing::error_against_stored;
using kiln::testing::LayerCase;
using kiln::testing::LayerSpec;
using kiln::testing::random_input;
constexpr std::int64_t None = Shape::unknown;

namespace {

fs::path source_dir() { return fs::path(__FILE__).parent_path().parent_path().parent_path(); }
std::string data_file(const std::string& name) { return (source_dir() / "data" / "keras" / name).string(); }

// The head's two inputs: sequences (2, 5, 4) and positions (2, 3), repeats and a negative one (-1: the last).
LayerCase head_case() {
  LayerCase c({random_input({2, 5, 4}, 31),
               Array::from_vector(std::vector<double>{0, 4, 4, 2, -1, 1}, {2, 3})});
  return c;
}

LayerSpec head_spec(const Config& config) {
  LayerSpec spec;
  spec.make = [config] { return kiln::create_layer("keras_hub>MaskedLMHead", config); };
  spec.call = head_case();
  spec.output_shapes = {Shape{None, 3, 7}};
  spec.gradients.wrt_inputs = {0};
  spec.tolerance = 1e-5;
  spec.bad_inputs = {{"a sequence without steps", {{None, 4}, {None, 3}}, "takes (batch, steps, hidden)"},
                     {"positions of rank 3", {{None, 5, 4}, {None, 3, 1}}, "mask_positions"}};
  return spec;
}

LayerSpec untied_head_spec() {
  return head_spec({{"vocabulary_size", 7}, {"intermediate_activation", "gelu"}, {"activation", "softmax"}});
}

LayerSpec tied_head_spec() {
  const kiln::ReversibleEmbedding embedding(7, 4);
  return head_spec({{"token_embedding", kiln::serialize_layer(*embedding.ptr())}, {"layer_norm_epsilon", 1e-3}});
}

}  // namespace

KILN_LAYER_HARNESS("keras_hub>MaskedLMHead", untied_head_spec)

TEST_CASE("keras_hub>MaskedLMHead with its own token embedding: the layer harness", "[layers][harness][hub]") {
  kiln::testing::check_layer(tied_head_spec());
}

TEST_CASE("MaskedLMHead is keras-hub's formula: gather, gelu Dense, LayerNorm, reverse embedding, bias",
          "[hub][masked_lm]") {
  // The head's output against the primitive layers it is made of, applied by hand at the picked positions.
  const kiln::ReversibleEmbedding embedding(7, 4);
  embedding->initialize_weights(3);
  auto made = std::make_shared<kiln::hub::MaskedLMHeadLayer>(Config{{"intermediate_activation", "gelu"}}, embedding.ptr());
  kiln::hub::MaskedLMHeadLayer& head = *made;
  const LayerCase c = head_case();
  const Array y = kiln::testing::run_layer(head, c).at(0);
  REQUIRE(y.shape() == Shape{2, 3, 7});
  CHECK(head.vocabulary_size() == 7);
  CHECK(head.weights().size() == 5);  // the Dense's kernel and bias, the norm's gamma and beta, output_bias
  // Set output_bias to something visible.
  std::vector<Array> weights = head.get_weights();
  for (std::size_t i = 0; i < weights.size(); ++i)
    for (std::size_t j = 0; j < weights[i].size(); ++j) weights[i].set_flat(j, weights[i].flat(j) + 0.01 * (j % 5));
  head.set_weights(weights);
  const Array scored = kiln::testing::run_layer(head, c).at(0);
  const std::vector<kiln::Weight> named = head.weights();
  auto weight = [&](const std::string& suffix) {
    for (const kiln::Weight& w : named)
      if (w.path.size() >= suffix.size() && w.path.compare(w.path.size() - suffix.size(), suffix.size(), suffix) == 0)
        return w.value;
    FAIL("no weight " << suffix);
    return Array();
  };
  const Array kernel = weight("intermediate_dense/kernel"), bias = weight("intermediate_dense/bias");
  const Array gamma = weight("gamma"), beta = weight("beta"), out_bias = weight("output_bias");
  const Array table = embedding->get_weights().at(0);
  const Array& x = c.inputs[0];
  double worst = 0;
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t m = 0; m < 3; ++m) {
      auto p = static_cast<std::int64_t>(c.inputs[1].flat(static_cast<std::size_t>(b * 3 + m)));
      if (p < 0) p += 5;
      std::vector<double> h(4, 0.0);
      for (std::size_t o = 0; o < 4; ++o) {
        double s = bias.flat(o);
        for (std::size_t i = 0; i < 4; ++i)
          s += x.flat(static_cast<std::size_t>((b * 5 + p) * 4) + i) * kernel.flat(i * 4 + o);
        h[o] = 0.5 * s * (1.0 + std::erf(s / std::sqrt(2.0)));  // gelu, exact
      }
      double mean = 0, var = 0;
      for (double v : h) mean += v / 4;
      for (double v : h) var += (v - mean) * (v - mean) / 4;
      for (std::size_t o = 0; o < 4; ++o) h[o] = (h[o] - mean) / std::sqrt(var + 1e-5) * gamma.flat(o) + beta.flat(o);
      for (std::size_t v = 0; v < 7; ++v) {
        double s = out_bias.flat(v);
        for (std::size_t o = 0; o < 4; ++o) s += h[o] * table.flat(v * 4 + o);
        worst = std::max(worst, std::abs(s - scored.flat(static_cast<std::size_t>((b * 3 + m) * 7) + v)));
      }
    }
  CHECK(worst < 1e-5);
}

TEST_CASE("keras-hub's MaskedLM files load, predict keras-hub's scores and write back the same config",
          "[hub][masked_lm][keras]") {
  kiln::testing::TempDir dir;
  for (const std::string name : {"bert", "distil_bert", "roberta"}) {
    INFO(name);
    const std::string file = data_file("hub_tasks/" + name + "_masked_lm.keras");
    Model model = kiln::load_keras_model(file);
    const kiln::hub::MaskedLM mlm = kiln::hub::MaskedLM::of(model);
    // The head is tied: its weights are the Dense's, the norm's and output_bias; the embedding is the backbone's.
    const std::int64_t d = mlm.backbone()->arguments().at("hidden_dim").as_int();
    CHECK(model.count_params() == mlm.backbone().count_params() + d * d + d + 2 * d + 61);
    CHECK(error_against_stored(model, data_file("hub_tasks/" + name + "_masked_lm.io.h5")) < 1e-5);
    const std::string written = dir.file(name + ".keras");
    kiln::save_keras_model(model, written);
    const Config theirs = archive_config(file), ours = archive_config(written);
    CHECK(ours.at("config") == theirs.at("config"));
    for (const char* key : {"module", "class_name", "registered_name"}) CHECK(ours.at(key) == theirs.at(key));
    Model again = kiln::load_keras_model(written);
    CHECK(error_against_stored(again, data_file("hub_tasks/" + name + "_masked_lm.io.h5")) < 1e-5);
    // kiln's own format keeps the tying too.
    kiln::save_model(*model.ptr(), dir.file(name + ".kiln"));
    Model own = kiln::load_model(dir.file(name + ".kiln"));
    CHECK(own.count_params() == model.count_params());
    CHECK(error_against_stored(own, data_file("hub_tasks/" + name + "_masked_lm.io.h5")) < 1e-5);
  }
}

TEST_CASE("mask_tokens masks as keras-hub's MaskedLMMaskGenerator", "[hub][masked_lm]") {
  kiln::hub::PackedText packed{Array::full(Shape{200, 40}, 0.0, DType::float32), Array::full(Shape{200, 40}, 0.0, DType::float32),
                               Array::full(Shape{200, 40}, 0.0, DType::float32)};
  // Rows of 2 (start), tokens 5.., 3 (end), then padding 0; lengths vary.
  for (std::int64_t r = 0; r < 200; ++r) {
    const std::int64_t length = 10 + r % 31;
    for (std::int64_t i = 0; i < length; ++i) {
      const double id = i == 0 ? 2 : i == length - 1 ? 3 : static_cast<double>(5 + (r * 7 + i * 3) % 50);
      packed.token_ids.set_flat(static_cast<std::size_t>(r * 40 + i), id);
      packed.padding_mask.set_flat(static_cast<std::size_t>(r * 40 + i), 1.0);
    }
  }
  kiln::hub::MaskOptions options;
  options.mask_selection_rate = 0.3;
  options.mask_selection_length = 8;
  options.unselectable_token_ids = {2, 3};
  const kiln::hub::MaskedText masked = kiln::hub::mask_tokens(packed, 60, 4, options, 7);
  CHECK(masked.mask_positions.shape() == Shape{200, 8});
  CHECK(masked.inputs().size() == 4);
  std::int64_t picks = 0, selectable = 0, to_mask = 0, to_random = 0, kept = 0, capped = 0;
  for (std::int64_t r = 0; r < 200; ++r) {
    std::int64_t row_picks = 0, last = -1;
    for (std::int64_t m = 0; m < 8; ++m) {
      const auto at = static_cast<std::size_t>(r * 8 + m);
      if (masked.mask_weights.flat(at) == 0.0) {
        CHECK(masked.mask_positions.flat(at) == 0.0);
        CHECK(masked.mask_ids.flat(at) == 0.0);
        continue;
      }
      ++row_picks;
      const auto position = static_cast<std::int64_t>(masked.mask_positions.flat(at));
      CHECK(position > last);  // in order, no repeats
      last = position;
      const auto cell = static_cast<std::size_t>(r * 40 + position);
      const double original = packed.token_ids.flat(cell);
      CHECK(masked.mask_ids.flat(at) == original);
      CHECK(original != 2.0);  // never the special tokens nor padding
      CHECK(original != 3.0);
      CHECK(packed.padding_mask.flat(cell) == 1.0);
      const double now = masked.token_ids.flat(cell);
      if (now == 4.0)
        ++to_mask;
      else if (now == original)
        ++kept;
      else
        ++to_random;
    }
    picks += row_picks;
    selectable += 10 + r % 31 - 2;
    capped += row_picks == 8;
  }
  // Unpicked tokens are untouched.
  std::int64_t changed = 0;
  for (std::size_t i = 0; i < packed.token_ids.size(); ++i) changed += packed.token_ids.flat(i) != masked.token_ids.flat(i);
  CHECK(changed == to_mask + to_random);
  const double mask_share = static_cast<double>(to_mask) / static_cast<double>(picks);
  INFO(picks << " picks of " << selectable << ", " << capped << " rows capped; masked " << to_mask << ", random "
             << to_random << ", kept " << kept);
  CHECK(mask_share > 0.74);
  CHECK(mask_share < 0.86);
  CHECK(to_random > picks / 20);
  CHECK(kept > picks / 40);
  CHECK(capped > 20);  // long rows have more than 8 candidates at rate 0.3
  // The same seed masks the same way; another does not.
  CHECK(kiln::hub::mask_tokens(packed, 60, 4, options, 7).token_ids.bitwise_equal(masked.token_ids));
  CHECK_FALSE(kiln::hub::mask_tokens(packed, 60, 4, options, 8).token_ids.bitwise_equal(masked.token_ids));

  options.mask_token_rate = 0.95;
  CHECK_THROWS_WITH(kiln::hub::mask_tokens(packed, 60, 4, options, 7), Catch::Contains("at most 1"));
  options.mask_token_rate = 0.8;
  CHECK_THROWS_WITH(kiln::hub::mask_tokens(packed, 60, 60, options, 7), Catch::Contains("mask_token_id"));
  options.mask_selection_length = 0;
  CHECK_THROWS_AS(kiln::hub::mask_tokens(packed, 60, 4, options, 7), kiln::ValueError);
  options.mask_selection_length = 8;
  kiln::hub::PackedText bad = packed;
  bad.token_ids = packed.token_ids.copy();
  bad.token_ids.set_flat(41, 60.0);  // row 1, position 1: past the vocabulary
  CHECK_THROWS_WITH(kiln::hub::mask_tokens(bad, 60, 4, options, 7),
                    Catch::Contains("token 60") && Catch::Contains("row 1, position 1") && Catch::Contains("[0, 60)"));
}

TEST_CASE("a BERT MaskedLM learns to fill in masked words with fit", "[hub][masked_lm]") {
  std::istringstream lines(kiln::detail::read_whole_file((source_dir() / "data" / "tinyshakespeare.txt").string()));
  std::vector<std::string> texts;
  for (std::string line; std::getline(lines, line) && texts.size() < 600;)
    if (line.size() >= 20 && line.size() <= 60) texts.push_back(line);
  kiln::hub::WordPieceOptions options;
  options.lowercase = true;
  const kiln::hub::WordPieceTokenizer splitter({"[UNK]"}, options);
  std::map<std::string, int> counts;
  for (const std::string& text : texts)
    for (const std::string& word : splitter.pretokenize(text)) counts[word]++;
  std::vector<std::string> vocabulary = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  for (const auto& [word, count] : counts)
    if (count >= 4) vocabulary.push_back(word);
  const kiln::hub::WordPieceTokenizer tokenizer(vocabulary, options);

  kiln::hub::Backbone bert("BertBackbone", {{"vocabulary_size", static_cast<std::int64_t>(vocabulary.size())},
                                            {"num_layers", 2},
                                            {"num_heads", 2},
                                            {"hidden_dim", 32},
                                            {"intermediate_dim", 64},
                                            {"max_sequence_length", 20}});
  kiln::hub::MaskedLM mlm(bert);
  CHECK(mlm->class_name() == "BertMaskedLM");
  mlm->initialize_weights(9);
  kiln::hub::MaskOptions masking;
  masking.mask_selection_length = 4;
  const kiln::hub::MaskedText train = kiln::hub::mask_text(tokenizer, std::vector<std::string>(texts.begin(), texts.begin() + 500), 20, masking, 1);
  const kiln::hub::MaskedText held = kiln::hub::mask_text(tokenizer, std::vector<std::string>(texts.begin() + 500, texts.end()), 20, masking, 2);
  CHECK(train.token_ids.flat(0) == 2);  // [CLS]
  mlm.compile(kiln::create_optimizer("adam", Config{{"learning_rate", 0.002}}),
              kiln::Loss::from_config(Config{{"class_name", "SparseCategoricalCrossentropy"},
                                             {"config", Config{{"from_logits", true}}}}));
  auto held_loss = [&] {
    // The weighted mean over the picks: padding picks weigh 0.
    const Array scores = mlm.predict(held.inputs()).at(0);
    const std::int64_t vocab = scores.shape()[2];
    double total = 0, weight = 0;
    for (std::size_t pick = 0; pick < held.mask_ids.size(); ++pick) {
      if (held.mask_weights.flat(pick) == 0.0) continue;
      double top = -1e30;
      for (std::int64_t v = 0; v < vocab; ++v) top = std::max(top, scores.flat(pick * static_cast<std::size_t>(vocab) + static_cast<std::size_t>(v)));
      double sum = 0;
      for (std::int64_t v = 0; v < vocab; ++v) sum += std::exp(scores.flat(pick * static_cast<std::size_t>(vocab) + static_cast<std::size_t>(v)) - top);
      const auto target = static_cast<std::size_t>(held.mask_ids.flat(pick));
      total += top + std::log(sum) - scores.flat(pick * static_cast<std::size_t>(vocab) + target);
      weight += 1;
    }
    return total / weight;
  };
  const double before = held_loss();
  const kiln::History history = mlm.fit(train.inputs(), {train.mask_ids},
                                        kiln::FitOptions().epochs(8).batch_size(32).verbose(0).sample_weight(train.mask_weights));
  const double after = held_loss();
  const std::vector<double>& loss = history["loss"];
  INFO("held-out loss at the picks " << before << " -> " << after << "; training loss " << loss.front() << " -> "
                                     << loss.back() << " over " << vocabulary.size() << " tokens");
  // Measured: 5.49 (about log(vocabulary): uniform scores) -> 4.07 in 8 epochs, within 0.01 over initial weights
  // seeded 1..6; in so few steps a model this small learns mostly which words are frequent where.
  CHECK(before > std::log(static_cast<double>(vocabulary.size())) - 0.5);
  CHECK(after < before - 1.0);
  CHECK(loss.back() < loss.front());
}

TEST_CASE("keras-hub's MaskedLM preset loads with its head, and kiln's saves as keras-hub lays it out",
          "[hub][preset][masked_lm]") {
  const kiln::hub::Preset preset = kiln::hub::load_preset(data_file("hub_presets/bert_masked_lm"));
  REQUIRE(preset.masked_lm.has_value());
  CHECK_FALSE(preset.text_classifier.has_value());
  Model from_file = kiln::load_keras_model(data_file("hub_tasks/bert_masked_lm.keras"));
  Model from_preset(preset.masked_lm->ptr());
  CHECK(error_against_stored(from_preset, data_file("hub_tasks/bert_masked_lm.io.h5")) < 1e-5);
  const std::vector<Array> a = from_preset.get_weights(), b = from_file.get_weights();
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i].bitwise_equal(b[i]));

  kiln::testing::TempDir dir;
  kiln::hub::save_preset(kiln::hub::make_preset(*preset.masked_lm), dir.file("again"));
  for (const char* file : {"config.json", "model.weights.h5", "task.json", "task.weights.h5", "metadata.json"})
    CHECK(fs::exists(fs::path(dir.file("again")) / file));
  const Config theirs = kiln::parse_json(kiln::detail::read_whole_file(data_file("hub_presets/bert_masked_lm/task.json")));
  const Config ours = kiln::parse_json(kiln::detail::read_whole_file(dir.file("again/task.json")));
  CHECK(ours == theirs);
  const kiln::hub::Preset again = kiln::hub::load_preset(dir.file("again"));
  REQUIRE(again.masked_lm.has_value());
  Model reloaded(again.masked_lm->ptr());
  CHECK(error_against_stored(reloaded, data_file("hub_tasks/bert_masked_lm.io.h5")) < 1e-5);
}

TEST_CASE("MaskedLM and its head refuse what keras-hub refuses", "[hub][masked_lm]") {
  const Config decoder = {{"vocabulary_size", 20}, {"num_layers", 1}, {"num_query_heads", 2}, {"num_key_value_heads", 1},
                          {"hidden_dim", 8}, {"intermediate_dim", 16}};
  CHECK_THROWS_WITH(kiln::hub::MaskedLM(kiln::hub::Backbone("LlamaBackbone", decoder)),
                    Catch::Contains("LlamaBackbone") && Catch::Contains("MaskedLM"));
  CHECK_THROWS_WITH(kiln::create_layer("keras_hub>MaskedLMHead", Config::map()),
                    Catch::Contains("one of vocabulary_size and token_embedding"));
  const kiln::ReversibleEmbedding embedding(7, 4);
  CHECK_THROWS_WITH(kiln::create_layer("keras_hub>MaskedLMHead", {{"vocabulary_size", 8},
                                                                   {"token_embedding", kiln::serialize_layer(*embedding.ptr())}}),
                    Catch::Contains("must match the token embedding's input_dim (7)"));
  CHECK_THROWS_AS(kiln::create_layer("keras_hub>MaskedLMHead", {{"vocabulary_size", 8}, {"activation", "nope"}}),
                  kiln::ConfigError);
  CHECK_THROWS_WITH(kiln::hub::MaskedLMHeadLayer(Config{{"token_embedding", kiln::serialize_layer(*embedding.ptr())}},
                                                 embedding.ptr()),
                    Catch::Contains("cannot give another token_embedding"));
  // A mask position beyond the sequence: a ValueError naming it, at run time.
  auto head = kiln::create_layer("keras_hub>MaskedLMHead", {{"vocabulary_size", 7}});
  LayerCase c = head_case();
  c.inputs[1].set_flat(2, 5.0);
  CHECK_THROWS_WITH(kiln::testing::run_layer(*head, c), Catch::Contains("index 5") && Catch::Contains("out of range"));
}
