#include <kiln/layers/initializers.hpp>

#include <cmath>

#include <kiln/core/error.hpp>
#include <kiln/core/op.hpp>
#include <kiln/core/rng.hpp>

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
  return args.has(key) ? from_config(args.value(key)) : get(fallback);
}

Initializer Initializer::from_config(const Config& config) {
  if (config.type() == Config::Type::string) return get(config.as_string());
  if (!config.is_map())
    throw ConfigError("an initializer is a name or {class_name, config}, got " + config.to_string());
  std::string name = config.get_string("class_name");
  if (const Config* registered = config.find("registered_name"); registered != nullptr && !registered->is_null())
    name = registered->as_string("key 'registered_name'");
  Initializer result = get(name);
  const Config* arguments = config.find("config");
  if (arguments == nullptr || arguments->is_null()) return result;
  ConfigReader reader(*arguments, "initializer " + result.class_name_);
  for (const Config::Entry& entry : initializer_registry().get(result.key_).defaults.items()) {
    const Config& given = reader.value(entry.first);
    if (given.is_null() && entry.first != "seed") continue;
    if (entry.first == "seed" && !given.is_null()) given.as_int("initializer seed");
    if (entry.first != "seed") {
      // Each argument keeps its default's type: a number, a string ("mode") or a flag.
      const std::string what = "initializer " + result.class_name_ + " argument '" + entry.first + "'";
      switch (entry.second.type()) {
        case Config::Type::string:
          given.as_string(what);
          break;
        case Config::Type::boolean:
          given.as_bool(what);
          break;
        case Config::Type::integer:
        case Config::Type::number:
          given.as_double(what);
          break;
        default:
          break;
      }
    }
    result.arguments_.set(entry.first, given);
  }
  reader.finish();
  return result;
}

// Keras's form; an initializer of your own also names its key, so it is found again whatever its class name.
Config Initializer::get_config() const {
  Config config = {{"class_name", class_name_}, {"config", arguments_}};
  if (key_.rfind("kiln>", 0) != 0) config.set("registered_name", key_);
  return config;
}

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
