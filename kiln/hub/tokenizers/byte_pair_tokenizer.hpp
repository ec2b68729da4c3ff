#pragma once
// Byte-level byte-pair encoding, the tokenizer of GPT-2, RoBERTa, Llama 3 and Qwen (keras-hub's BytePairTokenizer,
// OpenAI's tiktoken encodings). Text (UTF-8) is split into pieces by a pre-tokenizing pattern, each piece's bytes
// are written as GPT-2's printable characters (bytes_to_unicode), and adjacent symbols are merged by the merge rules
// in rank order until none applies; each symbol is then a token of the vocabulary.
//
//   auto gpt2 = kiln::hub::BytePairTokenizer::from_files("vocabulary.json", "merges.txt");
//   std::vector<std::int64_t> ids = gpt2.tokenize("Hello world");   // {15496, 995}
//   std::string text = gpt2.detokenize(ids);                          // "Hello world"
//
// The vocabulary and merges are keras-hub's files (assets/tokenizer/vocabulary.json: {"token": id, ...};
// merges.txt: one "a b" rule a line, most important first, "#version" lines skipped). Special tokens
// (unsplittable_tokens, "<|endoftext|>") are found in the text first and never split.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <kiln/hub/tokenizers/tokenizer.hpp>

namespace kiln::hub {

/// How a BytePairTokenizer splits and what it keeps whole.
struct BytePairOptions {
  /// The pre-tokenizing pattern (PCRE2, Unicode): "gpt2" is GPT-2's (tiktoken's r50k_base: 's|'t|...| ?\p{L}+|
  /// ?\p{N}+|...), "llama3" is Llama 3's and Qwen's (tiktoken's cl100k_base: numbers in threes, case-insensitive
  /// contractions), anything else is the pattern itself.
  std::string split_pattern = "gpt2";
  /// keras-hub's add_prefix_space: a space before the text, as RoBERTa's tokenizer adds.
  bool add_prefix_space = false;
  /// Tokens found in the text before any splitting and kept whole (special tokens); each must be in the
  /// vocabulary.
  std::vector<std::string> unsplittable_tokens;
};

/// A byte-level BPE tokenizer. Copies share the (immutable) tables; every method may run on any thread.
class BytePairTokenizer : public Tokenizer {
 public:
  /// From a vocabulary (token -> id, ids distinct and non-negative) and merge rules (pairs of vocabulary tokens,
  /// most important first). ValueError naming the first rule or token that does not fit.
  BytePairTokenizer(std::vector<std::pair<std::string, std::int64_t>> vocabulary,
                    std::vector<std::pair<std::string, std::string>> merges, const BytePairOptions& options = {});
  /// From keras-hub's vocabulary.json and merges.txt. ValueError naming the file and the byte where it does not
  /// parse; SerializationError when a file cannot be read.
  static BytePairTokenizer from_files(const std::string& vocabulary_json, const std::string& merges_txt,
                                      const BytePairOptions& options = {});
  /// The same from the files' text.
  static BytePairTokenizer from_text(std::string_view vocabulary_json, std::string_view merges_txt,
                                     const BytePairOptions& options = {}, const std::string& where = "");

  /// Token ids of `text` (UTF-8). ValueError naming the byte offset of invalid UTF-8.
  std::vector<std::int64_t> tokenize(std::string_view text) const override;
  /// The text of `ids`: their tokens' bytes (a cut inside a character leaves its bytes as they are). ValueError
  /// for an id outside the vocabulary.
  std::string detokenize(const std::vector<std::int64_t>& ids) const override;
  /// The pieces the pattern splits `text` into, before any merge (for inspection and tests).
  std::vector<std::string> split(std::string_view text) const;

  /// The vocabulary, by id, and the merge rules, most important first: what vocabulary.json and merges.txt hold.
  std::vector<std::pair<std::string, std::int64_t>> vocabulary() const;
  const std::vector<std::pair<std::string, std::string>>& merges() const;
  const BytePairOptions& options() const;
  /// keras-hub's vocabulary.json and merges.txt of this tokenizer, into `folder` (written atomically each).
  void save_assets(const std::string& folder) const override;

  std::int64_t vocabulary_size() const override;
  /// ValueError for a token that is not in the vocabulary.
  std::int64_t token_to_id(const std::string& token) const override;
  /// ValueError for an id that is not in the vocabulary.
  std::string id_to_token(std::int64_t id) const override;

 private:
  struct Tables;
  std::shared_ptr<const Tables> tables_;
};

/// GPT-2's bytes_to_unicode: each byte as a printable character (UTF-8), the form vocabulary files spell tokens in.
const std::vector<std::string>& byte_characters();

}  // namespace kiln::hub
