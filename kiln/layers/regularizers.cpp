#include <kiln/layers/regularizers.hpp>

#include <cmath>

#include <kiln/core/array.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/names.hpp>
#include <kiln/layers/detail/configured.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

namespace {

// Keras's validate_float_arg: every factor is a finite number, not negative.
RegularizerClass::Check non_negative(std::vector<const char*> keys) {
  return [keys](const Config& arguments, const std::string& who) {
    for (const char* key : keys) {
      const double value = arguments.get_double(key);
      if (!std::isfinite(value) || value < 0)
        throw ConfigError(who + ": " + key + " must be a non-negative number, got " + std::to_string(value));
    }
  };
}

// factor · ½ Σ_{i≠j} |cos(v_i, v_j)| / (n(n − 1)/2) over the n rows (or columns) v of a matrix: Keras's
// OrthogonalRegularizer, the mean absolute cosine between distinct pairs.
Tensor orthogonal_penalty(const Tensor& x, const Config& arguments) {
  if (x.rank() != 2)
    throw ShapeError("OrthogonalRegularizer needs a matrix (rank 2), got shape " + x.shape().to_string());
  const bool rows = arguments.get_string("mode") == "rows";
  const Tensor unit = ops::l2_normalize(x, {rows ? 1 : 0});
  const Tensor product = rows ? ops::matmul(unit, unit, false, true) : ops::matmul(unit, unit, true, false);
  const std::int64_t size = x.shape()[rows ? 0 : 1];
  Array off_diagonal = Array::full({size, size}, 1.0, x.dtype());
  for (std::int64_t i = 0; i < size; ++i) off_diagonal.set_flat(static_cast<std::size_t>(i * size + i), 0.0);
  const double pairs = static_cast<double>(size) * (static_cast<double>(size) - 1.0) / 2.0;
  const Tensor total = ops::sum(ops::abs(product * ops::constant(x.graph(), off_diagonal, "off_diagonal")));
  return total * (arguments.get_double("factor") * 0.5 / pairs);
}

bool register_builtin_regularizers(Registry<RegularizerClass>& registry) {
  registry.add("kiln>L1", {{{"l1", 0.01}},
                           [](const Tensor& x, const Config& a) { return ops::sum(ops::abs(x)) * a.get_double("l1"); },
                           non_negative({"l1"})});
  registry.add("kiln>L2",
               {{{"l2", 0.01}},
                [](const Tensor& x, const Config& a) { return ops::sum(ops::square(x)) * a.get_double("l2"); },
                non_negative({"l2"})});
  registry.add("kiln>L1L2", {{{"l1", 0.0}, {"l2", 0.0}},
                             [](const Tensor& x, const Config& a) {
                               // As Keras: only the terms whose factor is not 0.
                               Tensor penalty = ops::scalar_like(x, 0.0);
                               if (a.get_double("l1") != 0.0)
                                 penalty = penalty + ops::sum(ops::abs(x)) * a.get_double("l1");
                               if (a.get_double("l2") != 0.0)
                                 penalty = penalty + ops::sum(ops::square(x)) * a.get_double("l2");
                               return penalty;
                             },
                             non_negative({"l1", "l2"})});
  registry.add("kiln>OrthogonalRegularizer",
               {{{"factor", 0.01}, {"mode", "rows"}}, orthogonal_penalty, [](const Config& a, const std::string& who) {
                  non_negative({"factor"})(a, who);
                  const std::string& mode = a.get_string("mode");
                  if (mode != "rows" && mode != "columns")
                    throw ConfigError(who + ": mode must be 'rows' or 'columns', got '" + mode + "'");
                }});
  return true;
}

}  // namespace

// Built-ins register at the registry's first use, as initializers do.
Registry<RegularizerClass>& regularizer_registry() {
  static Registry<RegularizerClass> registry("regularizer");
  [[maybe_unused]] static const bool builtins = register_builtin_regularizers(registry);
  return registry;
}

Regularizer::Regularizer(std::string key, Config arguments)
    : key_(std::move(key)), class_name_(class_part(key_)), arguments_(std::move(arguments)) {}

Regularizer Regularizer::get(const std::string& name) {
  const Registry<RegularizerClass>& registry = regularizer_registry();
  const std::string& key = registry.key_of(name);
  return Regularizer(key, registry.get(key).defaults);
}

Regularizer Regularizer::from_config(const Config& config) {
  if (config.is_null()) return {};
  Regularizer result = get(detail::configured_class(config, "a regularizer"));
  const std::string who = "regularizer " + result.class_name_;
  const RegularizerClass& definition = regularizer_registry().get(result.key_);
  result.arguments_ = detail::configured_arguments(definition.defaults, config, who);
  if (definition.check) definition.check(result.arguments_, who);
  return result;
}

Regularizer Regularizer::from_argument(ConfigReader& args, const std::string& key) {
  return from_config(args.value(key));  // null (Keras's None) or absent: none
}

Config Regularizer::get_config() const {
  if (key_.empty()) return Config();
  return detail::configured_object(key_, class_name_, arguments_);
}

Tensor Regularizer::operator()(const Tensor& x) const {
  if (key_.empty()) throw LayerStateError("an empty Regularizer has no penalty");
  return regularizer_registry().get(key_).penalty(x, arguments_);
}

bool Regularizer::operator==(const Regularizer& other) const {
  return key_ == other.key_ && arguments_ == other.arguments_;
}

}  // namespace kiln
