#include <kiln/layers/config.hpp>

#include <kiln/core/names.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <unordered_set>

#include <kiln/core/error.hpp>
#include <kiln/core/op.hpp>

namespace kiln {

Config::Config(std::initializer_list<Entry> entries) : type_(Type::map) {
  for (const Entry& entry : entries) set(entry.first, entry.second);
}

Config Config::map(std::vector<Entry> entries) {
  std::unordered_set<std::string_view> keys;
  for (const Entry& entry : entries)
    if (!keys.insert(entry.first).second) throw ConfigError("a config map repeats the key '" + entry.first + "'");
  Config result;
  result.type_ = Type::map;
  result.map_ = std::move(entries);
  return result;
}

Config Config::list(std::vector<Config> items) {
  Config result;
  result.type_ = Type::list;
  result.list_ = std::move(items);
  return result;
}

Config Config::from_shape(const Shape& shape) {
  Config result = list();
  for (std::int64_t dim : shape.dims()) result.push_back(dim == Shape::unknown ? Config() : Config(dim));
  return result;
}

Config Config::from_ints(const std::vector<std::int64_t>& values) {
  Config result = list();
  for (std::int64_t value : values) result.push_back(value);
  return result;
}

const char* Config::type_name(Type type) {
  switch (type) {
    case Type::null:
      return "null";
    case Type::boolean:
      return "a bool";
    case Type::integer:
      return "an integer";
    case Type::number:
      return "a number";
    case Type::string:
      return "a string";
    case Type::list:
      return "a list";
    case Type::map:
      return "a map";
  }
  return "?";
}

void Config::wrong_type(const std::string& what, const char* expected) const {
  throw ConfigError(what + " is " + type_name(type_) + " (" + to_string() + "), expected " + expected);
}

bool Config::as_bool(const std::string& what) const {
  if (type_ != Type::boolean) wrong_type(what, "a bool");
  return bool_;
}

std::int64_t Config::as_int(const std::string& what) const {
  if (type_ == Type::integer) return int_;
  // JSON writers may print 64.0 for an integer; accept a number that is exactly one.
  if (type_ == Type::number && std::floor(double_) == double_ && std::fabs(double_) < 9.0e15)
    return static_cast<std::int64_t>(double_);
  wrong_type(what, "an integer");
}

double Config::as_double(const std::string& what) const {
  if (type_ == Type::number) return double_;
  if (type_ == Type::integer) return static_cast<double>(int_);
  wrong_type(what, "a number");
}

const std::string& Config::as_string(const std::string& what) const {
  if (type_ != Type::string) wrong_type(what, "a string");
  return string_;
}

const std::vector<Config>& Config::as_list(const std::string& what) const {
  if (type_ != Type::list) wrong_type(what, "a list");
  return list_;
}

Shape Config::as_shape(const std::string& what) const {
  std::vector<std::int64_t> dims;
  for (const Config& item : as_list(what)) {
    if (item.is_null()) {
      dims.push_back(Shape::unknown);
      continue;
    }
    const std::int64_t dim = item.as_int(what + " (a shape)");
    if (dim < 0) throw ConfigError(what + " has a negative dimension: " + to_string());
    dims.push_back(dim);
  }
  return Shape(std::move(dims));
}

std::vector<std::int64_t> Config::as_ints(const std::string& what) const {
  std::vector<std::int64_t> values;
  for (const Config& item : as_list(what)) values.push_back(item.as_int(what + " (a list of integers)"));
  return values;
}

bool Config::contains(const std::string& key) const { return find(key) != nullptr; }

const Config* Config::find(const std::string& key) const {
  if (type_ != Type::map) return nullptr;
  for (const Entry& entry : map_)
    if (entry.first == key) return &entry.second;
  return nullptr;
}

const Config& Config::at(const std::string& key) const {
  if (type_ != Type::map) wrong_type("a config read for key '" + key + "'", "a map");
  if (const Config* value = find(key)) return *value;
  std::string message = "missing key '" + key + "'";
  const std::vector<std::string> near = nearest_names(key, keys());
  if (!near.empty()) message += " (has " + near.front() + ")";
  throw ConfigError(message);
}

Config& Config::set(const std::string& key, Config value) {
  if (type_ == Type::null) type_ = Type::map;
  if (type_ != Type::map) wrong_type("a config given key '" + key + "'", "a map");
  for (Entry& entry : map_)
    if (entry.first == key) {
      entry.second = std::move(value);
      return *this;
    }
  map_.emplace_back(key, std::move(value));
  return *this;
}

Config Config::with(const std::string& key, Config value) const {
  Config copy = *this;
  copy.set(key, std::move(value));
  return copy;
}

bool Config::erase(const std::string& key) {
  const auto it = std::find_if(map_.begin(), map_.end(), [&](const Entry& e) { return e.first == key; });
  if (it == map_.end()) return false;
  map_.erase(it);
  return true;
}

std::vector<std::string> Config::keys() const {
  std::vector<std::string> result;
  for (const Entry& entry : map_) result.push_back(entry.first);
  return result;
}

const std::vector<Config::Entry>& Config::items() const {
  if (type_ != Type::map) wrong_type("this config", "a map");
  return map_;
}

bool Config::get_bool(const std::string& key, bool fallback) const {
  const Config* value = find(key);
  return value && !value->is_null() ? value->as_bool(key_label(key)) : fallback;
}

std::int64_t Config::get_int(const std::string& key, std::int64_t fallback) const {
  const Config* value = find(key);
  return value && !value->is_null() ? value->as_int(key_label(key)) : fallback;
}

double Config::get_double(const std::string& key, double fallback) const {
  const Config* value = find(key);
  return value && !value->is_null() ? value->as_double(key_label(key)) : fallback;
}

std::string Config::get_string(const std::string& key, const std::string& fallback) const {
  const Config* value = find(key);
  return value && !value->is_null() ? value->as_string(key_label(key)) : fallback;
}

std::size_t Config::size() const {
  if (type_ == Type::map) return map_.size();
  if (type_ == Type::list) return list_.size();
  return 0;
}

Config& Config::push_back(Config value) {
  if (type_ == Type::null) type_ = Type::list;
  if (type_ != Type::list) wrong_type("a config appended to", "a list");
  list_.push_back(std::move(value));
  return *this;
}

bool Config::operator==(const Config& other) const {
  const bool numeric = (type_ == Type::integer || type_ == Type::number);
  const bool other_numeric = (other.type_ == Type::integer || other.type_ == Type::number);
  if (numeric && other_numeric) {
    if (type_ == Type::integer && other.type_ == Type::integer) return int_ == other.int_;
    return as_double() == other.as_double();
  }
  if (type_ != other.type_) return false;
  switch (type_) {
    case Type::null:
      return true;
    case Type::boolean:
      return bool_ == other.bool_;
    case Type::string:
      return string_ == other.string_;
    case Type::list:
      return list_ == other.list_;
    case Type::map: {
      if (map_.size() != other.map_.size()) return false;
      for (const Entry& entry : map_) {
        const Config* value = other.find(entry.first);
        if (value == nullptr || !(*value == entry.second)) return false;
      }
      return true;
    }
    default:
      return false;
  }
}

namespace {

void append_quoted(std::string& out, const std::string& text) {
  out += '"';
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof buffer, "\\u%04x", c);
          out += buffer;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

void append(std::string& out, const Config& value);

void append_number(std::string& out, double number) {
  if (!std::isfinite(number)) {
    out += std::isnan(number) ? "NaN" : (number > 0 ? "Infinity" : "-Infinity");
    return;
  }
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.17g", number);
  std::string text = buffer;
  // Shortest text that reads back to the same double: try fewer digits first.
  for (int digits = 6; digits < 17; ++digits) {
    std::snprintf(buffer, sizeof buffer, "%.*g", digits, number);
    if (std::strtod(buffer, nullptr) == number) {
      text = buffer;
      break;
    }
  }
  if (text.find_first_of(".eEn") == std::string::npos) text += ".0";  // stays a number, not an integer
  out += text;
}

void append(std::string& out, const Config& value) {
  switch (value.type()) {
    case Config::Type::null:
      out += "null";
      break;
    case Config::Type::boolean:
      out += value.as_bool() ? "true" : "false";
      break;
    case Config::Type::integer:
      out += std::to_string(value.as_int());
      break;
    case Config::Type::number:
      append_number(out, value.as_double());
      break;
    case Config::Type::string:
      append_quoted(out, value.as_string());
      break;
    case Config::Type::list: {
      out += '[';
      bool first = true;
      for (const Config& item : value.as_list()) {
        if (!first) out += ", ";
        first = false;
        append(out, item);
      }
      out += ']';
      break;
    }
    case Config::Type::map: {
      out += '{';
      bool first = true;
      for (const Config::Entry& entry : value.items()) {
        if (!first) out += ", ";
        first = false;
        append_quoted(out, entry.first);
        out += ": ";
        append(out, entry.second);
      }
      out += '}';
      break;
    }
  }
}

}  // namespace

std::string Config::to_string() const {
  std::string out;
  append(out, *this);
  return out;
}

// ---- ConfigReader ------------------------------------------------------------------------------------

ConfigReader::ConfigReader(const Config& config, std::string who) : config_(config), who_(std::move(who)) {
  if (!config_.is_null() && !config_.is_map())
    throw ConfigError(who_ + ": a config must be a map of arguments, got " + config_.to_string());
}

bool ConfigReader::has(const std::string& key) const {
  const Config* value = config_.find(key);
  return value != nullptr && !value->is_null();
}

const Config& ConfigReader::value(const std::string& key) {
  static const Config null_value;
  if (std::find(read_.begin(), read_.end(), key) == read_.end()) read_.push_back(key);
  const Config* found = config_.find(key);
  return found ? *found : null_value;
}

std::int64_t ConfigReader::integer(const std::string& key) {
  const Config& found = value(key);
  if (found.is_null()) fail("the argument '" + key + "' is required");
  return found.as_int(who_ + " argument '" + key + "'");
}

std::int64_t ConfigReader::integer(const std::string& key, std::int64_t fallback) {
  const Config& found = value(key);
  return found.is_null() ? fallback : found.as_int(who_ + " argument '" + key + "'");
}

double ConfigReader::number(const std::string& key, double fallback) {
  const Config& found = value(key);
  return found.is_null() ? fallback : found.as_double(who_ + " argument '" + key + "'");
}

bool ConfigReader::boolean(const std::string& key, bool fallback) {
  const Config& found = value(key);
  return found.is_null() ? fallback : found.as_bool(who_ + " argument '" + key + "'");
}

std::string ConfigReader::text(const std::string& key, const std::string& fallback) {
  const Config& found = value(key);
  return found.is_null() ? fallback : found.as_string(who_ + " argument '" + key + "'");
}

std::vector<std::int64_t> ConfigReader::int_or_ints(const std::string& key, std::int64_t fallback, bool& was_list) {
  const Config& found = value(key);
  was_list = found.is_list();
  const std::string what = who_ + " argument '" + key + "'";
  if (found.is_null()) return {fallback};
  return was_list ? found.as_ints(what) : std::vector<std::int64_t>{found.as_int(what)};
}

std::string ConfigReader::data_format() {
  const std::string format = to_lower_case(text("data_format", "channels_last"));
  if (format != "channels_last" && format != "channels_first")
    fail("data_format must be 'channels_last' or 'channels_first', got '" + format + "'");
  return format;
}

std::vector<std::int64_t> ConfigReader::tuple(const std::string& key, int count, std::int64_t fallback) {
  const Config& found = value(key);
  const auto size = static_cast<std::size_t>(count);
  if (found.is_null()) return std::vector<std::int64_t>(size, fallback);
  const std::string what = who_ + " argument '" + key + "'";
  std::vector<std::int64_t> values =
      found.is_list() ? found.as_ints(what) : std::vector<std::int64_t>(size, found.as_int(what));
  if (values.size() != size)
    fail("argument '" + key + "' must be an int or a list of " + std::to_string(count) + ", got " + found.to_string());
  return values;
}

void ConfigReader::unsupported(const std::string& key) {
  const Config& found = value(key);
  if (!found.is_null()) fail("'" + key + "' is not supported by kiln (got " + found.to_string() + "); leave it null");
}

void ConfigReader::finish() const {
  if (!config_.is_map()) return;
  std::vector<std::string> unknown;
  for (const std::string& key : config_.keys())
    if (std::find(read_.begin(), read_.end(), key) == read_.end()) unknown.push_back(key);
  if (unknown.empty()) return;
  std::string message = "unknown argument";
  message += unknown.size() > 1 ? "s" : "";
  for (std::size_t i = 0; i < unknown.size(); ++i) message += (i ? ", '" : " '") + unknown[i] + "'";
  // Arguments Keras 1 and 2 named otherwise: name the one to use rather than the nearest spelling.
  static const std::vector<std::pair<std::string, std::string>> renamed = {
      {"lr", "learning_rate"},
      {"init", "kernel_initializer"},
      {"output_dim", "units"},
      {"nb_filter", "filters"},
      {"W_regularizer", "kernel_regularizer"},
      {"b_regularizer", "bias_regularizer"},
      {"W_constraint", "kernel_constraint"},
      {"b_constraint", "bias_constraint"},
      {"bias", "use_bias"},
      {"subsample", "strides"},
      {"border_mode", "padding"},
      {"dim_ordering", "data_format"},
      {"dropout_W", "dropout"},
      {"dropout_U", "recurrent_dropout"},
      {"inner_activation", "recurrent_activation"}};
  for (const auto& [old_name, new_name] : renamed)
    if (unknown.front() == old_name && std::find(read_.begin(), read_.end(), new_name) != read_.end()) {
      fail(message + "; Keras 3 names it '" + new_name + "' (Keras 2's '" + old_name + "')");
    }
  message += did_you_mean(nearest_names(unknown.front(), read_));
  fail(message);
}

void ConfigReader::fail(const std::string& message) const { throw ConfigError(who_ + ": " + message); }

namespace detail {
namespace {
thread_local int reading_version = kConfigVersion;
}  // namespace

int config_version() { return reading_version; }
ConfigVersionScope::ConfigVersionScope(int version) : outer_(reading_version) { reading_version = version; }
ConfigVersionScope::~ConfigVersionScope() { reading_version = outer_; }
}  // namespace detail

}  // namespace kiln
