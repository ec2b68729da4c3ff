#pragma once
// Constraints: projections applied to a weight after every optimizer update, by Keras name and config
// (keras.constraints), each over the weight's `axis` (0 by default: each column of a Dense kernel, the
// weights into one unit):
//   MaxNorm(max_value = 2, axis = 0)     norms above max_value scaled down to it
//   NonNeg()                             negative values set to 0
//   UnitNorm(axis = 0)                   every norm scaled to 1
//   MinMaxNorm(min_value = 0, max_value = 1, rate = 1, axis = 0)
//                                        norms moved toward [min_value, max_value] at `rate`
// Norms are divided with Keras's epsilon 1e-7 added, as Keras does.
//
//   kiln::Dense(64, "relu", {{"kernel_constraint", {{"class_name", "MaxNorm"}, {"config", {{"max_value", 3}}}}}});
#include <functional>
#include <string>

#include <kiln/core/registry.hpp>
#include <kiln/core/tensor.hpp>
#include <kiln/layers/config.hpp>

namespace kiln {

/// A registered constraint class: its arguments with their defaults, and the projection.
struct ConstraintClass {
  /// The constrained value of the weight `w` (a tensor of w's graph, shape and dtype) from `arguments`.
  using Projection = std::function<Tensor(const Tensor& w, const Config& arguments)>;
  Config defaults;        ///< every argument, in Keras's order, with its default
  Projection projection;  ///< what each update's new value becomes
};

/// Every constraint class by key ("kiln>MaxNorm"); "MaxNorm", "max_norm", "non_neg", ... find them too.
Registry<ConstraintClass>& constraint_registry();

/// A constraint: a registered class with every argument set, or none (the default, Keras's None). A value.
class Constraint {
 public:
  Constraint() = default;  ///< none
  /// A registered name with its default arguments: "max_norm", "NonNeg", "unit_norm", "min_max_norm", a key.
  static Constraint get(const std::string& name);
  /// A name, or {"class_name": ..., "config": {...}}; null is none. ConfigError for an unknown class or
  /// argument.
  static Constraint from_config(const Config& config);
  /// A layer's constraint argument `key` (from_config), none when absent or null.
  static Constraint from_argument(ConfigReader& args, const std::string& key);

  /// Whether there is a constraint.
  explicit operator bool() const { return !key_.empty(); }
  /// Keras's form, {"class_name": "MaxNorm", "config": {"max_value": 2, "axis": 0}}; null for none.
  Config get_config() const;
  /// The Keras class name ("MaxNorm"); empty for none.
  const std::string& class_name() const { return class_name_; }
  /// Every argument of the class, defaults filled in.
  const Config& arguments() const { return arguments_; }
  /// The constrained value of `w`. ShapeError for an axis `w` does not have; LayerStateError for none.
  Tensor operator()(const Tensor& w) const;

  /// The same class with equal arguments (or both none).
  bool operator==(const Constraint& other) const;
  /// The negation of operator==.
  bool operator!=(const Constraint& other) const { return !(*this == other); }

 private:
  Constraint(std::string key, Config arguments);

  std::string key_;  ///< "kiln>MaxNorm"; empty for none
  std::string class_name_;
  Config arguments_;
};

}  // namespace kiln

// Registers a ConstraintClass under "Package>Name", optionally with aliases.
#define KILN_REGISTER_CONSTRAINT(key, ...) KILN_AT_STARTUP(::kiln::constraint_registry().add(key, __VA_ARGS__))
