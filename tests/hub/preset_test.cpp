// keras-hub preset folders (kiln/hub/preset): kiln writes the layout keras-hub's save_to_preset writes and reads it
// back (backbone, CausalLM task, byte-level BPE tokenizer and preprocessor), and generates text from it.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <kiln/core/detail/files.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/warnings.hpp>
#include <kiln/hub/preset.hpp>
#include <kiln/kiln.hpp>
#include <kiln/serialize/detail/container.hpp>
#include <kiln/serialize/detail/zip_archive.hpp>
#include <kiln/serialize/json.hpp>
#include "support/temp_dir.hpp"

namespace fs = std::filesystem;
using kiln::Array;
using kiln::Config;
using kiln::Shape;

namespace {

std::string fixtures(const std::string& path) {
  return (fs::path(__FILE__).parent_path().parent_path().parent_path() / "data" / "keras" / path).string();
}

// A byte-level tokenizer: the 256 byte characters, a few merges, and GPT-2's special token.
kiln::hub::BytePairTokenizer small_tokenizer() {
  std::vector<std::pair<std::string, std::int64_t>> vocabulary;
  for (std::size_t b = 0; b < 256; ++b) vocabulary.emplace_back(kiln::hub::byte_characters()[b], static_cast<std::int64_t>(b));
  const std::string space = kiln::hub::byte_characters()[' '];
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"t", "h"}, {"th", "e"}, {space, "the"}, {"e", "r"}, {space, "a"}, {"i", "n"}};
  std::int64_t next = 256;
  for (const auto& [a, b] : merges) vocabulary.emplace_back(a + b, next++);
  vocabulary.emplace_back("<|endoftext|>", next++);
  kiln::hub::BytePairOptions options;
  options.unsplittable_tokens = {"<|endoftext|>"};
  return kiln::hub::BytePairTokenizer(vocabulary, merges, options);
}

Config json_file(const std::string& path) { return kiln::parse_json(kiln::detail::read_whole_file(path)); }

}  // namespace

TEST_CASE("a GPT-2 preset is saved as keras-hub lays it out and loads back to the same model and text",
          "[hub][preset]") {
  const kiln::hub::BytePairTokenizer tokenizer = small_tokenizer();
  kiln::hub::Backbone backbone("GPT2Backbone", {{"vocabulary_size", tokenizer.vocabulary_size()},
                                               {"num_layers", 2},
                                               {"num_heads", 2},
                                               {"hidden_dim", 16},
                                               {"intermediate_dim", 32},
                                               {"max_sequence_length", 64}});
  backbone.initialize_weights(3);
  kiln::hub::Preset preset = kiln::hub::make_preset(backbone, kiln::hub::CausalLM(backbone),
                                                    std::make_shared<kiln::hub::BytePairTokenizer>(tokenizer));
  preset.sequence_length = 24;
  kiln::testing::TempDir dir;
  const std::string folder = dir.file("gpt2_tiny");
  kiln::hub::save_preset(preset, folder);
  for (const std::string file : {"config.json", "model.weights.h5", "metadata.json", "tokenizer.json", "task.json",
                                 "preprocessor.json", "assets/tokenizer/vocabulary.json", "assets/tokenizer/merges.txt"}) {
    INFO(file);
    CHECK(fs::exists(fs::path(folder) / file));
  }
  // keras-hub's files: the backbone without build or compile configs, the task with its preprocessor and tokenizer.
  const Config config = json_file(folder + "/config.json");
  CHECK(config.get_string("registered_name") == "keras_hub>GPT2Backbone");
  CHECK_FALSE(config.contains("build_config"));
  CHECK(json_file(folder + "/metadata.json").at("parameter_count").as_int() == backbone.count_params());
  const Config task = json_file(folder + "/task.json");
  CHECK(task.get_string("class_name") == "GPT2CausalLM");
  CHECK(task.at("config").at("preprocessor").get_string("class_name") == "GPT2CausalLMPreprocessor");
  CHECK(task.at("config").at("preprocessor").at("config").at("tokenizer").get_string("class_name") == "GPT2Tokenizer");

  const kiln::hub::Preset loaded = kiln::hub::load_preset(folder);
  REQUIRE(loaded.causal_lm.has_value());
  REQUIRE(loaded.tokenizer != nullptr);
  CHECK(loaded.sequence_length == 24);
  CHECK(loaded.end_token_id == std::optional<std::int64_t>(262));
  Array ids(Shape{1, 6}), mask = Array::full(Shape{1, 6}, 1.0);
  for (std::size_t i = 0; i < 6; ++i) ids.set_flat(i, static_cast<double>(40 * i + 7));
  CHECK(loaded.backbone.predict({mask, ids})[0].bitwise_equal(backbone.predict({mask, ids})[0]));
  CHECK(loaded.tokenizer->tokenize("the other") == tokenizer.tokenize("the other"));
  const std::string text = preset.generate("the rain in");
  CHECK(text.rfind("the rain in", 0) == 0);  // the prompt, then what the model drew
  CHECK(text.size() > std::string("the rain in").size());
  CHECK(loaded.generate("the rain in") == text);
  // Saved again, the folder reads back the same.
  kiln::hub::save_preset(loaded, dir.file("again"));
  CHECK(kiln::hub::load_preset(dir.file("again")).generate("the rain in") == text);
}

TEST_CASE("a preset's config.json is the backbone as keras-hub serializes it", "[hub][preset][keras]") {
  kiln::testing::TempDir dir;
  for (const std::string name : {"gpt2", "llama", "gemma", "bert"}) {
    INFO(name);
    const std::string path = fixtures("hub/" + name + ".keras");
    kiln::hub::Backbone backbone = kiln::hub::Backbone::of(kiln::load_keras_model(path));
    kiln::hub::save_preset(kiln::hub::make_preset(backbone), dir.file(name));
    const std::string bytes = kiln::detail::read_whole_file(path);
    const kiln::detail::ZipReader archive(bytes, path);
    Config keras = kiln::parse_json(archive.read("config.json", 1 << 20));
    keras.erase("build_config");
    keras.erase("compile_config");
    CHECK(json_file(dir.file(name) + "/config.json") == keras);
    const kiln::hub::Preset loaded = kiln::hub::load_preset(dir.file(name));
    CHECK_FALSE(loaded.causal_lm.has_value());
    const std::vector<kiln::Array> a = loaded.backbone.get_weights(), b = backbone.get_weights();
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i].bitwise_equal(b[i]));
  }
}

TEST_CASE("presets keras-hub saved load, predict keras-hub's outputs and generate its tokens", "[hub][preset][keras]") {
  const kiln::hub::Preset gpt2 = kiln::hub::load_preset(fixtures("hub_presets/gpt2_causal_lm"));
  REQUIRE(gpt2.causal_lm.has_value());
  CHECK(gpt2.tokenizer == nullptr);  // saved without a preprocessor
  const kiln::hub::Preset llama = kiln::hub::load_preset(fixtures("hub_presets/llama_backbone"));
  CHECK_FALSE(llama.causal_lm.has_value());
  for (const auto& [preset, name] : {std::pair<const kiln::hub::Preset*, std::string>{&gpt2, "gpt2"}, {&llama, "llama"}}) {
    INFO(name);
    kiln::Model original = kiln::load_keras_model(fixtures("hub/" + name + ".keras"));
    const std::vector<kiln::Array> a = preset->backbone.get_weights(), b = original.get_weights();
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i].bitwise_equal(b[i]));
  }
  // keras-hub's greedy tokens for this backbone (data/keras/hub_generations.json): the first prompt's row.
  CHECK(gpt2.causal_lm->generate({44, 57, 53, 31, 57}, 12) ==
        std::vector<std::int64_t>{44, 57, 53, 31, 57, 27, 27, 27, 27, 27, 27, 27});
}

TEST_CASE("a tied Llama preset whose config.json leaves tie_word_embeddings out (as keras-hub writes it) loads tied",
          "[hub][preset][keras]") {
  kiln::testing::TempDir dir;
  kiln::hub::Backbone tied = kiln::hub::Backbone::of(kiln::load_keras_model(fixtures("hub_variants/llama3_scaled.keras")));
  const std::string folder = dir.file("llama3");
  kiln::hub::save_preset(kiln::hub::make_preset(tied), folder);
  Config config = json_file(folder + "/config.json");
  CHECK(config.at("config").at("tie_word_embeddings").as_bool());  // kiln writes it
  config.set("config", [&] {
    Config arguments = config.at("config");
    arguments.erase("tie_word_embeddings");
    return arguments;
  }());
  std::ofstream(folder + "/config.json") << kiln::to_json(config, 4);
  const kiln::hub::Preset loaded = kiln::hub::load_preset(folder);
  CHECK(loaded.backbone->token_embedding()->weights().size() == 1);
  CHECK(loaded.backbone.count_params() == tied.count_params());
}

TEST_CASE("bad preset folders are refused naming the file", "[hub][preset]") {
  kiln::testing::TempDir dir;
  CHECK_THROWS_AS(kiln::hub::load_preset(dir.file("missing")), kiln::SerializationError);
  fs::create_directories(dir.file("empty"));
  CHECK_THROWS_WITH(kiln::hub::load_preset(dir.file("empty")), Catch::Contains("config.json"));
  kiln::hub::Backbone backbone = kiln::hub::Backbone::of(kiln::load_keras_model(fixtures("hub/gpt2.keras")));
  const std::string folder = dir.file("preset");
  kiln::hub::save_preset(kiln::hub::make_preset(backbone, kiln::hub::CausalLM(backbone), std::make_shared<kiln::hub::BytePairTokenizer>(small_tokenizer())), folder);
  // The fixture's vocabulary (61) is smaller than the tokenizer's, which generate would show; loading is fine.
  CHECK_NOTHROW(kiln::hub::load_preset(folder));
  std::ofstream(folder + "/assets/tokenizer/vocabulary.json") << "{\"a\": 1,";
  CHECK_THROWS_WITH(kiln::hub::load_preset(folder), Catch::Contains("vocabulary.json") && Catch::Contains("byte"));
  std::ofstream(folder + "/config.json") << "{\"class_name\": ";
  CHECK_THROWS_WITH(kiln::hub::load_preset(folder), Catch::Contains("config.json"));
  fs::remove(folder + "/model.weights.h5");
  CHECK_THROWS_WITH(kiln::hub::load_preset(folder), Catch::Contains("model.weights.h5"));
}

TEST_CASE("a TextClassifier preset with a WordPiece tokenizer saves as keras-hub does and loads back",
          "[hub][preset][text_classifier]") {
  kiln::testing::TempDir dir;
  std::vector<std::string> vocabulary = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "rain", "in", "spain",
                                         "##s", "!", "."};
  for (char c = 'a'; c <= 'z'; ++c) vocabulary.push_back(std::string(1, c));
  kiln::hub::WordPieceOptions options;
  options.lowercase = true;
  const auto tokenizer = std::make_shared<kiln::hub::WordPieceTokenizer>(vocabulary, options);
  kiln::hub::Backbone bert("BertBackbone", {{"vocabulary_size", static_cast<std::int64_t>(vocabulary.size())},
                                            {"num_layers", 1},
                                            {"num_heads", 2},
                                            {"hidden_dim", 8},
                                            {"intermediate_dim", 16},
                                            {"max_sequence_length", 16}});
  kiln::hub::TextClassifier classifier(bert, 3);
  classifier->initialize_weights(7);
  kiln::hub::save_preset(kiln::hub::make_preset(classifier, tokenizer), dir.file("bert"));
  for (const char* file : {"config.json", "model.weights.h5", "task.json", "task.weights.h5", "tokenizer.json",
                           "metadata.json", "assets/tokenizer/vocabulary.txt"})
    CHECK(fs::exists(dir.file("bert") + "/" + file));
  const Config tokenizer_json = json_file(dir.file("bert") + "/tokenizer.json");
  CHECK(tokenizer_json.get_string("class_name") == "BertTokenizer");
  CHECK(tokenizer_json.at("config").get_bool("lowercase"));
  CHECK(json_file(dir.file("bert") + "/metadata.json").at("tasks") ==
        Config(std::vector<Config>{Config("MaskedLM"), Config("TextClassifier"), Config("TextEmbedder")}));

  const kiln::hub::Preset loaded = kiln::hub::load_preset(dir.file("bert"));
  REQUIRE(loaded.text_classifier.has_value());
  REQUIRE(loaded.tokenizer != nullptr);
  CHECK(loaded.tokenizer->tokenize("The rains in Spain!") == tokenizer->tokenize("The rains in Spain!"));
  CHECK(*loaded.start_token_id == 2);
  CHECK(*loaded.end_token_id == 3);
  const kiln::hub::PackedText packed = kiln::hub::pack_text(*loaded.tokenizer, {"the rain", "in spain."}, 8);
  const Array ours = classifier.predict(packed.inputs()).at(0), theirs = loaded.text_classifier->predict(packed.inputs()).at(0);
  CHECK(ours.bitwise_equal(theirs));
}

TEST_CASE("keras-hub's TextClassifier preset loads with its head from task.weights.h5", "[hub][preset][text_classifier]") {
  const kiln::hub::Preset preset = kiln::hub::load_preset(fixtures("hub_presets/bert_text_classifier"));
  REQUIRE(preset.text_classifier.has_value());
  kiln::Model original = kiln::load_keras_model(fixtures("hub_tasks/bert_text_classifier.keras"));
  const std::vector<Array> a = preset.text_classifier->get_weights(), b = original.get_weights();
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i].bitwise_equal(b[i]));
}

TEST_CASE("a Llama preset with a SentencePiece tokenizer generates text and loads back", "[hub][preset]") {
  kiln::testing::TempDir dir;
  // A SentencePiece model trained here on tinyshakespeare's first lines, as keras-hub's
  // compute_sentence_piece_proto trains one (Llama's <s> and </s> are its bos and eos pieces).
  std::istringstream text(kiln::detail::read_whole_file(
      (fs::path(__FILE__).parent_path().parent_path().parent_path() / "data" / "tinyshakespeare.txt").string()));
  std::vector<std::string> lines;
  for (std::string line; std::getline(text, line) && lines.size() < 2000;)
    if (!line.empty()) lines.push_back(line);
  const std::string proto = kiln::hub::compute_sentence_piece_proto(
      lines, 600, "bpe", false, {{"byte_fallback", "true"}, {"bos_piece", "<s>"}, {"eos_piece", "</s>"}});
  const auto tokenizer = std::make_shared<kiln::hub::SentencePieceTokenizer>(proto);
  CHECK(tokenizer->vocabulary_size() == 600);
  CHECK(tokenizer->id_to_token(2) == "<s>");
  CHECK(tokenizer->detokenize(tokenizer->tokenize("First Citizen: speak, speak.")) == "First Citizen: speak, speak.");
  kiln::hub::Backbone llama("LlamaBackbone", {{"vocabulary_size", tokenizer->vocabulary_size()},
                                              {"num_layers", 1},
                                              {"num_query_heads", 2},
                                              {"num_key_value_heads", 1},
                                              {"hidden_dim", 8},
                                              {"intermediate_dim", 16}});
  llama.initialize_weights(3);
  kiln::hub::Preset preset = kiln::hub::make_preset(llama, kiln::hub::CausalLM(llama), tokenizer);
  CHECK(preset.tokenizer_config.get_string("class_name") == "LlamaTokenizer");
  preset.sequence_length = 16;
  const std::string generated = preset.generate("First Citizen", 12);
  CHECK(generated.rfind("First Citizen", 0) == 0);
  kiln::hub::save_preset(preset, dir.file("llama"));
  CHECK(kiln::detail::read_whole_file(dir.file("llama") + "/assets/tokenizer/vocabulary.spm") == proto);
  const kiln::hub::Preset loaded = kiln::hub::load_preset(dir.file("llama"));
  REQUIRE(loaded.tokenizer != nullptr);
  CHECK(loaded.generate("First Citizen", 12) == generated);
  // A tokenizer class of another kind is refused.
  CHECK_THROWS_WITH(kiln::hub::make_preset(llama, std::nullopt, tokenizer, "BertTokenizer"),
                    Catch::Contains("BertTokenizer") && Catch::Contains("SentencePieceTokenizer"));
  CHECK_THROWS_AS(kiln::hub::compute_sentence_piece_proto(lines, 300, "wordpiece"), kiln::ValueError);
  CHECK_THROWS_AS(kiln::hub::compute_sentence_piece_proto({}, 300), kiln::ValueError);
  CHECK_THROWS_WITH(kiln::hub::compute_sentence_piece_proto({"a b c"}, 5000), Catch::Contains("compute_sentence_piece_proto"));
}

TEST_CASE("a preset with sharded weights (model.weights.json) loads as the whole file does", "[hub][preset][keras]") {
  const kiln::hub::Preset sharded = kiln::hub::load_preset(fixtures("hub_presets/llama_sharded"));
  const kiln::hub::Preset whole = kiln::hub::load_preset(fixtures("hub_presets/llama_backbone"));
  const std::vector<Array> a = sharded.backbone.get_weights(), b = whole.backbone.get_weights();
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i].bitwise_equal(b[i]));
  // load_keras_weights reads the index as Keras's load_weights does.
  kiln::hub::Backbone copy = kiln::hub::Backbone::of(kiln::load_keras_model(fixtures("hub/llama.keras")));
  std::vector<Array> zeros;
  for (const Array& weight : copy.get_weights()) zeros.push_back(Array::full(weight.shape(), 0.0, weight.dtype()));
  copy.set_weights(zeros);
  kiln::load_keras_weights(*copy.ptr(), fixtures("hub_presets/llama_sharded/model.weights.json"));
  const std::vector<Array> c = copy.get_weights();
  for (std::size_t i = 0; i < c.size(); ++i) CHECK(c[i].bitwise_equal(b[i]));

  // A shard missing, or an index naming a file outside its folder, is refused by name.
  kiln::testing::TempDir dir;
  const std::string folder = dir.file("broken");
  fs::copy(fixtures("hub_presets/llama_sharded"), folder);
  fs::remove(folder + "/model_00001.weights.h5");
  CHECK_THROWS_WITH(kiln::hub::load_preset(folder), Catch::Contains("model_00001.weights.h5"));
  std::ofstream(folder + "/model.weights.json") << R"({"weight_map": {"/layers/x/vars": "../../etc/passwd.weights.h5"}})";
  CHECK_THROWS_WITH(kiln::hub::load_preset(folder), Catch::Contains("beside the index"));
  std::ofstream(folder + "/model.weights.json") << R"({"metadata": {}})";
  CHECK_THROWS_WITH(kiln::hub::load_preset(folder), Catch::Contains("weight_map"));
}

TEST_CASE("save_preset shards a backbone over max_shard_size as keras-hub does", "[hub][preset][keras]") {
  // keras-hub wrote llama_sharded with save_to_preset(max_shard_size=0.00002): kiln, given the same model and
  // size, writes the same shards and the same weight map (its groups, and which shard holds each).
  const kiln::hub::Preset keras = kiln::hub::load_preset(fixtures("hub_presets/llama_sharded"));
  kiln::testing::TempDir dir;
  const std::string folder = dir.file("sharded");
  kiln::hub::save_preset(keras, folder, 0.00002);
  CHECK_FALSE(fs::exists(folder + "/model.weights.h5"));
  const Config written = kiln::parse_json(kiln::testing::read_bytes(folder + "/model.weights.json"));
  const Config expected = kiln::parse_json(kiln::testing::read_bytes(fixtures("hub_presets/llama_sharded/model.weights.json")));
  INFO(kiln::to_json(written.at("weight_map"), 1));
  CHECK(written.at("weight_map") == expected.at("weight_map"));
  CHECK(written.at("metadata").at("total_size").as_double() == expected.at("metadata").at("total_size").as_double());
  CHECK(fs::exists(folder + "/model_00000.weights.h5"));
  CHECK(fs::exists(folder + "/model_00001.weights.h5"));
  CHECK_FALSE(fs::exists(folder + "/model_00002.weights.h5"));
  const kiln::hub::Preset back = kiln::hub::load_preset(folder);
  const std::vector<Array> a = back.backbone.get_weights(), b = keras.backbone.get_weights();
  REQUIRE(a.size() == b.size());
  for (std::size_t i = 0; i < a.size(); ++i) CHECK(a[i].bitwise_equal(b[i]));

  // Saved again whole (the default, 10 GB), the index stays but model.weights.h5 is what keras-hub and kiln read.
  kiln::hub::save_preset(keras, folder);
  CHECK(fs::exists(folder + "/model.weights.h5"));
  const std::vector<Array> c = kiln::hub::load_preset(folder).backbone.get_weights();
  for (std::size_t i = 0; i < c.size(); ++i) CHECK(c[i].bitwise_equal(b[i]));
  // Sharded again, the whole file that would hide the shards from keras-hub is removed.
  kiln::hub::save_preset(keras, folder, 0.00002);
  CHECK_FALSE(fs::exists(folder + "/model.weights.h5"));
  CHECK_THROWS_AS(kiln::hub::save_preset(keras, folder, 0.0), kiln::ValueError);
  // A weight no shard of the size can hold is refused before anything in the folder changes.
  const std::string config = kiln::testing::read_bytes(folder + "/config.json");
  const std::string index = kiln::testing::read_bytes(folder + "/model.weights.json");
  CHECK_THROWS_WITH(kiln::hub::save_preset(keras, folder, 2.0 / (1 << 20)), Catch::Contains("increase max_shard_size"));
  CHECK(kiln::testing::read_bytes(folder + "/config.json") == config);
  CHECK(kiln::testing::read_bytes(folder + "/model.weights.json") == index);
}

TEST_CASE("save_keras_weights_sharded writes Keras's ShardedH5IOStore layout", "[keras][saving]") {
  kiln::hub::Backbone llama = kiln::hub::Backbone::of(kiln::load_keras_model(fixtures("hub/llama.keras")));
  const kiln::ModelBase& model = *llama.ptr();
  const std::vector<Array> weights = llama.get_weights();
  kiln::testing::TempDir dir;

  SECTION("one shard when everything fits; every weight read back through the index") {
    kiln::save_keras_weights_sharded(model, dir.file("model.weights.json"), 1.0);
    CHECK(fs::exists(dir.file("model_00000.weights.h5")));
    CHECK_FALSE(fs::exists(dir.file("model_00001.weights.h5")));
    const Config index = kiln::parse_json(kiln::testing::read_bytes(dir.file("model.weights.json")));
    for (const auto& [group, shards] : index.at("weight_map").items()) {
      CHECK(group.rfind("/layers/", 0) == 0);
      CHECK(shards.to_string().find("model_00000.weights.h5") != std::string::npos);
    }
    kiln::hub::Backbone copy = kiln::hub::Backbone::of(kiln::load_keras_model(fixtures("hub/llama.keras")));
    std::vector<Array> zeros;
    for (const Array& weight : weights) zeros.push_back(Array::full(weight.shape(), 0.0, weight.dtype()));
    copy.set_weights(zeros);
    kiln::load_keras_weights(*copy.ptr(), dir.file("model.weights.json"));
    const std::vector<Array> back = copy.get_weights();
    for (std::size_t i = 0; i < back.size(); ++i) CHECK(back[i].bitwise_equal(weights[i]));
  }
  SECTION("a path not ending in .json is renamed, with Keras's warning") {
    std::vector<std::string> warnings;
    const kiln::WarningHandler previous =
        kiln::set_warning_handler([&](const std::string& message) { warnings.push_back(message); });
    kiln::save_keras_weights_sharded(model, dir.file("w.weights.h5"), 0.00002);
    kiln::set_warning_handler(previous);
    REQUIRE(warnings.size() == 1);
    CHECK_THAT(warnings[0], Catch::Contains("*.json"));
    CHECK(fs::exists(dir.file("w.weights.json")));
    CHECK(fs::exists(dir.file("w_00001.weights.h5")));
    CHECK_FALSE(fs::exists(dir.file("w.weights.h5")));
    // The index names the shards written beside it, and nothing else.
    std::set<std::string> named;
    const Config index = kiln::parse_json(kiln::testing::read_bytes(dir.file("w.weights.json")));
    for (const auto& [group, shards] : index.at("weight_map").items()) {
      if (shards.is_list())
        for (const Config& shard : shards.as_list()) named.insert(shard.as_string());
      else
        named.insert(shards.as_string());
    }
    CHECK(named == std::set<std::string>{"w_00000.weights.h5", "w_00001.weights.h5"});
    CHECK_FALSE(fs::exists(dir.file("w_00002.weights.h5")));
  }
  SECTION("a weight larger than a shard is refused by name, and nothing is left in the folder") {
    // The embedding (vocabulary x hidden, float32) is the largest weight; 2 KB cannot hold it.
    CHECK_THROWS_AS(kiln::save_keras_weights_sharded(model, dir.file("model.weights.json"), 2.0 / (1 << 20)),
                    kiln::ValueError);
    CHECK_THROWS_WITH(kiln::save_keras_weights_sharded(model, dir.file("model.weights.json"), 2.0 / (1 << 20)),
                      Catch::Contains("exceeds the maximum shard size 2.00 KB"));
    CHECK(fs::is_empty(dir.path()));
    CHECK_THROWS_AS(kiln::save_keras_weights_sharded(model, dir.file("model.weights.json"), 0.0), kiln::ValueError);
  }
  SECTION("a save that fails over an earlier one leaves no index, never the earlier index over new shards") {
    kiln::save_keras_weights_sharded(model, dir.file("model.weights.json"), 0.00002);
    kiln::detail::fail_next_write_after_for_testing(10);  // the index is the one file written through kiln's writer
    CHECK_THROWS_AS(kiln::save_keras_weights_sharded(model, dir.file("model.weights.json"), 0.00002),
                    kiln::SerializationError);
    kiln::detail::fail_next_write_after_for_testing(-1);
    CHECK_FALSE(fs::exists(dir.file("model.weights.json")));
    kiln::hub::Backbone copy = kiln::hub::Backbone::of(kiln::load_keras_model(fixtures("hub/llama.keras")));
    CHECK_THROWS_AS(kiln::load_keras_weights(*copy.ptr(), dir.file("model.weights.json")), kiln::SerializationError);
    // Saved again whole, and then with larger shards: the earlier save's extra shards go.
    kiln::save_keras_weights_sharded(model, dir.file("model.weights.json"), 0.00002);
    CHECK(fs::exists(dir.file("model_00001.weights.h5")));
    kiln::save_keras_weights_sharded(model, dir.file("model.weights.json"), 1.0);
    CHECK(fs::exists(dir.file("model_00000.weights.h5")));
    CHECK_FALSE(fs::exists(dir.file("model_00001.weights.h5")));
    kiln::load_keras_weights(*copy.ptr(), dir.file("model.weights.json"));
    const std::vector<Array> back = copy.get_weights();
    for (std::size_t i = 0; i < back.size(); ++i) CHECK(back[i].bitwise_equal(weights[i]));
  }
}
