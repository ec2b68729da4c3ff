// JSON text <-> Config.
//
// Writing drives cereal's JSONOutputArchive by hand. Reading does not use cereal's JSONInputArchive: it cannot
// tell what type a value has (there is no public API to ask), so a dynamic tree cannot be rebuilt, and it never
// checks rapidjson's parse error (malformed text surfaces as an assertion on a null document). Reading uses
// rapidjson's SAX Reader instead, from the same headers: its handler builds the Config directly with an explicit
// stack, so there is no DOM (about 4x the text's size) and no recursion, and it enforces the depth, duplicate-key
// and number rules that rapidjson leaves to the caller.
#include <kiln/serialize/json.hpp>

#include <kiln/serialize/detail/cereal_json.hpp>  // before anything else that could include rapidjson

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <new>
#include <sstream>
#include <string_view>
#include <system_error>
#include <unordered_set>
#include <utility>
#include <vector>

#include <kiln/core/error.hpp>

namespace kiln {
namespace {

constexpr int max_indent = 16;

// ---- checks before writing ------------------------------------------------------------------------------
// cereal's archive cannot fail halfway (it ignores rapidjson's return values and closes nodes in a noexcept
// destructor), so everything it would write wrongly is rejected before it sees a byte.

std::string key_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

std::string index_path(const std::string& parent, std::size_t index) {
  return parent + "[" + std::to_string(index) + "]";
}

std::string describe(const std::string& path) { return path.empty() ? "the root" : "'" + path + "'"; }

// The reader validates with the same rapidjson routine, so what passes here reads back.
bool is_valid_utf8(const std::string& text) {
  struct Discard {
    void Put(char) {}
  } sink;
  rapidjson::MemoryStream stream(text.data(), text.size());
  while (stream.Tell() < text.size())
    if (!rapidjson::UTF8<>::Validate(stream, sink)) return false;
  return true;
}

void check_writable(const Config& value, const std::string& path, int enclosing);

void check_key(const std::string& key, const std::string& path) {
  // cereal takes names as C strings, so a NUL byte would silently cut the key short.
  if (key.find('\0') != std::string::npos)
    throw ValueError("to_json: a key in " + describe(path) + " contains a NUL byte");
  if (!is_valid_utf8(key)) throw ValueError("to_json: a key in " + describe(path) + " is not valid UTF-8");
}

void check_children(const Config& value, const std::string& path, int depth) {
  if (depth > max_json_depth)
    throw ValueError("to_json: " + describe(path) + " nests deeper than " + std::to_string(max_json_depth) +
                     " lists and maps");
  if (value.is_list()) {
    const std::vector<Config>& items = value.as_list();
    for (std::size_t i = 0; i < items.size(); ++i) check_writable(items[i], index_path(path, i), depth);
    return;
  }
  for (const Config::Entry& entry : value.items()) {
    check_key(entry.first, path);
    check_writable(entry.second, key_path(path, entry.first), depth);
  }
}

// `enclosing` counts the lists and maps around `value`.
void check_writable(const Config& value, const std::string& path, int enclosing) {
  switch (value.type()) {
    case Config::Type::number:
      if (!std::isfinite(value.as_double()))
        throw ValueError("to_json: " + describe(path) + " is " + (std::isnan(value.as_double()) ? "NaN" : "infinite") +
                         ", which JSON cannot represent");
      return;
    case Config::Type::string:
      if (!is_valid_utf8(value.as_string())) throw ValueError("to_json: " + describe(path) + " is not valid UTF-8");
      return;
    case Config::Type::list:
    case Config::Type::map:
      check_children(value, path, enclosing + 1);
      return;
    default:
      return;
  }
}

// ---- writing --------------------------------------------------------------------------------------------
// The archive's root is an object; a map's entries are named values in its node, a list is a node made an
// array. saveValue() writes only the value: writeName() first emits the pending key (or, inside an array,
// nothing) and opens the enclosing node.

using JsonArchive = cereal::JSONOutputArchive;

void write_value(JsonArchive& archive, const Config& value);

void write_entries(JsonArchive& archive, const Config& map) {
  for (const Config::Entry& entry : map.items()) {
    archive.setNextName(entry.first.c_str());
    write_value(archive, entry.second);
  }
}

void write_items(JsonArchive& archive, const Config& list) {
  for (const Config& item : list.as_list()) write_value(archive, item);
}

void write_value(JsonArchive& archive, const Config& value) {
  switch (value.type()) {
    case Config::Type::map:
      archive.startNode();
      write_entries(archive, value);
      archive.finishNode();  // an untouched node is written as {}
      return;
    case Config::Type::list:
      archive.startNode();
      archive.makeArray();
      write_items(archive, value);
      archive.finishNode();  // an untouched array node is written as []
      return;
    default:
      break;
  }
  archive.writeName();
  switch (value.type()) {
    case Config::Type::null:
      archive.saveValue(nullptr);
      return;
    case Config::Type::boolean:
      archive.saveValue(value.as_bool());
      return;
    case Config::Type::integer:
      archive.saveValue(value.as_int());
      return;
    // rapidjson writes the shortest text that reads back to the same double, and keeps ".0" on whole numbers.
    case Config::Type::number:
      archive.saveValue(value.as_double());
      return;
    case Config::Type::string:
      archive.saveValue(value.as_string());
      return;
    default:
      return;
  }
}

JsonArchive::Options archive_options(int indent) {
  // The precision is rapidjson's maximum number of decimal places; anything below its default (324) would
  // round small numbers such as 1e-300 to 0.0.
  constexpr int all_decimals = rapidjson::PrettyWriter<rapidjson::OStreamWrapper>::kDefaultMaxDecimalPlaces;
  return JsonArchive::Options(all_decimals, JsonArchive::Options::IndentChar::space, static_cast<unsigned>(indent));
}

std::string write_with_archive(const Config& map, int indent) {
  std::ostringstream out;
  {
    JsonArchive archive(out, archive_options(indent));
    write_entries(archive, map);
  }  // the archive writes the root's closing brace in its destructor
  std::string text = out.str();
  // rapidjson's PrettyWriter breaks lines even with an indent of 0. Every raw newline is layout: strings
  // escape control characters, and no UTF-8 multi-byte sequence contains the byte 0x0A.
  if (indent == 0) text.erase(std::remove(text.begin(), text.end(), '\n'), text.end());
  return text;
}

}  // namespace

std::string to_json(const Config& config, int indent) {
  if (!config.is_map())
    throw ValueError(std::string("to_json: the root must be a map, got ") + Config::type_name(config.type()));
  if (indent < 0 || indent > max_indent)
    throw ValueError("to_json: indent must be 0 to " + std::to_string(max_indent) + ", got " + std::to_string(indent));
  check_writable(config, "", 0);
  // cereal writes nothing at all for an archive whose root object never received a value.
  if (config.size() == 0) return "{}";
  std::string text = write_with_archive(config, indent);
  if (text.size() > max_json_bytes)
    throw ValueError("to_json: the JSON text would be " + std::to_string(text.size()) +
                     " bytes, over max_json_bytes (" + std::to_string(max_json_bytes) + ")");
  return text;
}

// ---- reading --------------------------------------------------------------------------------------------
namespace {

// Numbers arrive as their text (kParseNumbersAsStringsFlag), so an integer literal beyond int64 is
// rejected instead of silently becoming a double, and doubles are converted with std::from_chars (correctly
// rounded, locale-independent). The iterative parser keeps deep nesting off the call stack; there is no
// kParseNanAndInfFlag and no kParseStopWhenDoneFlag, so NaN, Infinity and trailing text are errors.
constexpr unsigned parse_flags =
    rapidjson::kParseIterativeFlag | rapidjson::kParseValidateEncodingFlag | rapidjson::kParseNumbersAsStringsFlag;

std::string quote_excerpt(std::string_view text) {
  constexpr std::size_t longest = 40;
  if (text.size() <= longest) return "'" + std::string(text) + "'";
  return "'" + std::string(text.substr(0, longest)) + "...'";
}

// The SAX handler: builds the Config as rapidjson reports events. Returning false stops the parse with
// kParseErrorTermination, and error() says why.
class ConfigBuilder : public rapidjson::BaseReaderHandler<rapidjson::UTF8<>, ConfigBuilder> {
 public:
  using Size = rapidjson::SizeType;

  bool Null() { return add(Config()); }
  bool Bool(bool value) { return add(Config(value)); }
  bool RawNumber(const char* text, Size length, bool) { return add_number(std::string_view(text, length)); }
  bool String(const char* text, Size length, bool);
  bool StartObject() { return open(Config::map()); }
  bool Key(const char* text, Size length, bool);
  bool EndObject(Size) { return close(); }
  bool StartArray() { return open(Config::list()); }
  bool EndArray(Size) { return close(); }
  // Any other event (Int, Double...) cannot occur with parse_flags.
  bool Default() { return fail("unexpected JSON event"); }

  Config take_root() { return std::move(root_); }
  const std::string& error() const { return error_; }

 private:
  // One open list or map. A map's entries are collected and made into a Config once, when it closes:
  // Config::set searches its keys, which would make a map of n keys cost n^2.
  struct Frame {
    Config value;                          // a list, or an empty map
    std::vector<Config::Entry> entries;    // a map's entries so far
    std::unordered_set<std::string> keys;  // a map's keys so far
  };

  bool fail(std::string message) {
    error_ = std::move(message);
    return false;
  }
  bool add(Config value);
  bool add_number(std::string_view text);
  bool open(Config container);
  bool close();

  std::vector<Frame> stack_;
  Config root_;
  std::string error_;
};

// rapidjson 1.1.0 validates the UTF-8 it reads but decodes an escaped lone low surrogate ("\udc00") into the
// invalid bytes ED B0 80, so decoded strings are validated again.
constexpr const char* lone_surrogate = "a \\u escape is an unpaired UTF-16 surrogate";

bool ConfigBuilder::String(const char* text, Size length, bool) {
  std::string value(text, length);
  if (!is_valid_utf8(value)) return fail(lone_surrogate);
  return add(Config(std::move(value)));
}

bool ConfigBuilder::Key(const char* text, Size length, bool) {
  Frame& frame = stack_.back();
  std::string key(text, length);
  if (!is_valid_utf8(key)) return fail(lone_surrogate);
  // to_json cannot write such a key (cereal takes names as C strings), so parse_json does not accept one.
  if (key.find('\0') != std::string::npos) return fail("a key contains a NUL byte");
  if (!frame.keys.insert(key).second) return fail("duplicate key " + quote_excerpt(key));
  frame.entries.emplace_back(std::move(key), Config());  // its value comes next
  return true;
}

bool ConfigBuilder::add(Config value) {
  if (stack_.empty()) {
    root_ = std::move(value);
    return true;
  }
  Frame& frame = stack_.back();
  if (frame.value.is_list())
    frame.value.push_back(std::move(value));
  else
    frame.entries.back().second = std::move(value);
  return true;
}

bool ConfigBuilder::add_number(std::string_view text) {
  const char* begin = text.data();
  const char* end = begin + text.size();
  if (text.find_first_of(".eE") == std::string_view::npos) {
    std::int64_t value = 0;
    const auto [stop, code] = std::from_chars(begin, end, value);
    if (code != std::errc() || stop != end)
      return fail("integer " + quote_excerpt(text) + " is outside the 64-bit range");
    return add(Config(value));
  }
  double value = 0.0;
  const auto [stop, code] = std::from_chars(begin, end, value);
  // from_chars reports overflow and underflow alike as out of range.
  if (code != std::errc() || stop != end || !std::isfinite(value))
    return fail("number " + quote_excerpt(text) + " is outside the range of a double");
  return add(Config(value));
}

bool ConfigBuilder::open(Config container) {
  if (stack_.size() >= static_cast<std::size_t>(max_json_depth))
    return fail("lists and maps nest deeper than " + std::to_string(max_json_depth));
  stack_.push_back(Frame{std::move(container), {}, {}});
  return true;
}

bool ConfigBuilder::close() {
  Frame& frame = stack_.back();
  Config done = frame.value.is_map() ? Config::map(std::move(frame.entries)) : std::move(frame.value);
  stack_.pop_back();
  return add(std::move(done));
}

[[noreturn]] void fail_at(const std::string& source, std::size_t offset, const std::string& message) {
  throw SerializationError(source + ": invalid JSON at byte " + std::to_string(offset) + ": " + message);
}

Config parse_checked(const std::string& text, const std::string& source) {
  rapidjson::Reader reader;
  rapidjson::MemoryStream stream(text.data(), text.size());
  ConfigBuilder builder;
  rapidjson::ParseResult result;
  try {
    result = reader.Parse<parse_flags>(stream, builder);
  } catch (const SerializationError& error) {  // RAPIDJSON_ASSERT
    throw SerializationError(source + ": " + error.what());
  }
  if (result.IsError()) {
    const rapidjson::ParseErrorCode code = result.Code();
    fail_at(source, result.Offset(),
            code == rapidjson::kParseErrorTermination ? builder.error() : rapidjson::GetParseError_En(code));
  }
  // rapidjson takes a NUL byte for the end of the input, so a document followed by "\0garbage" parses.
  if (stream.Tell() != text.size()) fail_at(source, stream.Tell(), "unexpected NUL byte");
  return builder.take_root();
}

}  // namespace

Config parse_json(const std::string& text, const std::string& source) {
  if (text.size() > max_json_bytes)
    throw SerializationError(source + ": " + std::to_string(text.size()) + " bytes of JSON, over max_json_bytes (" +
                             std::to_string(max_json_bytes) + ")");
  try {
    return parse_checked(text, source);
  } catch (const std::bad_alloc&) {
    throw SerializationError(source + ": out of memory reading " + std::to_string(text.size()) + " bytes of JSON");
  }
}

}  // namespace kiln
