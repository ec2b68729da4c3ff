#pragma once
// Regularizers: penalties on a weight (or a layer's output) that training adds to the loss, by Keras name
// and config (keras.regularizers):
//   L1(l1 = 0.01):  l1 · Σ|x|          L2(l2 = 0.01):  l2 · Σx²          L1L2(l1 = 0, l2 = 0): both
//   OrthogonalRegularizer(factor = 0.01, mode = "rows"): factor · the mean |cosine| between distinct rows
//   (or columns) of a matrix
//
//   kiln::Dense(64, "relu", {{"kernel_regularizer", "l2"}});                                   // l2 = 0.01
//   kiln::Dense(64, "relu", {{"kernel_regularizer", {{"class_name", "L1L2"},
//                                                    {"config", {{"l1", 1e-5}, {"l2", 1e-4}}}}}});
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <kiln/core/registry.hpp>
#include <kiln/core/tensor.hpp>
#include <kiln/layers/config.hpp>

namespace kiln {

/// A registered regularizer class: its arguments with their defaults, and the penalty.
///
///   KILN_REGISTER_REGULARIZER("acme>Sparse", {kiln::Config{{"weight", 0.1}},
///       [](const kiln::Tensor& x, const kiln::Config& args) {
///         return kiln::ops::sum(kiln::ops::abs(x)) * args.get_double("weight");
///       }});
struct RegularizerClass {
  /// The penalty on `x`, a () tensor of x's graph and dtype, from `arguments` (every one present).
  using Penalty = std::function<Tensor(const Tensor& x, const Config& arguments)>;
  /// Throws ConfigError (naming `who`) for arguments the class refuses; may be empty.
  using Check = std::function<void(const Config& arguments, const std::string& who)>;
  /// A class of these arguments and penalty; `check` is optional.
  RegularizerClass(Config class_defaults, Penalty class_penalty, Check class_check = {})
      : defaults(std::move(class_defaults)), penalty(std::move(class_penalty)), check(std::move(class_check)) {}
  Config defaults;  ///< every argument, in Keras's order, with its default
  Penalty penalty;  ///< what the regularizer adds to the loss
  Check check;      ///< optional validation of the arguments
};

/// Every regularizer class by key ("kiln>L2"); "L2", "l2" and the snake_case names ("l1l2",
/// "orthogonal_regularizer") find them too.
Registry<RegularizerClass>& regularizer_registry();

/// A regularizer: a registered class with every argument set, or none (the default, Keras's None). A value:
/// copy and compare it freely.
class Regularizer {
 public:
  Regularizer() = default;  ///< none
  /// A registered name with its default arguments: "l1", "L2", "l1l2", "orthogonal_regularizer", or a key.
  static Regularizer get(const std::string& name);
  /// A name, or {"class_name": ..., "config": {...}} as Keras writes it; null is none. ConfigError for an
  /// unknown class or argument, or a value the class refuses (a negative factor).
  static Regularizer from_config(const Config& config);
  /// A layer's regularizer argument `key` (from_config), none when absent or null.
  static Regularizer from_argument(ConfigReader& args, const std::string& key);

  /// Whether there is a regularizer.
  explicit operator bool() const { return !key_.empty(); }
  /// Keras's form, {"class_name": "L2", "config": {"l2": 0.01}}; null for none.
  Config get_config() const;
  /// The Keras class name ("L2"); empty for none.
  const std::string& class_name() const { return class_name_; }
  /// Every argument of the class, defaults filled in.
  const Config& arguments() const { return arguments_; }
  /// The penalty on `x`: a () tensor of x's graph. ShapeError for an input the class cannot take
  /// (OrthogonalRegularizer needs a matrix); LayerStateError for none.
  Tensor operator()(const Tensor& x) const;

  /// The same class with equal arguments (or both none).
  bool operator==(const Regularizer& other) const;
  /// The negation of operator==.
  bool operator!=(const Regularizer& other) const { return !(*this == other); }

 private:
  Regularizer(std::string key, Config arguments);

  std::string key_;  ///< "kiln>L2"; empty for none
  std::string class_name_;
  Config arguments_;
};

}  // namespace kiln

// Registers a RegularizerClass under "Package>Name", optionally with aliases.
#define KILN_REGISTER_REGULARIZER(key, ...) KILN_AT_STARTUP(::kiln::regularizer_registry().add(key, __VA_ARGS__))
