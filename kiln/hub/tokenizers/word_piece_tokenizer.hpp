#pragma once
// WordPiece, the tokenizer of BERT and DistilBERT (keras-hub's WordPieceTokenizer, BertTokenizer,
// DistilBertTokenizer). Text is pre-tokenized as keras-hub's `pretokenize` does: spaces around CJK ideographs,
// accents stripped (NFD, marks removed) when asked, split on whitespace, control and format characters (dropped)
// and punctuation (kept, each its own word), case folded (NFKC_Casefold) when asked; each word is then cut
// greedily into the longest vocabulary pieces from its start, pieces after the first spelled with the suffix
// indicator ("##ing"), and a word that cannot be cut (or is longer than max_bytes_per_word) is the oov token.
//
//   kiln::hub::WordPieceOptions uncased;
//   uncased.lowercase = uncased.strip_accents = true;
//   auto bert = kiln::hub::WordPieceTokenizer::from_file("vocabulary.txt", uncased);
//   std::vector<std::int64_t> ids = bert.tokenize("Unaffable!");   // "una", "##ffa", "##ble", "!"
//   std::string text = bert.detokenize(ids);                        // "unaffable !"
//
// The vocabulary is keras-hub's assets/tokenizer/vocabulary.txt: one token a line, its id the line's index.
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <kiln/hub/tokenizers/tokenizer.hpp>

namespace kiln::hub {

/// keras-hub's WordPieceTokenizer arguments (config keys of the same names).
struct WordPieceOptions {
  bool lowercase = false;       ///< case fold each word (NFKC_Casefold, as tf_text.case_fold_utf8)
  bool strip_accents = false;   ///< NFD, then drop nonspacing marks (\p{Mn})
  bool split = true;            ///< split on whitespace and punctuation; false: the text is one word
  bool split_on_cjk = true;     ///< each CJK ideograph its own word (with split)
  std::string suffix_indicator = "##";
  std::string oov_token = "[UNK]";
  /// Tokens that, with special_tokens_in_strings, are found in the text first and never split or folded.
  std::vector<std::string> special_tokens;
  bool special_tokens_in_strings = false;
  /// Longer words (in UTF-8 bytes) are the oov token (tf_text.FastWordpieceTokenizer's max_bytes_per_word).
  std::int64_t max_bytes_per_word = 100;
};

/// A WordPiece tokenizer. Copies share the (immutable) tables; every method may run on any thread.
class WordPieceTokenizer : public Tokenizer {
 public:
  /// From the vocabulary, in id order. ValueError when the oov token (or a special token) is not in it.
  explicit WordPieceTokenizer(std::vector<std::string> vocabulary, const WordPieceOptions& options = {});
  /// From keras-hub's vocabulary.txt (each line right-stripped, as keras-hub reads it). SerializationError when the
  /// file cannot be read; ValueError naming the file and byte offset of invalid UTF-8.
  static WordPieceTokenizer from_file(const std::string& vocabulary_txt, const WordPieceOptions& options = {});

  std::vector<std::int64_t> tokenize(std::string_view text) const override;
  /// The words of `ids` joined by spaces, each suffix piece appended to the word before it without its
  /// indicator (tf_text.FastWordpieceTokenizer.detokenize).
  std::string detokenize(const std::vector<std::int64_t>& ids) const override;
  /// The words `text` is pre-tokenized into (keras-hub's pretokenize), before any piece is cut.
  std::vector<std::string> pretokenize(std::string_view text) const;
  /// The pieces of `text`, as tokens.
  std::vector<std::string> pieces(std::string_view text) const;

  const std::vector<std::string>& vocabulary() const;
  const WordPieceOptions& options() const;
  /// vocabulary.txt, into `folder`.
  void save_assets(const std::string& folder) const override;
  std::int64_t vocabulary_size() const override;
  std::int64_t token_to_id(const std::string& token) const override;
  std::string id_to_token(std::int64_t id) const override;

 private:
  struct Tables;
  std::shared_ptr<const Tables> tables_;
};

}  // namespace kiln::hub
