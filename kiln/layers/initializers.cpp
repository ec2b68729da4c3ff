#include <kiln/layers/initializers.hpp>

#include <cmath>
#include <map>

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

using Sampler = std::function<void(std::vector<double>& values, const Fans& fans, const Config& args, Rng& rng)>;

struct InitializerDef {
  std::string snake_name;
  Config defaults;  // every argument, in Keras's order
  Sampler sampler;
};

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

const std::map<std::string, InitializerDef>& registry() {
  static const std::map<std::string, InitializerDef> table = [] {
    std::map<std::string, InitializerDef> t;
    const Config seed_only = {{"seed", Config()}};
    t["GlorotUniform"] = {"glorot_uniform", seed_only, variance_scaling(1.0, "fan_avg", true)};
    t["GlorotNormal"] = {"glorot_normal", seed_only, variance_scaling(1.0, "fan_avg", false)};
    t["HeUniform"] = {"he_uniform", seed_only, variance_scaling(2.0, "fan_in", true)};
    t["HeNormal"] = {"he_normal", seed_only, variance_scaling(2.0, "fan_in", false)};
    t["LecunUniform"] = {"lecun_uniform", seed_only, variance_scaling(1.0, "fan_in", true)};
    t["LecunNormal"] = {"lecun_normal", seed_only, variance_scaling(1.0, "fan_in", false)};
    t["Zeros"] = {"zeros", Config::map(), fill_with(0.0)};
    t["Ones"] = {"ones", Config::map(), fill_with(1.0)};
    t["Constant"] = {
        "constant", {{"value", 0.0}}, [](std::vector<double>& values, const Fans&, const Config& args, Rng&) {
          const double value = args.get_double("value");
          for (double& v : values) v = value;
        }};
    t["RandomNormal"] = {"random_normal",
                         {{"mean", 0.0}, {"stddev", 0.05}, {"seed", Config()}},
                         [](std::vector<double>& values, const Fans&, const Config& args, Rng& rng) {
                           const double mean = args.get_double("mean"), stddev = args.get_double("stddev");
                           for (double& v : values) v = rng.normal(mean, stddev);
                         }};
    t["TruncatedNormal"] = {"truncated_normal",
                            {{"mean", 0.0}, {"stddev", 0.05}, {"seed", Config()}},
                            [](std::vector<double>& values, const Fans&, const Config& args, Rng& rng) {
                              const double mean = args.get_double("mean"), stddev = args.get_double("stddev");
                              for (double& v : values) v = rng.truncated_normal(mean, stddev);
                            }};
    t["RandomUniform"] = {"random_uniform",
                          {{"minval", -0.05}, {"maxval", 0.05}, {"seed", Config()}},
                          [](std::vector<double>& values, const Fans&, const Config& args, Rng& rng) {
                            const double low = args.get_double("minval"), high = args.get_double("maxval");
                            for (double& v : values) v = rng.uniform(low, high);
                          }};
    return t;
  }();
  return table;
}

// Keras's short aliases (keras/src/initializers/__init__.py): Embedding's default "uniform" is one.
const std::map<std::string, std::string>& aliases() {
  static const std::map<std::string, std::string> table = {{"uniform", "RandomUniform"}, {"normal", "RandomNormal"}};
  return table;
}

const std::string* find_class(const std::string& name) {
  if (const auto alias = aliases().find(name); alias != aliases().end()) return &registry().find(alias->second)->first;
  for (const auto& [class_name, def] : registry())
    if (class_name == name || def.snake_name == name) return &class_name;
  return nullptr;
}

[[noreturn]] void unknown_initializer(const std::string& name) {
  std::vector<std::string> candidates;
  for (const auto& [class_name, def] : registry()) {
    candidates.push_back(def.snake_name);
    candidates.push_back(class_name);
  }
  for (const auto& entry : aliases()) candidates.push_back(entry.first);
  std::string message = "unknown initializer '" + name + "'";
  const std::vector<std::string> near = nearest_names(name, candidates);
  if (!near.empty()) message += "; did you mean '" + near.front() + "'?";
  throw ConfigError(message);
}

}  // namespace

Initializer::Initializer() : Initializer(get("glorot_uniform")) {}

Initializer::Initializer(std::string class_name, Config arguments)
    : class_name_(std::move(class_name)), arguments_(std::move(arguments)) {}

Initializer Initializer::get(const std::string& name) {
  const std::string* class_name = find_class(name);
  if (class_name == nullptr) unknown_initializer(name);
  return Initializer(*class_name, registry().at(*class_name).defaults);
}

Initializer Initializer::from_config(const Config& config) {
  if (config.type() == Config::Type::string) return get(config.as_string());
  if (!config.is_map())
    throw ConfigError("an initializer is a name or {class_name, config}, got " + config.to_string());
  const std::string& name = config.get_string("class_name");
  Initializer result = get(name);
  const Config* arguments = config.find("config");
  if (arguments == nullptr || arguments->is_null()) return result;
  ConfigReader reader(*arguments, "initializer " + result.class_name_);
  for (const Config::Entry& entry : registry().at(result.class_name_).defaults.items()) {
    const Config& given = reader.value(entry.first);
    if (given.is_null() && entry.first != "seed") continue;
    if (entry.first == "seed" && !given.is_null()) given.as_int("initializer seed");
    if (entry.first != "seed") given.as_double("initializer " + result.class_name_ + " argument '" + entry.first + "'");
    result.arguments_.set(entry.first, given);
  }
  reader.finish();
  return result;
}

Config Initializer::get_config() const { return {{"class_name", class_name_}, {"config", arguments_}}; }

Array Initializer::sample(const Shape& shape, DType dtype, Rng& rng) const {
  return sample(shape, dtype, rng, compute_fans(shape));
}

Array Initializer::sample(const Shape& shape, DType dtype, Rng& rng, const Fans& fans) const {
  std::vector<double> values(static_cast<std::size_t>(shape.num_elements()));
  const InitializerDef& def = registry().at(class_name_);
  const Config* seed = arguments_.find("seed");
  if (seed != nullptr && !seed->is_null()) {
    Rng seeded(static_cast<std::uint64_t>(seed->as_int("initializer seed")));
    def.sampler(values, fans, arguments_, seeded);
  } else {
    def.sampler(values, fans, arguments_, rng);
  }
  return Array::from_vector(values, shape).astype(dtype);
}

bool Initializer::operator==(const Initializer& other) const {
  return class_name_ == other.class_name_ && arguments_ == other.arguments_;
}

std::vector<std::string> Initializer::names() {
  std::vector<std::string> result;
  for (const auto& [class_name, def] : registry()) result.push_back(def.snake_name);
  return result;
}

}  // namespace kiln
