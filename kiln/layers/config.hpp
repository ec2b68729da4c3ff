#pragma once
// Config: the JSON-like value tree that every layer, initializer and model round-trips
// (null, bool, integer, number, string, list, map). Maps keep their keys in insertion order, so a
// config prints in the order its class wrote it, and compare equal regardless of order.
//
//   Config dense = {{"units", 64}, {"activation", "relu"}};
//   dense.get_int("units");          // 64
//   dense.get_string("units");       // ConfigError: key 'units' is an integer, expected a string
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <kiln/core/shape.hpp>

namespace kiln {

/// A JSON-like value: null, a bool, an integer, a number, a string, a list or a map, the tree that layers,
/// initializers and models save and read back. Typed reads throw ConfigError naming the value and the type
/// they expected.
class Config {
 public:
  /// The kind of value a Config holds.
  enum class Type { null, boolean, integer, number, string, list, map };
  /// One key of a map and its value.
  using Entry = std::pair<std::string, Config>;

  Config() = default;  ///< null
  /// Null.
  Config(std::nullptr_t) {}
  /// A bool.
  Config(bool value) : type_(Type::boolean), bool_(value) {}
  /// An integer, from any integral type but bool, stored as std::int64_t.
  template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool>, int> = 0>
  Config(T value) : type_(Type::integer), int_(static_cast<std::int64_t>(value)) {}
  /// A number, from float or double; it stays a number even when whole (2.0).
  template <class T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  Config(T value) : type_(Type::number), double_(static_cast<double>(value)) {}
  /// A string.
  Config(const char* value) : type_(Type::string), string_(value) {}
  /// A string.
  Config(std::string value) : type_(Type::string), string_(std::move(value)) {}
  /// A map: {{"units", 64}, {"activation", "relu"}}. An empty brace list {} is null, not an empty map.
  Config(std::initializer_list<Entry> entries);
  /// A list of numbers (or bools) from a brace list, as a Keras config writes a pair or a shape:
  /// {{"cropping", {23, 0}}, {"kernel_size", {3, 5}}}. A list of strings is a std::vector<std::string> (a brace
  /// list of two strings would read as a map's entry) or Config::list.
  template <class T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
  Config(std::initializer_list<T> items) : type_(Type::list) {
    list_.reserve(items.size());
    for (const T& item : items) list_.emplace_back(item);
  }
  /// A list of lists of numbers: {{"padding", {{1, 2}, {3, 4}}}} (Keras's ((top, bottom), (left, right))).
  template <class T, std::enable_if_t<std::is_arithmetic_v<T>, int> = 0>
  Config(std::initializer_list<std::initializer_list<T>> rows) : type_(Type::list) {
    list_.reserve(rows.size());
    for (const std::initializer_list<T>& row : rows) list_.emplace_back(row);
  }
  /// A list of numbers, strings or Configs: std::vector<std::int64_t>{3, -1} -> [3, -1],
  /// std::vector<std::string>{"mae", "mse"} -> ["mae", "mse"].
  template <class T, std::enable_if_t<std::is_constructible_v<Config, const T&> && !std::is_same_v<T, Config>, int> = 0>
  Config(const std::vector<T>& items) : type_(Type::list) {
    list_.reserve(items.size());
    for (const T& item : items) list_.emplace_back(item);
  }
  /// A list of Configs.
  Config(std::vector<Config> items) : type_(Type::list), list_(std::move(items)) {}

  /// A map of these entries, in their order (linear time). ConfigError on a repeated key.
  static Config map(std::vector<Entry> entries = {});
  /// A list of `items`, in their order; list() is an empty list.
  static Config list(std::vector<Config> items = {});
  /// A shape as a list, unknown dimensions as null: (None, 8) -> [null, 8].
  static Config from_shape(const Shape& shape);
  /// A list of integers: {3, -1} -> [3, -1].
  static Config from_ints(const std::vector<std::int64_t>& values);

  /// The kind of value held.
  Type type() const { return type_; }
  /// Whether the value is null.
  bool is_null() const { return type_ == Type::null; }
  /// Whether the value is a map.
  bool is_map() const { return type_ == Type::map; }
  /// Whether the value is a list.
  bool is_list() const { return type_ == Type::list; }
  /// A type as messages name it: "null", "a bool", "an integer", "a number", "a string", "a list", "a map".
  static const char* type_name(Type type);

  // ---- typed reads of this value; `what` names it in the error ("key 'units' of Dense") ------------
  /// The bool; ConfigError for any other type.
  bool as_bool(const std::string& what = "value") const;
  /// The integer; a number that is exactly whole (64.0, as JSON writers may print it) converts. ConfigError
  /// for any other value.
  std::int64_t as_int(const std::string& what = "value") const;
  double as_double(const std::string& what = "value") const;  ///< integers convert
  /// The string; ConfigError for any other type.
  const std::string& as_string(const std::string& what = "value") const;
  /// The items of a list; ConfigError for any other type.
  const std::vector<Config>& as_list(const std::string& what = "value") const;
  Shape as_shape(const std::string& what = "value") const;  ///< [null, 8] -> (None, 8)
  /// A list of integers; ConfigError unless a list whose every item reads as_int().
  std::vector<std::int64_t> as_ints(const std::string& what = "value") const;

  // ---- maps ---------------------------------------------------------------------------------------
  /// Whether this is a map that holds `key` (null values count).
  bool contains(const std::string& key) const;
  const Config* find(const std::string& key) const;  ///< nullptr when absent (or not a map)
  const Config& at(const std::string& key) const;    ///< ConfigError naming the key when absent
  /// Inserts or replaces, keeping the key's first position. Turns null into a map.
  Config& set(const std::string& key, Config value);
  Config with(const std::string& key, Config value) const;  ///< a copy with one key set
  /// Removes `key`; false when it was absent (or this is not a map).
  bool erase(const std::string& key);
  /// The keys of a map, in order; empty for any other type.
  std::vector<std::string> keys() const;
  const std::vector<Entry>& items() const;  ///< ConfigError unless a map

  /// Typed getters by key: ConfigError naming the key and the expected type.
  bool get_bool(const std::string& key) const { return at(key).as_bool(key_label(key)); }
  /// The integer at `key` (as_int()).
  std::int64_t get_int(const std::string& key) const { return at(key).as_int(key_label(key)); }
  /// The number at `key`; an integer converts.
  double get_double(const std::string& key) const { return at(key).as_double(key_label(key)); }
  /// The string at `key`.
  const std::string& get_string(const std::string& key) const { return at(key).as_string(key_label(key)); }
  /// The list at `key`.
  const std::vector<Config>& get_list(const std::string& key) const { return at(key).as_list(key_label(key)); }
  /// The shape at `key` (as_shape()).
  Shape get_shape(const std::string& key) const { return at(key).as_shape(key_label(key)); }
  /// With a default when the key is absent or null, as Keras writes None for "the default" (a present
  /// key of another type still throws).
  bool get_bool(const std::string& key, bool fallback) const;
  /// The integer at `key`, or `fallback` when the key is absent or null.
  std::int64_t get_int(const std::string& key, std::int64_t fallback) const;
  /// The number at `key`, or `fallback` when the key is absent or null.
  double get_double(const std::string& key, double fallback) const;
  /// The string at `key`, or `fallback` when the key is absent or null.
  std::string get_string(const std::string& key, const std::string& fallback) const;

  // ---- lists --------------------------------------------------------------------------------------
  std::size_t size() const;  ///< entries of a map or list, 0 for scalars
  /// Appends `value` and returns this list. Turns null into a list; ConfigError for any other type.
  Config& push_back(Config value);

  /// Structural equality; maps compare as sets of keys, integers equal numbers of the same value.
  bool operator==(const Config& other) const;
  /// The negation of operator==.
  bool operator!=(const Config& other) const { return !(*this == other); }

  /// Compact JSON text, for messages and tests (serialize/ writes files).
  std::string to_string() const;

 private:
  static std::string key_label(const std::string& key) { return "key '" + key + "'"; }
  [[noreturn]] void wrong_type(const std::string& what, const char* expected) const;

  Type type_ = Type::null;
  bool bool_ = false;
  std::int64_t int_ = 0;
  double double_ = 0.0;
  std::string string_;
  std::vector<Config> list_;
  std::vector<Entry> map_;
};

/// Reads a class's constructor arguments from a config and, at the end, rejects keys nobody read, so a
/// typo ("unit") fails with the nearest names instead of being ignored, as Keras does for unknown kwargs.
class ConfigReader {
 public:
  /// `who` names the class in messages: "Dense".
  ConfigReader(const Config& config, std::string who);

  bool has(const std::string& key) const;        ///< present and not null
  const Config& value(const std::string& key);   ///< null when absent
  std::int64_t integer(const std::string& key);  ///< required
  /// The integer argument `key`, or `fallback` when absent or null; ConfigError when of another type.
  std::int64_t integer(const std::string& key, std::int64_t fallback);
  /// The number argument `key` (an integer converts), or `fallback` when absent or null.
  double number(const std::string& key, double fallback);
  /// The bool argument `key`, or `fallback` when absent or null.
  bool boolean(const std::string& key, bool fallback);
  /// The string argument `key`, or `fallback` when absent or null.
  std::string text(const std::string& key, const std::string& fallback);
  /// Keras's standardize_tuple: the argument `key` as `count` ints, given as one int (the same on every
  /// axis) or a list of `count`; `fallback` on every axis when absent or null. ConfigError otherwise.
  std::vector<std::int64_t> tuple(const std::string& key, int count, std::int64_t fallback);
  /// An argument given as one int or as a list of ints (an axis, or several): the list, or {fallback} when
  /// absent or null. `was_list` says which form was given, so get_config writes it back the same way.
  std::vector<std::int64_t> int_or_ints(const std::string& key, std::int64_t fallback, bool& was_list);
  /// Keras's data_format argument (standardize_data_format): "channels_last" (the default, Keras's
  /// image_data_format) or "channels_first", in any case; ConfigError for any other.
  std::string data_format();
  /// A Keras option kiln does not implement: accepted only when absent or null.
  void unsupported(const std::string& key);
  /// Throws ConfigError naming every unknown key and the nearest known ones.
  void finish() const;

  /// Throws ConfigError "<who>: <message>", for a class's own checks of its arguments.
  [[noreturn]] void fail(const std::string& message) const;
  /// The class named in messages ("Dense").
  const std::string& who() const { return who_; }

 private:
  Config config_;  ///< a copy: readers are often made from a temporary (config.with(...))
  std::string who_;
  std::vector<std::string> read_;
};

namespace detail {
/// The version of the layer configs being read. Version 2 made MHAttention's "dimension" heads·key_size,
/// as the layer kiln follows defines it; version 1 files (saved before, their metadata without a
/// "config_version") stored the sequence length there. load_model sets the file's version while it builds
/// the model, so a layer can read an older file's meaning of a key; any other config is current.
inline constexpr int kConfigVersion = 2;
int config_version();  ///< of the configs this thread is reading
class ConfigVersionScope {
 public:
  explicit ConfigVersionScope(int version);
  ~ConfigVersionScope();
  ConfigVersionScope(const ConfigVersionScope&) = delete;
  ConfigVersionScope& operator=(const ConfigVersionScope&) = delete;

 private:
  int outer_;
};
}  // namespace detail

}  // namespace kiln
