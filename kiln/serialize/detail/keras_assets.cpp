#include <kiln/serialize/detail/keras_assets.hpp>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <string>

#include <kiln/core/error.hpp>

namespace kiln::detail {

namespace {

constexpr std::uint64_t kMaxVocabularyBytes = std::uint64_t{1} << 30;

// A lookup's config (StringLookup, IntegerLookup) has a vocabulary list and OOV indices.
bool is_lookup(const Config& asset) {
  const Config* vocabulary = asset.is_map() ? asset.find("vocabulary") : nullptr;
  return vocabulary != nullptr && vocabulary->is_list() && asset.contains("num_oov_indices") &&
         asset.contains("oov_token");
}

// A name that is one plain path component.
bool plain_name(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.size() > 200) return false;
  for (const char c : name)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.')) return false;
  return true;
}

std::string token_text(const Config& token) {
  return token.type() == Config::Type::string ? token.as_string() : token.to_string();
}

// The lookup's special tokens by index, as Keras's get_vocabulary(include_special_tokens=True) lists them.
std::vector<std::string> special_tokens(const Config& asset) {
  std::vector<std::string> tokens;
  if (const Config* mask = asset.find("mask_token"); mask != nullptr && !mask->is_null()) tokens.push_back(token_text(*mask));
  const std::int64_t oov = asset.get_int("num_oov_indices", 1);
  for (std::int64_t i = 0; i < oov && i < 1000; ++i) tokens.push_back(token_text(asset.at("oov_token")));
  return tokens;
}

}  // namespace

KerasAssets export_keras_assets(const ModelBase& model) {
  KerasAssets result;
  if (model.assets().empty()) return result;
  result.metadata = Config::map();
  for (const auto& [name, asset] : model.assets()) {
    const auto& tokens = is_lookup(asset) ? asset.at("vocabulary").as_list() : std::vector<Config>{};
    const bool one_per_line = std::none_of(tokens.begin(), tokens.end(), [](const Config& token) {
      return token_text(token).find_first_of("\r\n") != std::string::npos;
    });
    if (!is_lookup(asset) || !plain_name(name) || !one_per_line) {
      result.metadata.set(name, asset);
      continue;
    }
    const std::string path = "assets/kiln_assets/" + name + "/vocabulary.txt";
    std::string text;
    for (const std::string& token : special_tokens(asset)) text += token + "\n";
    for (const Config& token : asset.at("vocabulary").as_list()) text += token_text(token) + "\n";
    if (!text.empty()) text.pop_back();  // Keras joins the tokens with newlines
    result.files.emplace_back(path, std::move(text));
    result.metadata.set(name, asset.with("vocabulary", path));
  }
  return result;
}

void import_keras_assets(ModelBase& model, const Config& metadata, const ZipReader& archive, const std::string& where) {
  const Config* assets = metadata.is_map() ? metadata.find("kiln_assets") : nullptr;
  if (assets == nullptr) return;
  if (!assets->is_map()) throw SerializationError(where + ": kiln_assets is " + assets->to_string() + ", not a map");
  for (const auto& [name, given] : assets->items()) {
    const Config* file = given.is_map() ? given.find("vocabulary") : nullptr;
    if (file == nullptr || file->type() != Config::Type::string) {
      model.set_asset(name, given);
      continue;
    }
    const std::string path = file->as_string();
    if (!archive.contains(path))
      throw SerializationError(where + ": asset '" + name + "' names the vocabulary file " + path +
                               ", which the archive does not hold");
    const std::string text = archive.read(path, kMaxVocabularyBytes);
    std::vector<std::string> lines;
    for (std::size_t start = 0; start <= text.size();) {
      const std::size_t end = std::min(text.find('\n', start), text.size());
      lines.push_back(text.substr(start, end - start));
      start = end + 1;
    }
    while (!lines.empty() && lines.back().empty()) lines.pop_back();  // as Keras's load_assets
    const std::vector<std::string> specials = special_tokens(given);
    if (lines.size() < specials.size() || !std::equal(specials.begin(), specials.end(), lines.begin()))
      throw SerializationError(where + ": " + path + " does not start with the special tokens of asset '" + name +
                               "' (mask token, then the OOV token)");
    const bool integers = given.at("oov_token").type() != Config::Type::string;
    Config vocabulary = Config::list();
    for (std::size_t i = specials.size(); i < lines.size(); ++i) {
      if (!integers) {
        vocabulary.push_back(lines[i]);
        continue;
      }
      std::size_t used = 0;
      std::int64_t value = 0;
      try {
        value = std::stoll(lines[i], &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != lines[i].size() || lines[i].empty())
        throw SerializationError(where + ": " + path + " line " + std::to_string(i + 1) + " is '" + lines[i] +
                                 "', not an integer token");
      vocabulary.push_back(value);
    }
    model.set_asset(name, given.with("vocabulary", vocabulary));
  }
}

}  // namespace kiln::detail
