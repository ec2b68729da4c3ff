#pragma once
// Registry<T>: the things of one kind that a name or a config can ask for, each under a key
// "Package>Name", as Keras's register_keras_serializable keys them ("kiln>Dense", "acme>Gated"). Ops,
// layers, optimizers, schedules, initializers, losses, metrics and callbacks each have one, with one set
// of lookup rules; a name may be
//   - the key itself:                          "kiln>Dense", "acme>Gated"
//   - the bare class name:                     "Dense", "Gated"
//   - the class name in snake_case or lower case: "dense", "glorot_uniform", "adam", "rmsprop"
//   - an alias the entry was registered with:  "mse", "uniform"
// A bare spelling that two packages register resolves to kiln's own, and is refused (naming both keys)
// when neither is kiln's. A name that matches nothing is a ConfigError with the nearest names, in the
// form asked: "unknown loss 'msee'; did you mean 'mse'?", "unknown layer 'Dens'; did you mean
// 'kiln>Dense'?". A key (or alias) registered twice keeps the first, and a key that is not "Package>Name"
// is refused; check(), which a test calls, reports both.
//
//   KILN_REGISTER_LAYER("acme>Gated", Gated);           // each kind has its macro, in its own header
//   const LayerClass& gated = layer_registry().get("Gated");
//
// Registries fill during static initialization and are only read afterwards, from any thread.
#include <cstddef>
#include <deque>
#include <functional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace kiln {

namespace detail {
/// The part of a registry that is about names, whatever T is (compiled once, in core/registry.cpp).
class RegistryIndex {
 public:
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  explicit RegistryIndex(std::string kind) : kind_(std::move(kind)) {}

  /// The index the new entry takes, or npos when `key` (or an alias) is taken or is not "Package>Name":
  /// that is recorded for check().
  std::size_t add(const std::string& key, const std::vector<std::string>& aliases);
  /// The entry `name` resolves to under the rules above, or npos; ConfigError for an ambiguous bare name.
  std::size_t find(const std::string& name) const;
  /// ConfigError: "unknown <kind> 'name'" with the nearest names.
  [[noreturn]] void unknown(const std::string& name) const;
  bool contains(const std::string& key) const;  ///< exactly this key
  const std::string& key(std::size_t index) const { return keys_[index]; }
  const std::vector<std::string>& keys() const { return keys_; }
  const std::string& kind() const { return kind_; }
  std::vector<std::string> spellings() const;  ///< every accepted name, sorted
  /// ConfigError listing every refused registration (a key or alias taken, a malformed key).
  void check() const;
  [[noreturn]] static void fail(const std::string& message);  ///< a ConfigError (error.hpp stays out of here)

 private:
  std::string kind_;
  std::vector<std::string> keys_;
  std::vector<std::vector<std::string>> aliases_;
  std::unordered_map<std::string, std::vector<std::size_t>> spellings_;  ///< every accepted name -> entries
  std::vector<std::string> problems_;
};
}  // namespace detail

/// The entries of one kind (ops, layers, losses, ...), each under a key "Package>Name". get() and find()
/// accept the key, the bare class name, its snake_case or lower case, or an alias; a bare name two packages
/// share resolves to kiln's entry, and is a ConfigError naming both keys when neither is kiln's.
template <class T>
class Registry {
 public:
  /// `problem` (optional) says what is wrong with an entry, or "": check() reports the first it finds.
  using Problem = std::function<std::string(const std::string& key, const T& entry)>;
  /// An empty registry; `kind` names its entries in messages ("unknown loss 'msee'").
  explicit Registry(std::string kind, Problem problem = {}) : index_(std::move(kind)), problem_(std::move(problem)) {}
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  /// Registers `value` under "Package>Name" and `aliases`; false when the key or an alias is taken, or the
  /// key is not "Package>Name" (check() reports it).
  bool add(const std::string& key, T value, const std::vector<std::string>& aliases = {}) {
    if (index_.add(key, aliases) == detail::RegistryIndex::npos) return false;
    values_.push_back(std::move(value));
    return true;
  }
  /// The entry `name` resolves to: ConfigError naming it and the nearest names when none.
  const T& get(const std::string& name) const { return values_[resolve(name)]; }
  /// The same, or nullptr.
  const T* find(const std::string& name) const {
    const std::size_t index = index_.find(name);
    return index == detail::RegistryIndex::npos ? nullptr : &values_[index];
  }
  /// The key `name` resolves to ("Dense" -> "kiln>Dense"); ConfigError when none.
  const std::string& key_of(const std::string& name) const { return index_.key(resolve(name)); }
  bool contains(const std::string& key) const { return index_.contains(key); }  ///< exactly this key
  /// The key of the first entry `matches` accepts ("" when none): a class's key from its C++ type.
  template <class Predicate>
  std::string key_where(Predicate matches) const {
    for (std::size_t index = 0; index < values_.size(); ++index)
      if (matches(values_[index])) return key_at(index);
    return "";
  }

  /// How many entries there are. Indices follow registration order and are stable: entries are never removed.
  std::size_t size() const { return values_.size(); }
  /// Entry `index` (not checked against size()).
  const T& at(std::size_t index) const { return values_[index]; }
  /// The key of entry `index`.
  const std::string& key_at(std::size_t index) const { return index_.key(index); }
  /// Every key, in registration order.
  const std::vector<std::string>& keys() const { return index_.keys(); }
  std::vector<std::string> spellings() const { return index_.spellings(); }  ///< every accepted name, sorted
  /// Every entry, in registration order.
  std::vector<const T*> all() const {
    std::vector<const T*> entries;
    for (const T& value : values_) entries.push_back(&value);
    return entries;
  }
  /// ConfigError for a refused registration (a key or alias registered twice, a malformed key) or an entry
  /// with a problem.
  void check() const {
    index_.check();
    if (!problem_) return;
    for (std::size_t index = 0; index < values_.size(); ++index)
      if (const std::string problem = problem_(key_at(index), values_[index]); !problem.empty())
        detail::RegistryIndex::fail(problem);
  }

 private:
  std::size_t resolve(const std::string& name) const {
    const std::size_t index = index_.find(name);
    if (index == detail::RegistryIndex::npos) index_.unknown(name);
    return index;
  }

  detail::RegistryIndex index_;
  Problem problem_;
  std::deque<T> values_;  ///< a deque: references to entries stay valid as more register
};

}  // namespace kiln

#define KILN_CONCAT_INNER(a, b) a##b
#define KILN_CONCAT(a, b) KILN_CONCAT_INNER(a, b)
// Runs `statement` during static initialization: each kind's KILN_REGISTER_* macro is built on it.
#define KILN_AT_STARTUP(statement) \
  [[maybe_unused]] static const bool KILN_CONCAT(kiln_registration_, __LINE__) = [] { return statement; }()
