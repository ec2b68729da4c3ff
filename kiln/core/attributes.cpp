#include <kiln/core/attributes.hpp>

#include <limits>
#include <sstream>

#include <kiln/core/error.hpp>

namespace kiln {

namespace {
const char* type_name(const AttributeValue& value) {
  switch (value.index()) {
    case 0:
      return "bool";
    case 1:
      return "int";
    case 2:
      return "float";
    case 3:
      return "string";
    default:
      return "list of ints";
  }
}

[[noreturn]] void wrong_type(std::string_view key, const char* expected, const AttributeValue& value) {
  throw ConfigError("attribute '" + std::string(key) + "' should be " + expected + ", but is " + type_name(value));
}
}  // namespace

Attributes& Attributes::put(std::string key, AttributeValue value) {
  for (auto& item : items_) {
    if (item.first == key) {
      item.second = std::move(value);
      return *this;
    }
  }
  items_.emplace_back(std::move(key), std::move(value));
  return *this;
}

Attributes& Attributes::set_unsigned(std::string key, unsigned long long value) {
  if (value > static_cast<unsigned long long>(std::numeric_limits<std::int64_t>::max()))
    throw ConfigError("attribute '" + key + "': " + std::to_string(value) + " does not fit a 64-bit signed int");
  return put(std::move(key), static_cast<std::int64_t>(value));
}

const AttributeValue* Attributes::find(std::string_view key) const {
  for (const auto& item : items_)
    if (item.first == key) return &item.second;
  return nullptr;
}

const AttributeValue& Attributes::require(std::string_view key) const {
  const AttributeValue* value = find(key);
  if (value == nullptr) throw ConfigError("missing attribute '" + std::string(key) + "'");
  return *value;
}

bool Attributes::get_bool(std::string_view key) const {
  const AttributeValue& value = require(key);
  if (const bool* b = std::get_if<bool>(&value)) return *b;
  wrong_type(key, "a bool", value);
}

std::int64_t Attributes::get_int(std::string_view key) const {
  const AttributeValue& value = require(key);
  if (const std::int64_t* i = std::get_if<std::int64_t>(&value)) return *i;
  wrong_type(key, "an int", value);
}

double Attributes::get_double(std::string_view key) const {
  const AttributeValue& value = require(key);
  if (const double* d = std::get_if<double>(&value)) return *d;
  if (const std::int64_t* i = std::get_if<std::int64_t>(&value)) return static_cast<double>(*i);
  wrong_type(key, "a float", value);
}

const std::string& Attributes::get_string(std::string_view key) const {
  const AttributeValue& value = require(key);
  if (const std::string* s = std::get_if<std::string>(&value)) return *s;
  wrong_type(key, "a string", value);
}

const std::vector<std::int64_t>& Attributes::get_ints(std::string_view key) const {
  const AttributeValue& value = require(key);
  if (const auto* list = std::get_if<std::vector<std::int64_t>>(&value)) return *list;
  wrong_type(key, "a list of ints", value);
}

std::string Attributes::to_string() const {
  std::ostringstream out;
  out << '{';
  for (std::size_t i = 0; i < items_.size(); ++i) {
    if (i > 0) out << ", ";
    out << items_[i].first << '=';
    std::visit(
        [&](const auto& v) {
          using V = std::decay_t<decltype(v)>;
          if constexpr (std::is_same_v<V, bool>) {
            out << (v ? "true" : "false");
          } else if constexpr (std::is_same_v<V, std::vector<std::int64_t>>) {
            out << '[';
            for (std::size_t j = 0; j < v.size(); ++j) out << (j ? ", " : "") << v[j];
            out << ']';
          } else {
            out << v;
          }
        },
        items_[i].second);
  }
  out << '}';
  return out.str();
}

}  // namespace kiln
