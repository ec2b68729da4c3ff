#include <kiln/hub/tokenizers/byte_pair_tokenizer.hpp>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <climits>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include <kiln/core/error.hpp>
#include <kiln/hub/tokenizers/detail/text.hpp>

namespace kiln::hub {

const std::vector<std::string>& byte_characters() {
  // GPT-2's bytes_to_unicode: the printable bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') stand for themselves, the others
  // for 256, 257, ... in byte order.
  static const std::vector<std::string> characters = [] {
    std::vector<std::string> table(256);
    int next = 256;
    for (int byte = 0; byte < 256; ++byte) {
      const bool printable = (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || (byte >= 0xAE && byte <= 0xFF);
      table[static_cast<std::size_t>(byte)] = detail::utf8_of(printable ? static_cast<char32_t>(byte) : static_cast<char32_t>(next++));
    }
    return table;
  }();
  return characters;
}

namespace {

const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
const char* const kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

struct CodeDeleter {
  void operator()(pcre2_code* code) const { pcre2_code_free(code); }
};

}  // namespace

struct BytePairTokenizer::Tables {
  std::unordered_map<std::string, std::int64_t> ids;
  std::unordered_map<std::int64_t, std::string> tokens;
  std::unordered_map<std::string, int> ranks;  // "a b" -> the rule's rank
  std::unordered_map<char32_t, unsigned char> bytes;  // a byte character -> its byte
  std::vector<std::string> unsplittable;       // longest first
  std::vector<std::pair<std::string, std::string>> merges;  // as given
  std::unique_ptr<pcre2_code, CodeDeleter> pattern;
  BytePairOptions options;

  // The pieces of `text` (valid UTF-8) the pattern matches, in order.
  void split(std::string_view text, std::vector<std::string_view>& pieces) const {
    pcre2_match_data* match = pcre2_match_data_create_from_pattern(pattern.get(), nullptr);
    if (match == nullptr) throw std::bad_alloc();
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    PCRE2_SIZE offset = 0;
    while (offset < text.size()) {
      const int found = pcre2_match(pattern.get(), subject, text.size(), offset, PCRE2_NO_UTF_CHECK, match, nullptr);
      if (found < 0) break;  // the rest matches nothing: skipped, as tiktoken's findall skips it
      const PCRE2_SIZE* range = pcre2_get_ovector_pointer(match);
      if (range[1] == range[0]) {  // an empty match: move on by one character
        offset = range[0] + detail::utf8_length(static_cast<unsigned char>(text[range[0]]));
        continue;
      }
      pieces.push_back(text.substr(range[0], range[1] - range[0]));
      offset = range[1];
    }
    pcre2_match_data_free(match);
  }

  // One piece's bytes through the merges, its tokens' ids appended to `out`.
  void encode_piece(std::string_view piece, std::vector<std::int64_t>& out) const {
    std::vector<std::string> symbols;
    symbols.reserve(piece.size());
    for (const char byte : piece) symbols.push_back(byte_characters()[static_cast<unsigned char>(byte)]);
    std::string key;
    while (symbols.size() > 1) {
      int best = INT_MAX;
      std::size_t at = 0;
      for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
        key.assign(symbols[i]).append(" ").append(symbols[i + 1]);
        const auto rank = ranks.find(key);
        if (rank != ranks.end() && rank->second < best) {
          best = rank->second;
          at = i;
        }
      }
      if (best == INT_MAX) break;
      // Merge every occurrence of the best pair, left to right (GPT-2's bpe()).
      const std::string first = symbols[at], second = symbols[at + 1];
      std::vector<std::string> merged;
      merged.reserve(symbols.size());
      for (std::size_t i = 0; i < symbols.size();) {
        if (i + 1 < symbols.size() && symbols[i] == first && symbols[i + 1] == second) {
          merged.push_back(first + second);
          i += 2;
        } else {
          merged.push_back(std::move(symbols[i]));
          ++i;
        }
      }
      symbols = std::move(merged);
    }
    for (const std::string& symbol : symbols) {
      const auto id = ids.find(symbol);
      if (id == ids.end())
        throw ValueError("BytePairTokenizer: the vocabulary has no token '" + symbol +
                         "' (every byte's character must be a token of a byte-level vocabulary)");
      out.push_back(id->second);
    }
  }
};

BytePairTokenizer::BytePairTokenizer(std::vector<std::pair<std::string, std::int64_t>> vocabulary,
                                     std::vector<std::pair<std::string, std::string>> merges,
                                     const BytePairOptions& options) {
  auto tables = std::make_shared<Tables>();
  tables->options = options;
  for (auto& [token, id] : vocabulary) {
    if (id < 0) throw ValueError("BytePairTokenizer: token '" + token + "' has a negative id " + std::to_string(id));
    if (!tables->tokens.emplace(id, token).second)
      throw ValueError("BytePairTokenizer: id " + std::to_string(id) + " is given to both '" + tables->tokens.at(id) +
                       "' and '" + token + "'");
    if (!tables->ids.emplace(token, id).second)
      throw ValueError("BytePairTokenizer: token '" + token + "' is in the vocabulary twice");
  }
  for (std::size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    if (tables->ids.count(a) == 0 || tables->ids.count(b) == 0)
      throw ValueError("BytePairTokenizer: merge rule " + std::to_string(rank) + " '" + a + " " + b +
                       "' names a token that is not in the vocabulary");
    tables->ranks.emplace(a + " " + b, static_cast<int>(rank));  // a repeated rule keeps its first rank
  }
  tables->merges = std::move(merges);
  for (std::size_t byte = 0; byte < 256; ++byte)
    tables->bytes.emplace(detail::first_code_point(byte_characters()[byte]), static_cast<unsigned char>(byte));
  for (const std::string& token : options.unsplittable_tokens) {
    if (token.empty()) throw ValueError("BytePairTokenizer: an unsplittable token is empty");
    if (tables->ids.count(token) == 0)
      throw ValueError("BytePairTokenizer: the unsplittable token '" + token + "' is not in the vocabulary");
    tables->unsplittable.push_back(token);
  }
  std::stable_sort(tables->unsplittable.begin(), tables->unsplittable.end(),
                   [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  const std::string pattern = options.split_pattern == "gpt2"     ? kGpt2Pattern
                              : options.split_pattern == "llama3" ? kLlama3Pattern
                                                                   : options.split_pattern;
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), PCRE2_UTF | PCRE2_UCP,
                                   &error, &error_offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    throw ConfigError("BytePairTokenizer: the split pattern does not compile at offset " + std::to_string(error_offset) +
                      ": " + reinterpret_cast<const char*>(message));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // faster when the JIT is there; the interpreter otherwise
  tables->pattern.reset(code);
  tables_ = std::move(tables);
}

BytePairTokenizer BytePairTokenizer::from_text(std::string_view vocabulary_json, std::string_view merges_txt,
                                               const BytePairOptions& options, const std::string& where) {
  const std::string prefix = where.empty() ? "" : where + ": ";
  std::vector<std::pair<std::string, std::int64_t>> vocabulary =
      detail::parse_vocabulary_json(vocabulary_json, prefix + "vocabulary.json");
  std::vector<std::pair<std::string, std::string>> merges;
  std::size_t line_start = 0, line_number = 0;
  while (line_start < merges_txt.size()) {
    std::size_t end = merges_txt.find('\n', line_start);
    if (end == std::string_view::npos) end = merges_txt.size();
    std::string_view line = merges_txt.substr(line_start, end - line_start);
    ++line_number;
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
    const std::size_t offset = line_start;
    line_start = end + 1;
    if (line.empty() || line.find("#version:") != std::string_view::npos) continue;
    if (const std::size_t bad = detail::invalid_utf8(line); bad != std::string_view::npos)
      throw ValueError(prefix + "merges.txt: invalid UTF-8 at byte " + std::to_string(offset + bad));
    const std::size_t space = line.find(' ');
    if (space == std::string_view::npos || space == 0 || line.find(' ', space + 1) != std::string_view::npos)
      throw ValueError(prefix + "merges.txt: line " + std::to_string(line_number) + " (byte " + std::to_string(offset) +
                       ") is not a rule of two tokens 'a b': '" + std::string(line.substr(0, 80)) + "'");
    merges.emplace_back(std::string(line.substr(0, space)), std::string(line.substr(space + 1)));
  }
  try {
    return BytePairTokenizer(std::move(vocabulary), std::move(merges), options);
  } catch (const ValueError& error) {
    throw ValueError(prefix + error.what());
  }
}

BytePairTokenizer BytePairTokenizer::from_files(const std::string& vocabulary_json, const std::string& merges_txt,
                                                const BytePairOptions& options) {
  return from_text(detail::read_text_file(vocabulary_json), detail::read_text_file(merges_txt), options,
                   vocabulary_json + " and " + merges_txt);
}

std::vector<std::string> BytePairTokenizer::split(std::string_view text) const {
  if (const std::size_t bad = detail::invalid_utf8(text); bad != std::string_view::npos)
    throw ValueError("BytePairTokenizer: the text is not valid UTF-8 at byte " + std::to_string(bad));
  std::vector<std::string_view> pieces;
  tables_->split(text, pieces);
  return {pieces.begin(), pieces.end()};
}

std::vector<std::int64_t> BytePairTokenizer::tokenize(std::string_view text) const {
  if (const std::size_t bad = detail::invalid_utf8(text); bad != std::string_view::npos)
    throw ValueError("BytePairTokenizer: the text is not valid UTF-8 at byte " + std::to_string(bad));
  const Tables& tables = *tables_;
  std::string prefixed;
  if (tables.options.add_prefix_space) {
    prefixed = " " + std::string(text);
    text = prefixed;
  }
  std::vector<std::int64_t> out;
  std::vector<std::string_view> pieces;
  // Unsplittable tokens first: the text between them is split and merged.
  std::size_t from = 0;
  auto flush = [&](std::size_t to) {
    pieces.clear();
    tables.split(text.substr(from, to - from), pieces);
    for (const std::string_view piece : pieces) tables.encode_piece(piece, out);
  };
  std::size_t at = 0;
  while (at < text.size() && !tables.unsplittable.empty()) {
    const std::string* found = nullptr;
    for (const std::string& token : tables.unsplittable)
      if (text.compare(at, token.size(), token) == 0) {
        found = &token;
        break;
      }
    if (found == nullptr) {
      ++at;
      continue;
    }
    flush(at);
    out.push_back(tables.ids.at(*found));
    at += found->size();
    from = at;
  }
  flush(text.size());
  return out;
}

std::string BytePairTokenizer::detokenize(const std::vector<std::int64_t>& ids) const {
  const Tables& tables = *tables_;
  std::string text;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const auto token = tables.tokens.find(ids[i]);
    if (token == tables.tokens.end())
      throw ValueError("BytePairTokenizer: id " + std::to_string(ids[i]) + " (at " + std::to_string(i) +
                       ") is not in the vocabulary");
    if (std::find(tables.unsplittable.begin(), tables.unsplittable.end(), token->second) != tables.unsplittable.end()) {
      text += token->second;
      continue;
    }
    detail::for_each_code_point(token->second, [&](char32_t point, std::string_view character) {
      const auto byte = tables.bytes.find(point);
      if (byte != tables.bytes.end())
        text.push_back(static_cast<char>(byte->second));
      else
        text.append(character);  // not a byte character (a token added by hand): its own UTF-8
    });
  }
  return text;
}

std::vector<std::pair<std::string, std::int64_t>> BytePairTokenizer::vocabulary() const {
  std::vector<std::pair<std::string, std::int64_t>> entries(tables_->ids.begin(), tables_->ids.end());
  std::sort(entries.begin(), entries.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
  return entries;
}

const std::vector<std::pair<std::string, std::string>>& BytePairTokenizer::merges() const { return tables_->merges; }

const BytePairOptions& BytePairTokenizer::options() const { return tables_->options; }

void BytePairTokenizer::save_assets(const std::string& folder) const {
  std::string vocabulary_json = "{";
  bool first = true;
  for (const auto& [token, id] : vocabulary()) {
    vocabulary_json += (first ? "" : ", ") + detail::json_string(token) + ": " + std::to_string(id);
    first = false;
  }
  vocabulary_json += "}";
  std::string merges_txt;
  for (const auto& [a, b] : tables_->merges) merges_txt += a + " " + b + "\n";
  detail::write_text_file(folder + "/vocabulary.json", vocabulary_json);
  detail::write_text_file(folder + "/merges.txt", merges_txt);
}

std::int64_t BytePairTokenizer::vocabulary_size() const { return static_cast<std::int64_t>(tables_->ids.size()); }

std::int64_t BytePairTokenizer::token_to_id(const std::string& token) const {
  const auto id = tables_->ids.find(token);
  if (id == tables_->ids.end()) throw ValueError("BytePairTokenizer: token '" + token + "' is not in the vocabulary");
  return id->second;
}

std::string BytePairTokenizer::id_to_token(std::int64_t id) const {
  const auto token = tables_->tokens.find(id);
  if (token == tables_->tokens.end())
    throw ValueError("BytePairTokenizer: id " + std::to_string(id) + " is not in the vocabulary");
  return token->second;
}

}  // namespace kiln::hub
