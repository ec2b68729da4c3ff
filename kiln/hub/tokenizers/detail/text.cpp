#include <kiln/hub/tokenizers/detail/text.hpp>

#include <fstream>
#include <limits>

#include <kiln/core/error.hpp>
#include <kiln/serialize/detail/container.hpp>

namespace kiln::hub::detail {

std::string utf8_of(char32_t point) {
  std::string out;
  if (point < 0x80) {
    out.push_back(static_cast<char>(point));
  } else if (point < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (point >> 6)));
    out.push_back(static_cast<char>(0x80 | (point & 0x3F)));
  } else if (point < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (point >> 12)));
    out.push_back(static_cast<char>(0x80 | ((point >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (point & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (point >> 18)));
    out.push_back(static_cast<char>(0x80 | ((point >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((point >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (point & 0x3F)));
  }
  return out;
}

std::size_t utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead & 0xE0) == 0xC0) return 2;
  if ((lead & 0xF0) == 0xE0) return 3;
  if ((lead & 0xF8) == 0xF0) return 4;
  return 1;
}

std::size_t invalid_utf8(std::string_view text) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto lead = static_cast<unsigned char>(text[i]);
    if (lead < 0x80) {
      ++i;
      continue;
    }
    std::size_t length = 0;
    char32_t point = 0, smallest = 0;
    if ((lead & 0xE0) == 0xC0) {
      length = 2, point = lead & 0x1F, smallest = 0x80;
    } else if ((lead & 0xF0) == 0xE0) {
      length = 3, point = lead & 0x0F, smallest = 0x800;
    } else if ((lead & 0xF8) == 0xF0) {
      length = 4, point = lead & 0x07, smallest = 0x10000;
    } else {
      return i;  // a continuation byte, or 0xF8 and above
    }
    if (i + length > text.size()) return i;
    for (std::size_t k = 1; k < length; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xC0) != 0x80) return i;
      point = (point << 6) | (next & 0x3F);
    }
    if (point < smallest || point > 0x10FFFF || (point >= 0xD800 && point <= 0xDFFF)) return i;
    i += length;
  }
  return std::string_view::npos;
}

void for_each_code_point(std::string_view text, const std::function<void(char32_t, std::string_view)>& visit) {
  std::size_t i = 0;
  while (i < text.size()) {
    const auto lead = static_cast<unsigned char>(text[i]);
    const std::size_t length = std::min(utf8_length(lead), text.size() - i);
    char32_t point = length == 1 ? lead : lead & (0xFF >> (length + 1));
    for (std::size_t k = 1; k < length; ++k) point = (point << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
    visit(point, text.substr(i, length));
    i += length;
  }
}

char32_t first_code_point(std::string_view text) {
  char32_t first = 0;
  bool seen = false;
  for_each_code_point(text, [&](char32_t point, std::string_view) {
    if (!seen) first = point;
    seen = true;
  });
  return first;
}

namespace {

class JsonReader {
 public:
  JsonReader(std::string_view text, std::string where) : text_(text), where_(std::move(where)) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw ValueError(where_ + ": " + what + " at byte " + std::to_string(at_));
  }
  void skip_space() {
    while (at_ < text_.size() && (text_[at_] == ' ' || text_[at_] == '\n' || text_[at_] == '\r' || text_[at_] == '\t'))
      ++at_;
  }
  void expect(char c) {
    skip_space();
    if (at_ >= text_.size() || text_[at_] != c) fail(std::string("expected '") + c + "'");
    ++at_;
  }
  bool peek(char c) {
    skip_space();
    return at_ < text_.size() && text_[at_] == c;
  }
  unsigned hex4() {
    if (at_ + 4 > text_.size()) fail("a \\u escape needs four hex digits");
    unsigned value = 0;
    for (int k = 0; k < 4; ++k) {
      const char c = text_[at_++];
      value <<= 4;
      if (c >= '0' && c <= '9') value |= static_cast<unsigned>(c - '0');
      else if (c >= 'a' && c <= 'f') value |= static_cast<unsigned>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') value |= static_cast<unsigned>(c - 'A' + 10);
      else fail("a \\u escape needs four hex digits");
    }
    return value;
  }
  std::string string() {
    expect('"');
    std::string out;
    while (true) {
      if (at_ >= text_.size()) fail("a string is not closed");
      const char c = text_[at_];
      if (c == '"') {
        ++at_;
        return out;
      }
      if (static_cast<unsigned char>(c) < 0x20) fail("a control character inside a string");
      if (c != '\\') {
        out.push_back(c);
        ++at_;
        continue;
      }
      ++at_;
      if (at_ >= text_.size()) fail("an escape is cut off");
      const char e = text_[at_++];
      switch (e) {
        case '"': out.push_back('"'); break;
        case '\\': out.push_back('\\'); break;
        case '/': out.push_back('/'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'u': {
          char32_t point = hex4();
          if (point >= 0xDC00 && point <= 0xDFFF) fail("a lone low surrogate");
          if (point >= 0xD800 && point <= 0xDBFF) {
            if (at_ + 2 > text_.size() || text_[at_] != '\\' || text_[at_ + 1] != 'u') fail("a lone high surrogate");
            at_ += 2;
            const char32_t low = hex4();
            if (low < 0xDC00 || low > 0xDFFF) fail("a high surrogate without its low one");
            point = 0x10000 + ((point - 0xD800) << 10) + (low - 0xDC00);
          }
          out += utf8_of(point);
          break;
        }
        default:
          fail(std::string("an unknown escape \\") + e);
      }
    }
  }
  std::int64_t integer() {
    skip_space();
    const std::size_t start = at_;
    bool negative = false;
    if (at_ < text_.size() && text_[at_] == '-') negative = true, ++at_;
    std::int64_t value = 0;
    std::size_t digits = 0;
    while (at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9') {
      const int digit = text_[at_++] - '0';
      if (value > (std::numeric_limits<std::int64_t>::max() - digit) / 10) fail("an id too large");
      value = value * 10 + digit;
      ++digits;
    }
    if (digits == 0) {
      at_ = start;
      fail("expected an integer id");
    }
    if (at_ < text_.size() && (text_[at_] == '.' || text_[at_] == 'e' || text_[at_] == 'E')) fail("an id that is not an integer");
    return negative ? -value : value;
  }
  bool at_end() {
    skip_space();
    return at_ == text_.size();
  }

 private:
  std::string_view text_;
  std::string where_;
  std::size_t at_ = 0;
};

}  // namespace

std::vector<std::pair<std::string, std::int64_t>> parse_vocabulary_json(std::string_view text, const std::string& where) {
  if (const std::size_t bad = invalid_utf8(text); bad != std::string_view::npos)
    throw ValueError(where + ": invalid UTF-8 at byte " + std::to_string(bad));
  JsonReader reader(text, where);
  std::vector<std::pair<std::string, std::int64_t>> entries;
  reader.expect('{');
  if (!reader.peek('}')) {
    while (true) {
      std::string token = reader.string();
      reader.expect(':');
      const std::int64_t id = reader.integer();
      entries.emplace_back(std::move(token), id);
      if (reader.peek(',')) {
        reader.expect(',');
        continue;
      }
      break;
    }
  }
  reader.expect('}');
  if (!reader.at_end()) reader.fail("text after the vocabulary object");
  return entries;
}

std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          static const char* const hex = "0123456789abcdef";
          out += "\\u00";
          out.push_back(hex[(c >> 4) & 0xF]);
          out.push_back(hex[c & 0xF]);
        } else {
          out.push_back(c);
        }
    }
  }
  return out + "\"";
}

void write_text_file(const std::string& path, std::string_view text) {
  kiln::detail::write_file_atomically(path, text);
}

std::string read_text_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw SerializationError(path + ": cannot be opened");
  file.seekg(0, std::ios::end);
  const std::streamoff size = file.tellg();
  if (size < 0) throw SerializationError(path + ": cannot be read");
  if (size > (std::streamoff{512} << 20)) throw SerializationError(path + ": larger than 512 MiB, not a tokenizer file");
  file.seekg(0);
  std::string text(static_cast<std::size_t>(size), '\0');
  if (!file.read(text.data(), size)) throw SerializationError(path + ": cannot be read");
  return text;
}

}  // namespace kiln::hub::detail
