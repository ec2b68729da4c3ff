#pragma once
// What every keras-hub tokenizer kiln reads does: text (UTF-8) to token ids and back, its vocabulary, and its
// asset files. BytePairTokenizer (GPT-2, RoBERTa, Llama 3, Qwen), WordPieceTokenizer (BERT, DistilBERT) and
// SentencePieceTokenizer (Llama 2, Mistral, Gemma) are Tokenizers; a preset holds one behind this interface.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace kiln::hub {

class Tokenizer {
 public:
  virtual ~Tokenizer() = default;
  /// Token ids of `text` (UTF-8). ValueError naming the byte offset of invalid UTF-8.
  virtual std::vector<std::int64_t> tokenize(std::string_view text) const = 0;
  /// The text of `ids`. ValueError for an id outside the vocabulary.
  virtual std::string detokenize(const std::vector<std::int64_t>& ids) const = 0;
  virtual std::int64_t vocabulary_size() const = 0;
  /// ValueError for a token that is not in the vocabulary.
  virtual std::int64_t token_to_id(const std::string& token) const = 0;
  /// ValueError for an id that is not in the vocabulary.
  virtual std::string id_to_token(std::int64_t id) const = 0;
  /// keras-hub's asset files of this tokenizer (assets/tokenizer/...), into `folder`, each written atomically.
  virtual void save_assets(const std::string& folder) const = 0;
};

}  // namespace kiln::hub
