#include <kiln/data/tokenizer.hpp>

#include <algorithm>
#include <map>

#include <kiln/core/error.hpp>

namespace kiln {

namespace {

// UTF-8 to code points; ValueError naming the byte offset of the first malformed sequence.
std::vector<std::uint32_t> code_points(const std::string& text, const std::string& who) {
  std::vector<std::uint32_t> points;
  points.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const auto lead = static_cast<unsigned char>(text[i]);
    const int extra = lead < 0x80 ? 0 : (lead >> 5) == 0x6 ? 1 : (lead >> 4) == 0xE ? 2 : (lead >> 3) == 0x1E ? 3 : -1;
    if (extra < 0 || i + static_cast<std::size_t>(extra) >= text.size())
      throw ValueError(who + ": the text is not UTF-8 at byte " + std::to_string(i));
    std::uint32_t point = extra == 0 ? lead : lead & (0x3Fu >> extra);
    for (int k = 1; k <= extra; ++k) {
      const auto next = static_cast<unsigned char>(text[i + static_cast<std::size_t>(k)]);
      if ((next >> 6) != 0x2) throw ValueError(who + ": the text is not UTF-8 at byte " + std::to_string(i));
      point = (point << 6) | (next & 0x3Fu);
    }
    points.push_back(point);
    i += static_cast<std::size_t>(extra) + 1;
  }
  return points;
}

std::string spell(std::uint32_t point) {
  std::string out;
  if (point < 0x80) {
    out += static_cast<char>(point);
  } else if (point < 0x800) {
    out += static_cast<char>(0xC0 | (point >> 6));
    out += static_cast<char>(0x80 | (point & 0x3F));
  } else if (point < 0x10000) {
    out += static_cast<char>(0xE0 | (point >> 12));
    out += static_cast<char>(0x80 | ((point >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (point & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (point >> 18));
    out += static_cast<char>(0x80 | ((point >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((point >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (point & 0x3F));
  }
  return out;
}

// How a message shows a character: printable ASCII as itself, others by code point.
std::string shown(std::uint32_t point) {
  if (point >= 0x20 && point < 0x7F) return "'" + std::string(1, static_cast<char>(point)) + "'";
  return "U+" + std::to_string(point);
}

}  // namespace

CharacterTokenizer::CharacterTokenizer(const std::string& vocabulary) {
  const std::vector<std::uint32_t> points = code_points(vocabulary, "CharacterTokenizer vocabulary");
  if (points.empty()) throw ValueError("CharacterTokenizer: the vocabulary is empty");
  for (const std::uint32_t point : points) {
    if (!id_.emplace(point, static_cast<std::int64_t>(spelled_.size())).second)
      throw ValueError("CharacterTokenizer: the vocabulary holds " + shown(point) + " twice");
    spelled_.push_back(spell(point));
  }
}

CharacterTokenizer CharacterTokenizer::from_text(const std::string& text) {
  const std::vector<std::uint32_t> points = code_points(text, "CharacterTokenizer::from_text");
  std::vector<std::uint32_t> unique(points);
  std::sort(unique.begin(), unique.end());
  unique.erase(std::unique(unique.begin(), unique.end()), unique.end());
  std::string vocabulary;
  for (const std::uint32_t point : unique) vocabulary += spell(point);
  return CharacterTokenizer(vocabulary);
}

CharacterTokenizer CharacterTokenizer::from_config(const Config& config) {
  ConfigReader args(config, "CharacterTokenizer");
  const Config& vocabulary = args.value("vocabulary");
  args.finish();
  if (vocabulary.type() != Config::Type::string)
    throw ConfigError("CharacterTokenizer: 'vocabulary' must be a string of the characters, got " + vocabulary.to_string());
  return CharacterTokenizer(vocabulary.as_string());
}

CharacterTokenizer CharacterTokenizer::of(const ModelBase& model) {
  const Config* asset = model.asset("tokenizer");
  if (asset == nullptr) throw ValueError(model.describe() + " has no tokenizer attached");
  return from_config(*asset);
}

std::vector<std::int64_t> CharacterTokenizer::encode(const std::string& text) const {
  const std::vector<std::uint32_t> points = code_points(text, "CharacterTokenizer::encode");
  std::vector<std::int64_t> ids;
  ids.reserve(points.size());
  for (std::size_t i = 0; i < points.size(); ++i) {
    const auto found = id_.find(points[i]);
    if (found == id_.end())
      throw ValueError("CharacterTokenizer::encode: character " + std::to_string(i) + ", " + shown(points[i]) +
                       ", is not in the vocabulary of " + std::to_string(spelled_.size()));
    ids.push_back(found->second);
  }
  return ids;
}

std::string CharacterTokenizer::decode(const std::vector<std::int64_t>& ids) const {
  std::string text;
  for (std::size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocabulary_size())
      throw ValueError("CharacterTokenizer::decode: id " + std::to_string(i) + " is " + std::to_string(ids[i]) +
                       ", outside the vocabulary [0, " + std::to_string(vocabulary_size()) + ")");
    text += spelled_[static_cast<std::size_t>(ids[i])];
  }
  return text;
}

Config CharacterTokenizer::get_config() const {
  std::string vocabulary;
  for (const std::string& character : spelled_) vocabulary += character;
  return {{"vocabulary", vocabulary}};
}

void CharacterTokenizer::attach(ModelBase& model) const { model.set_asset("tokenizer", get_config()); }

}  // namespace kiln
