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

/// One attribute's value: a bool, an int, a float, a string or a list of ints.
using AttributeValue = std::variant<bool, std::int64_t, double, std::string, std::vector<std::int64_t>>;

/// The named, typed constants of one op node (axis, perm, alpha, ...), in the order their keys were first
/// set. Kernels read them during a step, so lookups take string_views and never allocate. Setters return
/// the Attributes, to chain: `Attributes().set("axis", -1).set("keepdims", true)`.
class Attributes {
 public:
  Attributes() = default;

  /// Sets `key` to a bool, replacing any earlier value of `key`, whatever its type.
  Attributes& set(std::string key, bool value) { return put(std::move(key), value); }
  /// Sets `key` to an int (stored as std::int64_t).
  Attributes& set(std::string key, int value) { return put(std::move(key), std::int64_t{value}); }
  /// Sets `key` to an int.
  Attributes& set(std::string key, std::int64_t value) { return put(std::move(key), value); }
  /// Sets `key` to an unsigned int, such as a size: `set("units", values.size())`. ConfigError when it does
  /// not fit std::int64_t.
  Attributes& set(std::string key, unsigned value) { return set_unsigned(std::move(key), value); }
  /// Sets `key` to an unsigned int (see above).
  Attributes& set(std::string key, unsigned long value) { return set_unsigned(std::move(key), value); }
  /// Sets `key` to an unsigned int (see above).
  Attributes& set(std::string key, unsigned long long value) { return set_unsigned(std::move(key), value); }
  /// Sets `key` to a float.
  Attributes& set(std::string key, double value) { return put(std::move(key), value); }
  /// Sets `key` to a string (a literal would otherwise become a bool).
  Attributes& set(std::string key, const char* value) { return put(std::move(key), std::string(value)); }
  /// Sets `key` to a string.
  Attributes& set(std::string key, std::string value) { return put(std::move(key), std::move(value)); }
  /// Sets `key` to a list of ints.
  Attributes& set(std::string key, std::vector<std::int64_t> value) { return put(std::move(key), std::move(value)); }

  /// Whether `key` is set.
  bool has(std::string_view key) const { return find(key) != nullptr; }
  /// Typed getters throw ConfigError naming the key and the expected type.
  bool get_bool(std::string_view key) const;
  /// `key`'s int; ConfigError when it is missing or not an int (a bool or a float is not).
  std::int64_t get_int(std::string_view key) const;
  double get_double(std::string_view key) const;  ///< accepts an int value too
  /// `key`'s string; ConfigError when it is missing or of another type.
  const std::string& get_string(std::string_view key) const;
  /// `key`'s list of ints; ConfigError when it is missing or of another type.
  const std::vector<std::int64_t>& get_ints(std::string_view key) const;

  /// Every key and its value, in the order the keys were first set.
  const std::vector<std::pair<std::string, AttributeValue>>& items() const { return items_; }
  std::string to_string() const;  ///< "{axis=-1, keepdims=true}"

 private:
  Attributes& set_unsigned(std::string key, unsigned long long value);
  Attributes& put(std::string key, AttributeValue value);
  const AttributeValue* find(std::string_view key) const;
  const AttributeValue& require(std::string_view key) const;

  std::vector<std::pair<std::string, AttributeValue>> items_;  ///< few entries: a scan beats a map
};

}  // namespace kiln
