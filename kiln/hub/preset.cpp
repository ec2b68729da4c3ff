#include <kiln/hub/preset.hpp>

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

// keras-hub's byte-level BPE tokenizer classes: module, pre-tokenizing pattern, special tokens.
struct TokenizerClass {
  std::string module;
  std::string pattern;
  std::string start, end;                // "" when the class has none
  std::vector<std::string> specials;     // every special token, kept whole
};

const std::map<std::string, TokenizerClass>& tokenizer_classes() {
  static const std::map<std::string, TokenizerClass> classes = {
      {"GPT2Tokenizer",
       {"keras_hub.src.models.gpt2.gpt2_tokenizer", "gpt2", "<|endoftext|>", "<|endoftext|>", {"<|endoftext|>"}}},
      {"RobertaTokenizer",
       {"keras_hub.src.models.roberta.roberta_tokenizer", "gpt2", "<s>", "</s>", {"<s>", "</s>", "<pad>", "<mask>"}}},
      {"Llama3Tokenizer",
       {"keras_hub.src.models.llama3.llama3_tokenizer", "llama3", "<|begin_of_text|>", "<|end_of_text|>",
        {"<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}}},
      {"QwenTokenizer", {"keras_hub.src.models.qwen.qwen_tokenizer", "llama3", "", "<|endoftext|>", {"<|endoftext|>"}}},
      {"BytePairTokenizer", {"keras_hub.src.tokenizers.byte_pair_tokenizer", "gpt2", "", "", {}}},
  };
  return classes;
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

std::optional<std::int64_t> special_id(const BytePairTokenizer& tokenizer, const std::string& token) {
  if (token.empty()) return std::nullopt;
  return tokenizer.token_to_id(token);
}

}  // namespace

Preset load_preset(const std::string& folder) {
  const fs::path root(folder);
  if (!fs::is_directory(root)) throw SerializationError(folder + ": not a preset folder (no such directory)");
  if (!fs::exists(root / "config.json")) throw SerializationError(folder + ": not a keras-hub preset (no config.json)");
  const fs::path weights = root / "model.weights.h5";
  if (!fs::exists(weights)) {
    if (fs::exists(root / "model.weights.json"))
      throw SerializationError(folder + ": its weights are sharded (model.weights.json), which kiln does not read yet");
    throw SerializationError(folder + ": the preset has no model.weights.h5");
  }
  const Config config = kiln::detail::guarded(weights.string(), [&] {
    return kiln::detail::with_llama_tying(read_json(root / "config.json"), weights.string());
  });
  std::shared_ptr<BackboneModel> backbone;
  {
    // Built as a file's model is: no initial draws, and no more memory than the weights file justifies.
    kiln::detail::BuildFromFile scope(static_cast<std::uint64_t>(fs::file_size(weights)));
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
    } else {
      warn(folder + ": task.json's " + task_class + " is not read (kiln reads keras-hub's CausalLMs); the backbone is");
    }
  }
  if (fs::exists(root / "tokenizer.json")) {
    preset.tokenizer_config = read_json(root / "tokenizer.json");
    const std::string tokenizer_class = preset.tokenizer_config.get_string("class_name", "");
    const auto known = tokenizer_classes().find(tokenizer_class);
    if (known == tokenizer_classes().end()) {
      warn(folder + ": tokenizer.json's " + tokenizer_class +
           " is not read (kiln reads keras-hub's byte-level BPE tokenizers)");
    } else {
      const Config arguments = preset.tokenizer_config.contains("config") ? preset.tokenizer_config.at("config") : Config::map();
      BytePairOptions options;
      options.split_pattern = known->second.pattern;
      options.add_prefix_space = arguments.get_bool("add_prefix_space", false);
      if (const Config* tokens = arguments.find("unsplittable_tokens"); tokens != nullptr && tokens->is_list())
        for (const Config& token : tokens->as_list()) options.unsplittable_tokens.push_back(token.as_string());
      else
        options.unsplittable_tokens = known->second.specials;
      const fs::path assets = root / "assets" / "tokenizer";
      preset.tokenizer = BytePairTokenizer::from_files((assets / "vocabulary.json").string(),
                                                       (assets / "merges.txt").string(), options);
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
                   const std::optional<BytePairTokenizer>& tokenizer, const std::string& tokenizer_class) {
  Preset preset(backbone);
  preset.causal_lm = causal_lm;
  if (tokenizer) {
    const auto known = tokenizer_classes().find(tokenizer_class);
    if (known == tokenizer_classes().end())
      throw ConfigError("make_preset: unknown tokenizer class '" + tokenizer_class +
                        "'; kiln writes GPT2Tokenizer, RobertaTokenizer, Llama3Tokenizer, QwenTokenizer, BytePairTokenizer");
    preset.tokenizer = tokenizer;
    preset.start_token_id = special_id(*tokenizer, known->second.start);
    preset.end_token_id = special_id(*tokenizer, known->second.end);
    Config unsplittable = Config::list();
    for (const std::string& token : tokenizer->options().unsplittable_tokens) unsplittable.push_back(Config(token));
    preset.tokenizer_config = {
        {"module", known->second.module},
        {"class_name", tokenizer_class},
        {"config",
         {{"name", kiln::to_snake_case(tokenizer_class)},
          {"trainable", true},
          {"dtype", {{"module", "keras"}, {"class_name", "DTypePolicy"}, {"config", {{"name", "int32"}}}, {"registered_name", Config()}}},
          {"config_file", "tokenizer.json"},
          {"vocabulary", Config()},
          {"merges", Config()},
          {"sequence_length", Config()},
          {"add_prefix_space", tokenizer->options().add_prefix_space},
          {"unsplittable_tokens", unsplittable}}},
        {"registered_name", "keras_hub>" + tokenizer_class}};
    preset.has_preprocessor = causal_lm.has_value();
  }
  return preset;
}

void save_preset(const Preset& preset, const std::string& folder) {
  const fs::path root(folder);
  std::error_code error;
  fs::create_directories(preset.tokenizer ? root / "assets" / "tokenizer" : root, error);
  if (error) throw SerializationError(folder + ": cannot be made (" + error.message() + ")");
  const BackboneModel& backbone = *preset.backbone.ptr();
  const Config backbone_config = without_build_and_compile(kiln::detail::export_keras_model_config(backbone));
  detail::write_text_file((root / "config.json").string(), to_json(backbone_config, 4));
  save_keras_weights(backbone, (root / "model.weights.h5").string());
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%d@%H:%M:%S", std::localtime(&now));
  // keras-hub lists the tasks its classes define for the backbone's class: CausalLM for the decoder families.
  Config tasks = Config::list();
  if (backbone.num_inputs() == 2 && backbone.class_name() != "RobertaBackbone" &&
      backbone.class_name() != "DistilBertBackbone")
    tasks.push_back(Config("CausalLM"));
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
  if (preset.causal_lm) {
    Config task = without_build_and_compile(kiln::detail::export_keras_model_config(*preset.causal_lm->ptr()));
    if (!preprocessor.is_null()) task.set("config", task.at("config").with("preprocessor", preprocessor));
    detail::write_text_file((root / "task.json").string(), to_json(task, 4));
  }
}

}  // namespace kiln::hub
