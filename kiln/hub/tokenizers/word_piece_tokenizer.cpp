#include <kiln/hub/tokenizers/word_piece_tokenizer.hpp>

#include <utf8proc.h>

#include <cstdlib>
#include <unordered_map>

#include <kiln/core/error.hpp>
#include <kiln/hub/tokenizers/detail/text.hpp>

namespace kiln::hub {

namespace {

// keras-hub's CJK_REGEX: the CJK Unified Ideographs blocks and their extensions and compatibility forms.
bool is_cjk(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

utf8proc_category_t category(char32_t c) { return utf8proc_category(static_cast<utf8proc_int32_t>(c)); }

// keras-hub's WHITESPACE_REGEX: RE2's \s (ASCII [\t\n\f\r ]), \p{Cc}, \p{Cf}.
bool is_split_space(char32_t c) {
  if (c == '\t' || c == '\n' || c == '\f' || c == '\r' || c == ' ') return true;
  const utf8proc_category_t kind = category(c);
  return kind == UTF8PROC_CATEGORY_CC || kind == UTF8PROC_CATEGORY_CF;
}

// keras-hub's PUNCTUATION_REGEX: ASCII's symbols and punctuation, and \p{P}.
bool is_punctuation(char32_t c) {
  if ((c >= '!' && c <= '/') || (c >= ':' && c <= '@') || (c >= '[' && c <= '`') || (c >= '{' && c <= '~'))
    return true;
  switch (category(c)) {
    case UTF8PROC_CATEGORY_PC: case UTF8PROC_CATEGORY_PD: case UTF8PROC_CATEGORY_PS: case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI: case UTF8PROC_CATEGORY_PF: case UTF8PROC_CATEGORY_PO:
      return true;
    default:
      return false;
  }
}

// utf8proc's result (malloc'd), as a string; `what` names the form in the error.
std::string take(utf8proc_uint8_t* mapped, const char* what) {
  if (mapped == nullptr) throw ValueError(std::string("WordPieceTokenizer: ") + what + " normalization failed");
  std::string result(reinterpret_cast<const char*>(mapped));
  std::free(mapped);
  return result;
}

std::string nfd(const std::string& text) {
  return take(utf8proc_NFD(reinterpret_cast<const utf8proc_uint8_t*>(text.c_str())), "NFD");
}

// ICU's NFKC_Casefold, which tf_text.case_fold_utf8 applies: NFKC with case folding, default ignorables removed.
std::string case_fold(const std::string& text) {
  return take(utf8proc_NFKC_Casefold(reinterpret_cast<const utf8proc_uint8_t*>(text.c_str())), "NFKC_Casefold");
}

}  // namespace

struct WordPieceTokenizer::Tables {
  std::vector<std::string> vocabulary;
  std::unordered_map<std::string, std::int64_t> ids;  // a token's first id
  std::int64_t oov_id = 0;
  std::vector<std::string> specials;  // found in the text first (special_tokens_in_strings), in order
  WordPieceOptions options;

  // The special token starting at `at` (the first in order that does, as the alternation of keras-hub's pattern
  // matches), or nullptr.
  const std::string* special_at(std::string_view text, std::size_t at) const {
    for (const std::string& token : specials)
      if (!token.empty() && text.compare(at, token.size(), token) == 0) return &token;
    return nullptr;
  }

  std::vector<std::string> pretokenize(std::string_view input) const {
    const std::size_t bad = detail::invalid_utf8(input);
    if (bad != std::string_view::npos)
      throw ValueError("WordPieceTokenizer: the text is not valid UTF-8 at byte " + std::to_string(bad));
    std::string text;
    if (options.split && options.split_on_cjk) {
      text.reserve(input.size());
      detail::for_each_code_point(input, [&](char32_t point, std::string_view bytes) {
        if (is_cjk(point)) {
          text += ' ';
          text += bytes;
          text += ' ';
        } else {
          text += bytes;
        }
      });
    } else {
      text.assign(input);
    }
    if (options.strip_accents) {
      std::string stripped;
      detail::for_each_code_point(nfd(text), [&](char32_t point, std::string_view bytes) {
        if (category(point) != UTF8PROC_CATEGORY_MN) stripped += bytes;
      });
      text = std::move(stripped);
    }
    std::vector<std::string> words;
    std::vector<bool> special;
    if (!options.split) {
      if (!text.empty()) {
        words.push_back(text);
        special.push_back(false);
      }
    } else {
      // tf_text.regex_split: the text between delimiters (empty pieces dropped), with the kept delimiters
      // (punctuation, CJK, special tokens) as words of their own.
      const bool find_specials = options.special_tokens_in_strings && !specials.empty();
      std::string word;
      auto flush = [&] {
        if (!word.empty()) {
          words.push_back(std::move(word));
          special.push_back(false);
          word.clear();
        }
      };
      std::size_t at = 0;
      while (at < text.size()) {
        if (find_specials) {
          if (const std::string* token = special_at(text, at)) {
            flush();
            words.push_back(*token);
            special.push_back(true);
            at += token->size();
            continue;
          }
        }
        const std::size_t length = detail::utf8_length(static_cast<unsigned char>(text[at]));
        const std::string_view bytes(text.data() + at, length);
        const char32_t point = detail::first_code_point(bytes);
        if (is_split_space(point)) {
          flush();
        } else if (is_punctuation(point) || (options.split_on_cjk && is_cjk(point))) {
          flush();
          words.emplace_back(bytes);
          special.push_back(false);
        } else {
          word += bytes;
        }
        at += length;
      }
      flush();
    }
    if (options.lowercase)
      for (std::size_t i = 0; i < words.size(); ++i)
        if (!special[i]) words[i] = case_fold(words[i]);
    return words;
  }

  // The pieces of one word, appended to `out` (ids), greedily longest first; the oov token when it cannot be cut.
  void cut(const std::string& word, std::vector<std::int64_t>& out) const {
    if (word.empty()) return;
    if (static_cast<std::int64_t>(word.size()) > options.max_bytes_per_word) {
      out.push_back(oov_id);
      return;
    }
    // Code point boundaries of the word.
    std::vector<std::size_t> bounds;
    for (std::size_t at = 0; at < word.size(); at += detail::utf8_length(static_cast<unsigned char>(word[at])))
      bounds.push_back(at);
    bounds.push_back(word.size());
    const std::size_t first = out.size();
    std::string candidate;
    std::size_t start = 0;  // index into bounds
    while (start + 1 < bounds.size()) {
      std::size_t end = bounds.size() - 1;
      std::int64_t found = -1;
      for (; end > start; --end) {
        candidate.clear();
        if (start > 0) candidate = options.suffix_indicator;
        candidate.append(word, bounds[start], bounds[end] - bounds[start]);
        const auto id = ids.find(candidate);
        if (id != ids.end()) {
          found = id->second;
          break;
        }
      }
      if (found < 0) {
        out.resize(first);
        out.push_back(oov_id);
        return;
      }
      out.push_back(found);
      start = end;
    }
  }
};

WordPieceTokenizer::WordPieceTokenizer(std::vector<std::string> vocabulary, const WordPieceOptions& options) {
  auto tables = std::make_shared<Tables>();
  tables->options = options;
  tables->vocabulary = std::move(vocabulary);
  for (std::size_t i = 0; i < tables->vocabulary.size(); ++i)
    tables->ids.emplace(tables->vocabulary[i], static_cast<std::int64_t>(i));
  const auto oov = tables->ids.find(options.oov_token);
  if (oov == tables->ids.end())
    throw ValueError("WordPieceTokenizer: the oov token \"" + options.oov_token +
                     "\" is not in the vocabulary (" + std::to_string(tables->vocabulary.size()) +
                     " tokens); add it, or pass another oov_token");
  tables->oov_id = oov->second;
  if (options.max_bytes_per_word < 1)
    throw ValueError("WordPieceTokenizer: max_bytes_per_word must be positive, got " +
                     std::to_string(options.max_bytes_per_word));
  for (const std::string& token : options.special_tokens) {
    if (tables->ids.count(token) == 0)
      throw ValueError("WordPieceTokenizer: the special token \"" + token + "\" is not in the vocabulary");
    if (detail::invalid_utf8(token) != std::string::npos)
      throw ValueError("WordPieceTokenizer: a special token is not valid UTF-8");
    tables->specials.push_back(token);
  }
  tables_ = std::move(tables);
}

WordPieceTokenizer WordPieceTokenizer::from_file(const std::string& vocabulary_txt, const WordPieceOptions& options) {
  const std::string text = detail::read_text_file(vocabulary_txt);
  const std::size_t bad = detail::invalid_utf8(text);
  if (bad != std::string::npos)
    throw ValueError(vocabulary_txt + ": not valid UTF-8 at byte " + std::to_string(bad));
  // Python's `for line in file: line.rstrip()`: lines end at '\n' (a final line without one counts), trailing
  // whitespace (ASCII and Unicode's) is dropped.
  std::vector<std::string> vocabulary;
  std::size_t at = 0;
  while (at < text.size()) {
    std::size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(at, end - at);
    while (!line.empty()) {
      // The last code point: strip it while it is whitespace.
      std::size_t last = line.size() - 1;
      while (last > 0 && (static_cast<unsigned char>(line[last]) & 0xC0) == 0x80) --last;
      const char32_t point = detail::first_code_point(std::string_view(line).substr(last));
      const bool space = point == ' ' || (point >= 0x09 && point <= 0x0D) || (point >= 0x1C && point <= 0x1F) ||
                         point == 0x85 || category(point) == UTF8PROC_CATEGORY_ZS ||
                         category(point) == UTF8PROC_CATEGORY_ZL || category(point) == UTF8PROC_CATEGORY_ZP;
      if (!space) break;
      line.resize(last);
    }
    vocabulary.push_back(std::move(line));
    at = end + 1;
  }
  try {
    return WordPieceTokenizer(std::move(vocabulary), options);
  } catch (const ValueError& error) {
    throw ValueError(vocabulary_txt + ": " + error.what());
  }
}

std::vector<std::string> WordPieceTokenizer::pretokenize(std::string_view text) const { return tables_->pretokenize(text); }

std::vector<std::int64_t> WordPieceTokenizer::tokenize(std::string_view text) const {
  std::vector<std::int64_t> ids;
  for (const std::string& word : tables_->pretokenize(text)) tables_->cut(word, ids);
  return ids;
}

std::vector<std::string> WordPieceTokenizer::pieces(std::string_view text) const {
  std::vector<std::string> result;
  for (const std::int64_t id : tokenize(text)) result.push_back(tables_->vocabulary[static_cast<std::size_t>(id)]);
  return result;
}

std::string WordPieceTokenizer::detokenize(const std::vector<std::int64_t>& ids) const {
  const std::string& indicator = tables_->options.suffix_indicator;
  std::string text;
  bool first = true;
  for (const std::int64_t id : ids) {
    const std::string piece = id_to_token(id);
    if (!indicator.empty() && piece.size() > indicator.size() && piece.compare(0, indicator.size(), indicator) == 0) {
      text.append(piece, indicator.size(), std::string::npos);
    } else {
      if (!first) text += ' ';
      text += piece;
    }
    first = false;
  }
  return text;
}

const std::vector<std::string>& WordPieceTokenizer::vocabulary() const { return tables_->vocabulary; }
const WordPieceOptions& WordPieceTokenizer::options() const { return tables_->options; }

void WordPieceTokenizer::save_assets(const std::string& folder) const {
  std::string text;
  for (const std::string& token : tables_->vocabulary) {
    text += token;
    text += '\n';
  }
  detail::write_text_file(folder + "/vocabulary.txt", text);
}

std::int64_t WordPieceTokenizer::vocabulary_size() const { return static_cast<std::int64_t>(tables_->vocabulary.size()); }

std::int64_t WordPieceTokenizer::token_to_id(const std::string& token) const {
  const auto id = tables_->ids.find(token);
  if (id == tables_->ids.end()) throw ValueError("WordPieceTokenizer: token '" + token + "' is not in the vocabulary");
  return id->second;
}

std::string WordPieceTokenizer::id_to_token(std::int64_t id) const {
  if (id < 0 || id >= vocabulary_size())
    throw ValueError("WordPieceTokenizer: id " + std::to_string(id) + " is not in the vocabulary (0.." +
                     std::to_string(vocabulary_size() - 1) + ")");
  return tables_->vocabulary[static_cast<std::size_t>(id)];
}

}  // namespace kiln::hub
