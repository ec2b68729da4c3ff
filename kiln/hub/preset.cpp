#include <kiln/hub/preset.hpp>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <map>

#include <kiln/core/error.hpp>
#include <kiln/core/names.hpp>
#include <kiln/core/warnings.hpp>
#include <kiln/hub/tokenizers/detail/text.hpp>
#include <kiln/serialize/detail/keras_export.hpp>
#include <kiln/serialize/detail/keras_hub_files.hpp>
#include <kiln/serialize/detail/model_io.hpp>
#include <kiln/serialize/json.hpp>
#include <kiln/serialize/keras.hpp>

namespace kiln::hub {

namespace fs = std::filesystem;

namespace {

// keras-hub's tokenizer classes: module, kind, pre-tokenizing pattern (BPE), special tokens.
enum class TokenizerKind { byte_pair, word_piece, sentence_piece };

struct TokenizerClass {
  std::string module;
  TokenizerKind kind;
  std::string pattern;
  std::string start, end;                // "" when the class has none
  std::vector<std::string> specials;     // every special token (kept whole by the BPE tokenizers)
};

const std::map<std::string, TokenizerClass>& tokenizer_classes() {
  using K = TokenizerKind;
  static const std::vector<std::string> bert = {"[CLS]", "[SEP]", "[PAD]", "[MASK]"};
  static const std::map<std::string, TokenizerClass> classes = {
      {"GPT2Tokenizer",
       {"keras_hub.src.models.gpt2.gpt2_tokenizer", K::byte_pair, "gpt2", "<|endoftext|>", "<|endoftext|>", {"<|endoftext|>"}}},
      {"RobertaTokenizer",
       {"keras_hub.src.models.roberta.roberta_tokenizer", K::byte_pair, "gpt2", "<s>", "</s>", {"<s>", "</s>", "<pad>", "<mask>"}}},
      {"Llama3Tokenizer",
       {"keras_hub.src.models.llama3.llama3_tokenizer", K::byte_pair, "llama3", "<|begin_of_text|>", "<|end_of_text|>",
        {"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}}},
      {"QwenTokenizer", {"keras_hub.src.models.qwen.qwen_tokenizer", K::byte_pair, "llama3", "", "<|endoftext|>", {"<|endoftext|>"}}},
      {"Qwen3Tokenizer",
       {"keras_hub.src.models.qwen3.qwen3_tokenizer", K::byte_pair, "llama3", "", "<|im_end|>", {"<|im_end|>", "<|endoftext|>"}}},
      {"BytePairTokenizer", {"keras_hub.src.tokenizers.byte_pair_tokenizer", K::byte_pair, "gpt2", "", "", {}}},
      {"BertTokenizer", {"keras_hub.src.models.bert.bert_tokenizer", K::word_piece, "", "[CLS]", "[SEP]", bert}},
      {"DistilBertTokenizer",
       {"keras_hub.src.models.distil_bert.distil_bert_tokenizer", K::word_piece, "", "[CLS]", "[SEP]", bert}},
      {"WordPieceTokenizer", {"keras_hub.src.tokenizers.word_piece_tokenizer", K::word_piece, "", "", "", {}}},
      {"LlamaTokenizer", {"keras_hub.src.models.llama.llama_tokenizer", K::sentence_piece, "", "<s>", "</s>", {"<s>", "</s>"}}},
      {"MistralTokenizer",
       {"keras_hub.src.models.mistral.mistral_tokenizer", K::sentence_piece, "", "<s>", "</s>", {"<s>", "</s>"}}},
      {"FalconTokenizer",
       {"keras_hub.src.models.falcon.falcon_tokenizer", K::byte_pair, "gpt2", "<|endoftext|>", "<|endoftext|>", {"<|endoftext|>"}}},
      {"Phi3Tokenizer",
       {"keras_hub.src.models.phi3.phi3_tokenizer", K::sentence_piece, "", "<s>", "<|endoftext|>", {"<s>", "<|endoftext|>"}}},
      {"GemmaTokenizer",
       {"keras_hub.src.models.gemma.gemma_tokenizer", K::sentence_piece, "", "<bos>", "<eos>", {"<bos>", "<eos>", "<pad>"}}},
      {"SentencePieceTokenizer", {"keras_hub.src.tokenizers.sentence_piece_tokenizer", K::sentence_piece, "", "", "", {}}},
  };
  return classes;
}

std::string known_tokenizer_classes() {
  std::string names;
  for (const auto& [name, known] : tokenizer_classes()) names += (names.empty() ? "" : ", ") + name;
  return names;
}

// The kind of a tokenizer object, and keras-hub's class for it when none is named.
TokenizerKind kind_of(const Tokenizer& tokenizer) {
  if (dynamic_cast<const WordPieceTokenizer*>(&tokenizer)) return TokenizerKind::word_piece;
  if (dynamic_cast<const SentencePieceTokenizer*>(&tokenizer)) return TokenizerKind::sentence_piece;
  return TokenizerKind::byte_pair;
}

Config list_of(const std::vector<std::string>& values) {
  Config list = Config::list();
  for (const std::string& value : values) list.push_back(Config(value));
  return list;
}

std::vector<std::string> strings_of(const Config& arguments, const char* key, std::vector<std::string> fallback) {
  const Config* values = arguments.find(key);
  if (values == nullptr || !values->is_list()) return fallback;
  std::vector<std::string> result;
  for (const Config& value : values->as_list()) result.push_back(value.as_string(key));
  return result;
}

// The tokenizer tokenizer.json names, with its assets from `assets`.
std::shared_ptr<const Tokenizer> read_tokenizer(const TokenizerClass& known, const Config& arguments, const fs::path& assets) {
  switch (known.kind) {
    case TokenizerKind::byte_pair: {
      BytePairOptions options;
      options.split_pattern = known.pattern;
      options.add_prefix_space = arguments.get_bool("add_prefix_space", false);
      options.unsplittable_tokens = strings_of(arguments, "unsplittable_tokens", known.specials);
      return std::make_shared<BytePairTokenizer>(BytePairTokenizer::from_files(
          (assets / "vocabulary.json").string(), (assets / "merges.txt").string(), options));
    }
    case TokenizerKind::word_piece: {
      WordPieceOptions options;
      options.lowercase = arguments.get_bool("lowercase", false);
      options.strip_accents = arguments.get_bool("strip_accents", false);
      options.split = arguments.get_bool("split", true);
      options.split_on_cjk = arguments.get_bool("split_on_cjk", true);
      options.suffix_indicator = arguments.get_string("suffix_indicator", "##");
      options.oov_token = arguments.get_string("oov_token", "[UNK]");
      options.special_tokens_in_strings = arguments.get_bool("special_tokens_in_strings", false);
      // keras-hub's pattern: the class's special tokens, then the ones passed as special_tokens.
      options.special_tokens = known.specials;
      for (const std::string& token : strings_of(arguments, "special_tokens", {})) options.special_tokens.push_back(token);
      return std::make_shared<WordPieceTokenizer>(WordPieceTokenizer::from_file((assets / "vocabulary.txt").string(), options));
    }
    case TokenizerKind::sentence_piece: {
      SentencePieceOptions options;
      options.add_bos = arguments.get_bool("add_bos", false);
      options.add_eos = arguments.get_bool("add_eos", false);
      return std::make_shared<SentencePieceTokenizer>(
          SentencePieceTokenizer::from_file((assets / "vocabulary.spm").string(), options));
    }
  }
  throw ConfigError("unknown tokenizer kind");
}

// tokenizer.json's "config" for `tokenizer` as keras-hub's get_config writes it.
Config tokenizer_arguments(const Tokenizer& tokenizer, const std::string& tokenizer_class) {
  Config arguments = {
      {"name", kiln::to_snake_case(tokenizer_class)},
      {"trainable", true},
      {"dtype", {{"module", "keras"}, {"class_name", "DTypePolicy"}, {"config", {{"name", "int32"}}}, {"registered_name", Config()}}},
      {"config_file", "tokenizer.json"}};
  if (const auto* bpe = dynamic_cast<const BytePairTokenizer*>(&tokenizer)) {
    arguments.set("vocabulary", Config());
    arguments.set("merges", Config());
    arguments.set("sequence_length", Config());
    arguments.set("add_prefix_space", bpe->options().add_prefix_space);
    arguments.set("unsplittable_tokens", list_of(bpe->options().unsplittable_tokens));
  } else if (const auto* word_piece = dynamic_cast<const WordPieceTokenizer*>(&tokenizer)) {
    const WordPieceOptions& options = word_piece->options();
    const std::vector<std::string>& specials = tokenizer_classes().at(tokenizer_class).specials;
    // special_tokens holds what was passed beyond the class's own.
    std::vector<std::string> passed = options.special_tokens;
    if (passed.size() >= specials.size() && std::equal(specials.begin(), specials.end(), passed.begin()))
      passed.erase(passed.begin(), passed.begin() + static_cast<std::ptrdiff_t>(specials.size()));
    arguments.set("vocabulary", Config());
    arguments.set("sequence_length", Config());
    arguments.set("lowercase", options.lowercase);
    arguments.set("strip_accents", options.strip_accents);
    arguments.set("split", options.split);
    arguments.set("suffix_indicator", options.suffix_indicator);
    arguments.set("oov_token", options.oov_token);
    arguments.set("special_tokens", passed.empty() ? Config() : list_of(passed));
    arguments.set("special_tokens_in_strings", options.special_tokens_in_strings);
  } else if (const auto* sentence_piece = dynamic_cast<const SentencePieceTokenizer*>(&tokenizer)) {
    arguments.set("proto", Config());
    arguments.set("sequence_length", Config());
    arguments.set("add_bos", sentence_piece->options().add_bos);
    arguments.set("add_eos", sentence_piece->options().add_eos);
  }
  return arguments;
}

Config read_json(const fs::path& path) {
  const std::string where = path.string();
  try {
    Config config = parse_json(detail::read_text_file(where), where);
    if (!config.is_map()) throw SerializationError(where + ": not a JSON object");
    return config;
  } catch (const SerializationError&) {
    throw;
  } catch (const Error& error) {
    throw SerializationError(where + ": " + error.what());
  }
}

// keras-hub's _save_serialized_object drops every compile_config and build_config.
Config without_build_and_compile(const Config& config) {
  if (!config.is_map()) return config;
  Config result = Config::map();
  for (const auto& [key, value] : config.items())
    if (key != "compile_config" && key != "build_config") result.set(key, without_build_and_compile(value));
  return result;
}

std::optional<std::int64_t> special_id(const Tokenizer& tokenizer, const std::string& token) {
  if (token.empty()) return std::nullopt;
  return tokenizer.token_to_id(token);
}

}  // namespace

Preset load_preset(const std::string& folder) {
  const fs::path root(folder);
  if (!fs::is_directory(root)) throw SerializationError(folder + ": not a preset folder (no such directory)");
  if (!fs::exists(root / "config.json")) throw SerializationError(folder + ": not a keras-hub preset (no config.json)");
  // One model.weights.h5, or shards with their index (keras-hub shards presets over max_shard_size, 10 GB).
  const bool sharded = !fs::exists(root / "model.weights.h5") && fs::exists(root / "model.weights.json");
  const fs::path weights = root / (sharded ? "model.weights.json" : "model.weights.h5");
  if (!fs::exists(weights))
    throw SerializationError(folder + ": the preset has no model.weights.h5 (nor sharded model.weights.json)");
  std::uint64_t weight_bytes = 0;
  if (sharded) {
    for (const auto& entry : fs::directory_iterator(root))
      if (entry.is_regular_file() && entry.path().filename().string().rfind(".weights.h5") != std::string::npos)
        weight_bytes += static_cast<std::uint64_t>(entry.file_size());
  } else {
    weight_bytes = static_cast<std::uint64_t>(fs::file_size(weights));
  }
  const Config config = kiln::detail::guarded(weights.string(), [&] {
    return kiln::detail::with_llama_tying(read_json(root / "config.json"), weights.string());
  });
  std::shared_ptr<BackboneModel> backbone;
  {
    // Built as a file's model is: no initial draws, and no more memory than the weights file justifies.
    kiln::detail::BuildFromFile scope(weight_bytes);
    backbone = kiln::detail::guarded((root / "config.json").string(), [&] { return backbone_from_config(config); });
  }
  load_keras_weights(*backbone, weights.string());
  Preset preset(Backbone{backbone});

  if (fs::exists(root / "task.json")) {
    const Config task = read_json(root / "task.json");
    const std::string task_class = task.get_string("class_name", "");
    if (task_class.size() > 8 && task_class.compare(task_class.size() - 8, 8, "CausalLM") == 0) {
      preset.causal_lm = CausalLM(preset.backbone);
      if (preset.causal_lm.value()->class_name() != task_class)
        throw SerializationError(folder + ": task.json's " + task_class + " does not fit config.json's " +
                                 backbone->class_name());
    } else if (task_class.size() > 14 && task_class.compare(task_class.size() - 14, 14, "TextClassifier") == 0) {
      const Config arguments = task.contains("config") ? task.at("config") : Config::map();
      TextClassifierOptions options;
      const Config* activation = arguments.find("activation");
      if (activation != nullptr && activation->type() == Config::Type::string) options.activation = activation->as_string();
      if (const Config* dropout = arguments.find("dropout"); dropout != nullptr && !dropout->is_null())
        options.dropout = dropout->as_double("task.json: dropout");
      if (const Config* hidden = arguments.find("hidden_dim"); hidden != nullptr && !hidden->is_null())
        options.hidden_dim = hidden->as_int("task.json: hidden_dim");
      const std::int64_t num_classes = kiln::detail::guarded((root / "task.json").string(), [&] {
        return arguments.at("num_classes").as_int("num_classes");
      });
      preset.text_classifier = kiln::detail::guarded((root / "task.json").string(), [&] {
        return TextClassifier(preset.backbone, num_classes, options);
      });
      if (preset.text_classifier.value()->class_name() != task_class)
        throw SerializationError(folder + ": task.json's " + task_class + " does not fit config.json's " +
                                 backbone->class_name());
      if (fs::exists(root / "task.weights.h5"))
        load_keras_weights(*preset.text_classifier->ptr(), (root / "task.weights.h5").string(), {backbone.get()});
      else
        warn(folder + ": no task.weights.h5: the " + task_class + "'s head starts fresh, as keras-hub's does");
    } else if (task_class.size() > 8 && task_class.compare(task_class.size() - 8, 8, "MaskedLM") == 0) {
      preset.masked_lm = kiln::detail::guarded((root / "task.json").string(), [&] { return MaskedLM(preset.backbone); });
      if (preset.masked_lm.value()->class_name() != task_class)
        throw SerializationError(folder + ": task.json's " + task_class + " does not fit config.json's " +
                                 backbone->class_name());
      if (fs::exists(root / "task.weights.h5"))
        load_keras_weights(*preset.masked_lm->ptr(), (root / "task.weights.h5").string(), {backbone.get()});
      else
        warn(folder + ": no task.weights.h5: the " + task_class + "'s head starts fresh, as keras-hub's does");
    } else {
      warn(folder + ": task.json's " + task_class +
           " is not read (kiln reads keras-hub's CausalLMs, TextClassifiers and MaskedLMs); the backbone is");
    }
  }
  if (fs::exists(root / "tokenizer.json")) {
    preset.tokenizer_config = read_json(root / "tokenizer.json");
    const std::string tokenizer_class = preset.tokenizer_config.get_string("class_name", "");
    const auto known = tokenizer_classes().find(tokenizer_class);
    if (known == tokenizer_classes().end()) {
      warn(folder + ": tokenizer.json's " + tokenizer_class + " is not read (kiln reads " + known_tokenizer_classes() + ")");
    } else {
      const Config arguments = preset.tokenizer_config.contains("config") ? preset.tokenizer_config.at("config") : Config::map();
      preset.tokenizer = read_tokenizer(known->second, arguments, root / "assets" / "tokenizer");
      preset.start_token_id = special_id(*preset.tokenizer, known->second.start);
      preset.end_token_id = special_id(*preset.tokenizer, known->second.end);
    }
  }
  if (fs::exists(root / "preprocessor.json")) {
    const Config preprocessor = read_json(root / "preprocessor.json");
    const Config arguments = preprocessor.contains("config") ? preprocessor.at("config") : Config::map();
    preset.has_preprocessor = true;
    if (const Config* length = arguments.find("sequence_length"); length != nullptr && !length->is_null())
      preset.sequence_length = length->as_int("preprocessor.json: sequence_length");
    preset.add_start_token = arguments.get_bool("add_start_token", true);
    preset.add_end_token = arguments.get_bool("add_end_token", true);
  }
  return preset;
}

std::string Preset::generate(const std::string& prompt, std::int64_t max_length, const GenerateOptions& options) const {
  if (!causal_lm || !tokenizer)
    throw LayerStateError("Preset::generate needs a CausalLM and its tokenizer; this preset has " +
                          std::string(causal_lm ? "no tokenizer" : "no CausalLM task"));
  const std::int64_t length = max_length > 0 ? max_length : sequence_length;
  std::vector<std::int64_t> ids;
  if (add_start_token && start_token_id) ids.push_back(*start_token_id);
  for (const std::int64_t id : tokenizer->tokenize(prompt)) ids.push_back(id);
  if (static_cast<std::int64_t>(ids.size()) > length) ids.resize(static_cast<std::size_t>(length));  // the packer's cut
  std::vector<std::int64_t> stop;
  if (end_token_id) stop.push_back(*end_token_id);
  const std::vector<std::int64_t> generated = causal_lm->generate(ids, length, options, stop);
  // keras-hub's generate_postprocess: the special tokens stripped, the rest detokenized.
  std::vector<std::int64_t> kept;
  for (const std::int64_t id : generated)
    if (id != start_token_id.value_or(-1) && id != end_token_id.value_or(-1)) kept.push_back(id);
  return tokenizer->detokenize(kept);
}

Preset make_preset(const Backbone& backbone, const std::optional<CausalLM>& causal_lm,
                   std::shared_ptr<const Tokenizer> tokenizer, std::string tokenizer_class) {
  Preset preset(backbone);
  preset.causal_lm = causal_lm;
  if (tokenizer) {
    if (tokenizer_class.empty()) {
      switch (kind_of(*tokenizer)) {
        case TokenizerKind::byte_pair: tokenizer_class = "GPT2Tokenizer"; break;
        case TokenizerKind::word_piece: tokenizer_class = "BertTokenizer"; break;
        case TokenizerKind::sentence_piece: tokenizer_class = "LlamaTokenizer"; break;
      }
    }
    const auto known = tokenizer_classes().find(tokenizer_class);
    if (known == tokenizer_classes().end())
      throw ConfigError("make_preset: unknown tokenizer class '" + tokenizer_class + "'; kiln writes " +
                        known_tokenizer_classes());
    if (known->second.kind != kind_of(*tokenizer))
      throw ConfigError("make_preset: " + tokenizer_class + " is not the kind of tokenizer given (a " +
                        (kind_of(*tokenizer) == TokenizerKind::byte_pair    ? "BytePairTokenizer"
                         : kind_of(*tokenizer) == TokenizerKind::word_piece ? "WordPieceTokenizer"
                                                                            : "SentencePieceTokenizer") +
                        ")");
    preset.tokenizer = tokenizer;
    preset.start_token_id = special_id(*tokenizer, known->second.start);
    preset.end_token_id = special_id(*tokenizer, known->second.end);
    preset.tokenizer_config = {{"module", known->second.module},
                               {"class_name", tokenizer_class},
                               {"config", tokenizer_arguments(*tokenizer, tokenizer_class)},
                               {"registered_name", "keras_hub>" + tokenizer_class}};
    preset.has_preprocessor = causal_lm.has_value();
  }
  return preset;
}

Preset make_preset(const TextClassifier& classifier, std::shared_ptr<const Tokenizer> tokenizer,
                   std::string tokenizer_class) {
  Preset preset = make_preset(classifier.backbone(), std::nullopt, std::move(tokenizer), std::move(tokenizer_class));
  preset.text_classifier = classifier;
  return preset;
}

Preset make_preset(const MaskedLM& masked_lm, std::shared_ptr<const Tokenizer> tokenizer, std::string tokenizer_class) {
  Preset preset = make_preset(masked_lm.backbone(), std::nullopt, std::move(tokenizer), std::move(tokenizer_class));
  preset.masked_lm = masked_lm;
  return preset;
}

void save_preset(const Preset& preset, const std::string& folder, std::optional<double> max_shard_size) {
  if (max_shard_size && !(*max_shard_size > 0))
    throw ValueError("save_preset: max_shard_size is in GB and more than 0 (or none, never to shard), not " +
                     std::to_string(*max_shard_size));
  const fs::path root(folder);
  std::error_code error;
  fs::create_directories(preset.tokenizer ? root / "assets" / "tokenizer" : root, error);
  if (error) throw SerializationError(folder + ": cannot be made (" + error.message() + ")");
  const BackboneModel& backbone = *preset.backbone.ptr();
  const Config backbone_config = without_build_and_compile(kiln::detail::export_keras_model_config(backbone));
  // keras-hub shards the weights of a backbone over max_shard_size GB, each variable counted once. A weight no
  // shard can hold is refused before anything is written.
  constexpr double gigabyte = 1024.0 * 1024.0 * 1024.0;
  const std::vector<Weight> weights = backbone.weights();
  double backbone_bytes = 0;
  const Weight* largest = nullptr;
  for (const Weight& weight : weights) {
    backbone_bytes += static_cast<double>(weight.value.nbytes());
    if (largest == nullptr || weight.value.nbytes() > largest->value.nbytes()) largest = &weight;
  }
  const bool sharded = max_shard_size && backbone_bytes / gigabyte > *max_shard_size;
  if (sharded && static_cast<double>(largest->value.nbytes()) > *max_shard_size * gigabyte)
    throw ValueError("save_preset: " + backbone.describe() + "'s weight " + largest->path + " takes " +
                     std::to_string(largest->value.nbytes()) + " bytes, more than a shard of max_shard_size " +
                     std::to_string(*max_shard_size) + " GB can hold; increase max_shard_size");
  if (sharded) {
    save_keras_weights_sharded(backbone, (root / "model.weights.json").string(), *max_shard_size);
    // keras-hub reads model.weights.h5 before model.weights.json: a whole-file copy of earlier weights would hide
    // these.
    if (fs::remove(root / "model.weights.h5", error); error)
      throw SerializationError((root / "model.weights.h5").string() + ": an earlier save's weights, which keras-hub " +
                               "would read before the sharded ones, cannot be removed (" + error.message() + ")");
  } else {
    save_keras_weights(backbone, (root / "model.weights.h5").string());
  }
  detail::write_text_file((root / "config.json").string(), to_json(backbone_config, 4));
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%d@%H:%M:%S", std::localtime(&now));
  // keras-hub lists the tasks its classes define for the backbone's class (measured with keras-hub at 71453d0).
  Config tasks = Config::list();
  const std::string& family = backbone.class_name();
  if (family == "BertBackbone")
    tasks = list_of({"MaskedLM", "TextClassifier", "TextEmbedder"});
  else if (family == "RobertaBackbone" || family == "DistilBertBackbone")
    tasks = list_of({"MaskedLM", "TextClassifier"});
  else
    tasks = list_of({"CausalLM"});
  const Config metadata = {{"keras_version", "3.16.0"},
                           {"keras_hub_version", "0.32.0.dev0"},
                           {"parameter_count", preset.backbone.count_params()},
                           {"date_saved", std::string(date)},
                           {"tasks", tasks}};
  detail::write_text_file((root / "metadata.json").string(), to_json(metadata, 4));
  Config preprocessor;
  if (preset.tokenizer && !preset.tokenizer_config.is_null()) {
    detail::write_text_file((root / "tokenizer.json").string(), to_json(preset.tokenizer_config, 4));
    preset.tokenizer->save_assets((root / "assets" / "tokenizer").string());
    if (preset.causal_lm && preset.has_preprocessor) {
      const std::string task_class = preset.causal_lm.value()->class_name();
      const std::string preprocessor_class = task_class + "Preprocessor";
      const std::string module = preset.causal_lm.value()->keras_module() + "_preprocessor";
      preprocessor = {{"module", module},
                      {"class_name", preprocessor_class},
                      {"config",
                       {{"name", kiln::to_snake_case(preprocessor_class)},
                        {"trainable", true},
                        {"dtype", {{"module", "keras"}, {"class_name", "DTypePolicy"}, {"config", {{"name", "float32"}}},
                                   {"registered_name", Config()}}},
                        {"tokenizer", preset.tokenizer_config},
                        {"config_file", "preprocessor.json"},
                        {"sequence_length", preset.sequence_length},
                        {"add_start_token", preset.add_start_token},
                        {"add_end_token", preset.add_end_token}}},
                      {"registered_name", "keras_hub>" + preprocessor_class}};
      detail::write_text_file((root / "preprocessor.json").string(), to_json(preprocessor, 4));
    }
  }
  if (preset.text_classifier) {
    const TextClassifierModel& task = *preset.text_classifier->ptr();
    if (task.backbone() != preset.backbone.ptr())
      throw ValueError("save_preset: the preset's TextClassifier is over another backbone than the preset's");
    detail::write_text_file((root / "task.json").string(),
                            to_json(without_build_and_compile(kiln::detail::export_keras_model_config(task)), 4));
    save_keras_weights(task, (root / "task.weights.h5").string(), {task.backbone().get()});
  }
  if (preset.masked_lm) {
    const MaskedLMModel& task = *preset.masked_lm->ptr();
    if (task.backbone() != preset.backbone.ptr())
      throw ValueError("save_preset: the preset's MaskedLM is over another backbone than the preset's");
    detail::write_text_file((root / "task.json").string(),
                            to_json(without_build_and_compile(kiln::detail::export_keras_model_config(task)), 4));
    save_keras_weights(task, (root / "task.weights.h5").string(), {task.backbone().get()});
  }
  if (preset.causal_lm) {
    Config task = without_build_and_compile(kiln::detail::export_keras_model_config(*preset.causal_lm->ptr()));
    if (!preprocessor.is_null()) task.set("config", task.at("config").with("preprocessor", preprocessor));
    detail::write_text_file((root / "task.json").string(), to_json(task, 4));
  }
}

}  // namespace kiln::hub
