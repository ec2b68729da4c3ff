#include <kiln/layers/initializers.hpp>

#include <cmath>

#include <kiln/core/error.hpp>
#include <kiln/core/op.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/layers/detail/configured.hpp>

namespace kiln {

Fans compute_fans(const Shape& shape) {
  const std::vector<std::int64_t>& dims = shape.dims();
  if (dims.empty()) return {1.0, 1.0};
  if (dims.size() == 1) return {static_cast<double>(dims[0]), static_cast<double>(dims[0])};
  double receptive_field = 1.0;
  for (std::size_t i = 0; i + 2 < dims.size(); ++i) receptive_field *= static_cast<double>(dims[i]);
  return {static_cast<double>(dims[dims.size() - 2]) * receptive_field,
          static_cast<double>(dims.back()) * receptive_field};
}

namespace {

// Keras's VarianceScaling divides by this to undo the shrinkage of a normal truncated at two stddevs.
constexpr double truncated_stddev_correction = 0.87962566103423978;

using Sampler = InitializerClass::Sampler;

Sampler variance_scaling(double scale, const char* mode, bool uniform) {
  const std::string fan_mode = mode;
  return [scale, fan_mode, uniform](std::vector<double>& values, const Fans& fans, const Config&, Rng& rng) {
    double n = fans.fan_in;
    if (fan_mode == "fan_out") n = fans.fan_out;
    if (fan_mode == "fan_avg") n = (fans.fan_in + fans.fan_out) / 2.0;
    const double variance = scale / std::max(1.0, n);
    if (uniform) {
      const double limit = std::sqrt(3.0 * variance);
      for (double& v : values) v = rng.uniform(-limit, limit);
    } else {
      const double stddev = std::sqrt(variance) / truncated_stddev_correction;
      for (double& v : values) v = rng.truncated_normal(0.0, stddev);
    }
  };
}

Sampler fill_with(double value) {
  return [value](std::vector<double>& values, const Fans&, const Config&, Rng&) {
    for (double& v : values) v = value;
  };
}

Sampler normal_distribution(bool truncated) {
  return [truncated](std::vector<double>& values, const Fans&, const Config& args, Rng& rng) {
    const double mean = args.get_double("mean"), stddev = args.get_double("stddev");
    for (double& v : values) v = truncated ? rng.truncated_normal(mean, stddev) : rng.normal(mean, stddev);
  };
}

// Keras's built-in initializers; the short aliases are keras/src/initializers/__init__.py's (Embedding's
// default "uniform" is one).
bool register_builtin_initializers(Registry<InitializerClass>& registry) {
  const Config seed_only = {{"seed", Config()}};
  registry.add("kiln>GlorotUniform", {seed_only, variance_scaling(1.0, "fan_avg", true)});
  registry.add("kiln>GlorotNormal", {seed_only, variance_scaling(1.0, "fan_avg", false)});
  registry.add("kiln>HeUniform", {seed_only, variance_scaling(2.0, "fan_in", true)});
  registry.add("kiln>HeNormal", {seed_only, variance_scaling(2.0, "fan_in", false)});
  registry.add("kiln>LecunUniform", {seed_only, variance_scaling(1.0, "fan_in", true)});
  registry.add("kiln>LecunNormal", {seed_only, variance_scaling(1.0, "fan_in", false)});
  registry.add("kiln>Zeros", {Config::map(), fill_with(0.0)});
  registry.add("kiln>Ones", {Config::map(), fill_with(1.0)});
  registry.add("kiln>Constant",
               {{{"value", 0.0}}, [](std::vector<double>& values, const Fans&, const Config& args, Rng&) {
                  const double value = args.get_double("value");
                  for (double& v : values) v = value;
                }});
  registry.add("kiln>RandomNormal", {{{"mean", 0.0}, {"stddev", 0.05}, {"seed", Config()}}, normal_distribution(false)},
               {"normal"});
  registry.add("kiln>TruncatedNormal",
               {{{"mean", 0.0}, {"stddev", 0.05}, {"seed", Config()}}, normal_distribution(true)});
  registry.add("kiln>RandomUniform",
               {{{"minval", -0.05}, {"maxval", 0.05}, {"seed", Config()}},
                [](std::vector<double>& values, const Fans&, const Config& args, Rng& rng) {
                  const double low = args.get_double("minval"), high = args.get_double("maxval");
                  for (double& v : values) v = rng.uniform(low, high);
                }},
               {"uniform"});
  return true;
}

}  // namespace

// The built-ins register with the registry's first use, not during static initialization: a layer
// made by a static object elsewhere (its default glorot_uniform) may come first.
Registry<InitializerClass>& initializer_registry() {
  static Registry<InitializerClass> registry("initializer");
  [[maybe_unused]] static const bool builtins = register_builtin_initializers(registry);
  return registry;
}

Initializer::Initializer() : Initializer(get("glorot_uniform")) {}

Initializer::Initializer(std::string key, Config arguments)
    : key_(std::move(key)), class_name_(class_part(key_)), arguments_(std::move(arguments)) {}

Initializer Initializer::get(const std::string& name) {
  const Registry<InitializerClass>& registry = initializer_registry();
  const std::string& key = registry.key_of(name);
  return Initializer(key, registry.get(key).defaults);
}

Initializer Initializer::from_argument(ConfigReader& args, const std::string& key, const std::string& fallback) {
  const Config& given = args.value(key);  // read even when null, so finish() knows the key
  return given.is_null() ? get(fallback) : from_config(given);
}

Initializer Initializer::from_config(const Config& config) {
  Initializer result = get(detail::configured_class(config, "an initializer"));
  const std::string who = "initializer " + result.class_name_;
  result.arguments_ = detail::configured_arguments(initializer_registry().get(result.key_).defaults, config, who);
  if (const Config* seed = result.arguments_.find("seed"); seed != nullptr && !seed->is_null())
    seed->as_int("initializer seed");
  return result;
}

Config Initializer::get_config() const { return detail::configured_object(key_, class_name_, arguments_); }

Array Initializer::sample(const Shape& shape, DType dtype, Rng& rng) const {
  return sample(shape, dtype, rng, compute_fans(shape));
}

Array Initializer::sample(const Shape& shape, DType dtype, Rng& rng, const Fans& fans) const {
  std::vector<double> values(static_cast<std::size_t>(shape.num_elements()));
  const InitializerClass& definition = initializer_registry().get(key_);
  const Config* seed = arguments_.find("seed");
  if (seed != nullptr && !seed->is_null()) {
    Rng seeded(static_cast<std::uint64_t>(seed->as_int("initializer seed")));
    definition.sample(values, fans, arguments_, seeded);
  } else {
    definition.sample(values, fans, arguments_, rng);
  }
  return Array::from_vector(values, shape).astype(dtype);
}

bool Initializer::operator==(const Initializer& other) const {
  return key_ == other.key_ && arguments_ == other.arguments_;
}

std::vector<std::string> Initializer::names() {
  std::vector<std::string> result;
  for (const std::string& key : initializer_registry().keys()) result.push_back(to_snake_case(class_part(key)));
  return result;
}

}  // namespace kiln
