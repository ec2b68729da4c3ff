#pragma once
// CharacterTokenizer: text to token ids and back, one id per Unicode character (keras-hub's
// UnicodeCodepointTokenizer with a vocabulary, nanoGPT's character-level encoding). Its vocabulary is
// a config, and it travels with a model as the model's "tokenizer" asset, saved in kiln files.
//
//   kiln::CharacterTokenizer tokenizer = kiln::CharacterTokenizer::from_text(text);   // sorted characters
//   std::vector<std::int64_t> ids = tokenizer.encode("To be");
//   tokenizer.attach(model);  model.save("lm.kiln");
//   kiln::CharacterTokenizer again = kiln::CharacterTokenizer::of(kiln::load_model("lm.kiln"));
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <kiln/layers/config.hpp>
#include <kiln/layers/model_base.hpp>

namespace kiln {

/// Text to ids and back, one id per character of its vocabulary (see the file comment).
class CharacterTokenizer {
 public:
  /// The characters of `vocabulary` (UTF-8), one per id in that order, each once. ValueError for an empty
  /// vocabulary, a repeated character or text that is not UTF-8.
  explicit CharacterTokenizer(const std::string& vocabulary);
  /// Every character `text` holds, sorted by code point (nanoGPT's sorted(set(text))).
  static CharacterTokenizer from_text(const std::string& text);
  /// {"vocabulary": "..."}, as get_config() writes it; ConfigError otherwise.
  static CharacterTokenizer from_config(const Config& config);
  /// The tokenizer attached to `model` (its "tokenizer" asset); ValueError when it has none.
  static CharacterTokenizer of(const ModelBase& model);

  /// The id of each character of `text`; ValueError naming the first character (and its place) that is not
  /// in the vocabulary, or bytes that are not UTF-8.
  std::vector<std::int64_t> encode(const std::string& text) const;
  /// The text of `ids`; ValueError for an id outside [0, vocabulary_size()).
  std::string decode(const std::vector<std::int64_t>& ids) const;
  /// The number of characters, so ids run 0 .. vocabulary_size()-1.
  std::int64_t vocabulary_size() const { return static_cast<std::int64_t>(spelled_.size()); }
  /// {"vocabulary": the characters in id order, as one UTF-8 string}.
  Config get_config() const;
  /// Makes this tokenizer the model's "tokenizer" asset, saved with it.
  void attach(ModelBase& model) const;

 private:
  std::vector<std::string> spelled_;          ///< the characters in UTF-8, by id
  std::map<std::uint32_t, std::int64_t> id_;  ///< each character's id, by code point
};

}  // namespace kiln
