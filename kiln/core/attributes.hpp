#pragma once
// Attributes: the named, typed constants of one op node (axis, perm, alpha, ...). Kernels read them
// during a step, so lookups take string_views and never allocate.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace kiln {

using AttributeValue = std::variant<bool, std::int64_t, double, std::string, std::vector<std::int64_t>>;

class Attributes {
 public:
  Attributes() = default;

  Attributes& set(std::string key, bool value) { return put(std::move(key), value); }
  Attributes& set(std::string key, int value) { return put(std::move(key), std::int64_t{value}); }
  Attributes& set(std::string key, std::int64_t value) { return put(std::move(key), value); }
  Attributes& set(std::string key, double value) { return put(std::move(key), value); }
  Attributes& set(std::string key, const char* value) { return put(std::move(key), std::string(value)); }
  Attributes& set(std::string key, std::string value) { return put(std::move(key), std::move(value)); }
  Attributes& set(std::string key, std::vector<std::int64_t> value) { return put(std::move(key), std::move(value)); }

  bool has(std::string_view key) const { return find(key) != nullptr; }
  /// Typed getters throw ConfigError naming the key and the expected type.
  bool get_bool(std::string_view key) const;
  std::int64_t get_int(std::string_view key) const;
  double get_double(std::string_view key) const;  ///< accepts an int value too
  const std::string& get_string(std::string_view key) const;
  const std::vector<std::int64_t>& get_ints(std::string_view key) const;

  const std::vector<std::pair<std::string, AttributeValue>>& items() const { return items_; }
  std::string to_string() const;  ///< "{axis=-1, keepdims=true}"

 private:
  Attributes& put(std::string key, AttributeValue value);
  const AttributeValue* find(std::string_view key) const;
  const AttributeValue& require(std::string_view key) const;

  std::vector<std::pair<std::string, AttributeValue>> items_;  ///< few entries: a scan beats a map
};

}  // namespace kiln
