#pragma once
// keras-hub preset folders: what keras_hub.models.X.from_preset reads and save_to_preset writes.
//
//   kiln::hub::Preset gpt2 = kiln::hub::load_preset("gpt2_base_en");        // a folder keras-hub saved
//   std::string text = gpt2.generate("The quick brown fox", /*max_length=*/64);
//   kiln::hub::save_preset(gpt2, "my_gpt2");                                // the same layout back
//
// A folder holds config.json (the backbone, as keras-hub serializes it without compile or build configs),
// model.weights.h5 (the backbone's weights, Keras's save_weights layout), metadata.json, and optionally task.json (the
// task: kiln reads the CausalLMs, TextClassifiers and MaskedLMs; a TextClassifier's or MaskedLM's head in
// task.weights.h5), tokenizer.json with assets/tokenizer/ (kiln reads keras-hub's tokenizers: byte-level BPE:
// GPT2Tokenizer, RobertaTokenizer, Llama3Tokenizer, QwenTokenizer, Qwen3Tokenizer, FalconTokenizer, BytePairTokenizer;
// WordPiece: BertTokenizer, DistilBertTokenizer, WordPieceTokenizer; SentencePiece: LlamaTokenizer, MistralTokenizer,
// Phi3Tokenizer, GemmaTokenizer, SentencePieceTokenizer) and preprocessor.json (the CausalLM preprocessor's
// sequence_length, add_start_token, add_end_token). Parts kiln does not read (another tokenizer or task) are skipped
// with a warning, so the backbone still loads.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <kiln/hub/backbone.hpp>
#include <kiln/hub/causal_lm.hpp>
#include <kiln/hub/masked_lm.hpp>
#include <kiln/hub/text_classifier.hpp>
#include <kiln/hub/tokenizers/byte_pair_tokenizer.hpp>
#include <kiln/hub/tokenizers/sentence_piece_tokenizer.hpp>
#include <kiln/hub/tokenizers/word_piece_tokenizer.hpp>
#include <kiln/train/generate.hpp>

namespace kiln::hub {

/// A loaded preset: the backbone, and when the folder has them, the task, the tokenizer and the preprocessor's
/// settings.
struct Preset {
  explicit Preset(Backbone model) : backbone(std::move(model)) {}
  Backbone backbone;
  std::optional<CausalLM> causal_lm;             ///< task.json's CausalLM, over `backbone`
  /// task.json's TextClassifier, over `backbone`, its head's weights from task.weights.h5 (a fresh head without it)
  std::optional<TextClassifier> text_classifier;
  /// task.json's MaskedLM, over `backbone`, its head's weights from task.weights.h5 (a fresh head without it)
  std::optional<MaskedLM> masked_lm;
  std::shared_ptr<const Tokenizer> tokenizer;   ///< tokenizer.json's, with its assets (null when none)
  Config tokenizer_config;                       ///< tokenizer.json as read (null when none): written back as is
  std::int64_t sequence_length = 1024;           ///< preprocessor.json's (keras-hub's CausalLMPreprocessor default)
  bool add_start_token = true, add_end_token = true;
  bool has_preprocessor = false;                 ///< whether preprocessor.json was there (save writes one then)
  std::optional<std::int64_t> start_token_id, end_token_id;  ///< the tokenizer's special tokens

  /// keras-hub's CausalLM.generate on text: the prompt tokenized (after the start token when add_start_token),
  /// generated to `max_length` tokens in all (0: sequence_length) or to the end token, and the whole sequence,
  /// prompt included, detokenized without its special tokens. LayerStateError without a CausalLM or a tokenizer.
  std::string generate(const std::string& prompt, std::int64_t max_length = 0, const GenerateOptions& options = {}) const;
};

/// Reads the preset folder `folder`. SerializationError naming the file for a missing config.json or weights, or
/// any file that does not parse. Sharded weights (model.weights.json and its shards) are read as keras-hub reads them,
/// when there is no model.weights.h5.
Preset load_preset(const std::string& folder);

/// A preset of a TextClassifier (its backbone, task.json and task.weights.h5) with an optional tokenizer.
Preset make_preset(const TextClassifier& classifier, std::shared_ptr<const Tokenizer> tokenizer = nullptr,
                   std::string tokenizer_class = "");

/// A preset of a MaskedLM (its backbone, task.json and task.weights.h5) with an optional tokenizer.
Preset make_preset(const MaskedLM& masked_lm, std::shared_ptr<const Tokenizer> tokenizer = nullptr,
                   std::string tokenizer_class = "");

/// Writes `preset` as keras-hub's save_to_preset(folder, max_shard_size) does, into `folder` (made when missing),
/// each file atomically. A backbone whose weights take more than `max_shard_size` GB (1024^3 bytes; keras-hub's
/// default 10) has them written sharded, model.weights.json and model_00000.weights.h5, ... (as
/// save_keras_weights_sharded writes them), and a model.weights.h5 left by an earlier save is removed (keras-hub
/// would read it first); std::nullopt never shards. ValueError for max_shard_size <= 0.
void save_preset(const Preset& preset, const std::string& folder, std::optional<double> max_shard_size = 10.0);

/// A preset of a backbone alone, or of a CausalLM with an optional tokenizer, to save. `tokenizer_class` is
/// keras-hub's class for the tokenizer (GPT2Tokenizer, BertTokenizer, GemmaTokenizer, ...; its special tokens are
/// the start and end tokens); empty: GPT2Tokenizer, BertTokenizer or LlamaTokenizer by the tokenizer's kind.
/// ConfigError for a class kiln does not know or of another kind.
Preset make_preset(const Backbone& backbone, const std::optional<CausalLM>& causal_lm = std::nullopt,
                   std::shared_ptr<const Tokenizer> tokenizer = nullptr, std::string tokenizer_class = "");

}  // namespace kiln::hub
