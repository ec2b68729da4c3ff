#include <kiln/layers/constraints.hpp>

#include <kiln/core/error.hpp>
#include <kiln/core/names.hpp>
#include <kiln/layers/detail/configured.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

namespace {

// Keras's backend.epsilon(), added to every norm divided by.
constexpr double epsilon = 1e-7;

// The L2 norms of w over the constraint's axis (an int or a list), kept for broadcasting.
Tensor norms_of(const Tensor& w, const Config& arguments) {
  const Config& axis = arguments.at("axis");
  ops::Axes axes;
  if (axis.is_list()) {
    for (const std::int64_t a : axis.as_ints("constraint axis")) axes.push_back(static_cast<int>(a));
  } else {
    axes.push_back(static_cast<int>(axis.as_int("constraint axis")));
  }
  for (const int a : axes)
    if (a >= w.rank() || a < -w.rank())
      throw ShapeError("constraint axis " + std::to_string(a) + " does not exist in a weight of shape " +
                       w.shape().to_string());
  return ops::sqrt(ops::sum(ops::square(w), axes, /*keepdims=*/true));
}

// w · desired / (ε + norms), as Keras rescales.
Tensor rescaled(const Tensor& w, const Tensor& norms, const Tensor& desired) {
  return w * (desired / (norms + epsilon));
}

Tensor clipped(const Tensor& x, double low, double high) {
  return ops::minimum(ops::maximum(x, ops::scalar_like(x, low)), ops::scalar_like(x, high));
}

bool register_builtin_constraints(Registry<ConstraintClass>& registry) {
  registry.add("kiln>MaxNorm", {{{"max_value", 2}, {"axis", 0}}, [](const Tensor& w, const Config& a) {
                                  const Tensor norms = norms_of(w, a);
                                  return rescaled(w, norms, clipped(norms, 0.0, a.get_double("max_value")));
                                }});
  registry.add("kiln>NonNeg", {Config::map(), [](const Tensor& w, const Config&) {
                                 return ops::maximum(w, ops::scalar_like(w, 0.0));
                               }});
  registry.add("kiln>UnitNorm",
               {{{"axis", 0}}, [](const Tensor& w, const Config& a) { return w / (norms_of(w, a) + epsilon); }});
  registry.add(
      "kiln>MinMaxNorm",
      {{{"min_value", 0.0}, {"max_value", 1.0}, {"rate", 1.0}, {"axis", 0}}, [](const Tensor& w, const Config& a) {
         const Tensor norms = norms_of(w, a);
         const double rate = a.get_double("rate");
         const Tensor desired =
             clipped(norms, a.get_double("min_value"), a.get_double("max_value")) * rate + norms * (1.0 - rate);
         return rescaled(w, norms, desired);
       }});
  return true;
}

}  // namespace

Registry<ConstraintClass>& constraint_registry() {
  static Registry<ConstraintClass> registry("constraint");
  [[maybe_unused]] static const bool builtins = register_builtin_constraints(registry);
  return registry;
}

Constraint::Constraint(std::string key, Config arguments)
    : key_(std::move(key)), class_name_(class_part(key_)), arguments_(std::move(arguments)) {}

Constraint Constraint::get(const std::string& name) {
  const Registry<ConstraintClass>& registry = constraint_registry();
  const std::string& key = registry.key_of(name);
  return Constraint(key, registry.get(key).defaults);
}

Constraint Constraint::from_config(const Config& config) {
  if (config.is_null()) return {};
  Constraint result = get(detail::configured_class(config, "a constraint"));
  result.arguments_ = detail::configured_arguments(constraint_registry().get(result.key_).defaults, config,
                                                   "constraint " + result.class_name_);
  return result;
}

Constraint Constraint::from_argument(ConfigReader& args, const std::string& key) {
  return from_config(args.value(key));  // null (Keras's None) or absent: none
}

Config Constraint::get_config() const {
  if (key_.empty()) return Config();
  return detail::configured_object(key_, class_name_, arguments_);
}

Tensor Constraint::operator()(const Tensor& w) const {
  if (key_.empty()) throw LayerStateError("an empty Constraint has no projection");
  return constraint_registry().get(key_).projection(w, arguments_);
}

bool Constraint::operator==(const Constraint& other) const {
  return key_ == other.key_ && arguments_ == other.arguments_;
}

}  // namespace kiln
