#include <kiln/layers/initializers.hpp>

#include <cmath>
#include <optional>

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

void sample_variance_scaling(std::vector<double>& values, const Fans& fans, double scale, const std::string& mode,
                             const std::string& distribution, Rng& rng) {
  double n = fans.fan_in;
  if (mode == "fan_out") n = fans.fan_out;
  if (mode == "fan_avg") n = (fans.fan_in + fans.fan_out) / 2.0;
  const double variance = scale / std::max(1.0, n);
  if (distribution == "uniform") {
    const double limit = std::sqrt(3.0 * variance);
    for (double& v : values) v = rng.uniform(-limit, limit);
  } else if (distribution == "untruncated_normal") {
    for (double& v : values) v = rng.normal(0.0, std::sqrt(variance));
  } else {
    const double stddev = std::sqrt(variance) / truncated_stddev_correction;
    for (double& v : values) v = rng.truncated_normal(0.0, stddev);
  }
}

Sampler variance_scaling(double scale, const char* mode, bool uniform) {
  const std::string fan_mode = mode, distribution = uniform ? "uniform" : "truncated_normal";
  return [scale, fan_mode, distribution](std::vector<double>& values, const Fans& fans, const Config&, Rng& rng) {
    sample_variance_scaling(values, fans, scale, fan_mode, distribution, rng);
  };
}

// Keras's VarianceScaling itself. Keras 2 wrote "normal" for the truncated normal.
void variance_scaling_from_arguments(std::vector<double>& values, const Fans& fans, const Config& args, Rng& rng) {
  const double scale = args.get_double("scale");
  const std::string mode = args.get_string("mode"), distribution = args.get_string("distribution");
  if (!(scale > 0))
    throw ConfigError("initializer VarianceScaling: scale must be positive, got " + std::to_string(scale));
  if (mode != "fan_in" && mode != "fan_out" && mode != "fan_avg")
    throw ConfigError("initializer VarianceScaling: mode must be fan_in, fan_out or fan_avg, got '" + mode + "'");
  if (distribution != "uniform" && distribution != "truncated_normal" && distribution != "untruncated_normal" &&
      distribution != "normal")
    throw ConfigError(
        "initializer VarianceScaling: distribution must be uniform, truncated_normal or "
        "untruncated_normal, got '" +
        distribution + "'");
  sample_variance_scaling(values, fans, scale, mode, distribution, rng);
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

// Keras's Orthogonal: for a weight of rows = prod(shape[:-1]) by cols = shape[-1], the Q of a QR
// decomposition of a (max(rows, cols), min(rows, cols)) standard normal matrix, with R's diagonal made
// positive (Keras multiplies Q's columns by sign(diag(R))), transposed when rows < cols, times gain: the rows or
// the columns, whichever are fewer, are orthonormal. Modified Gram–Schmidt run twice gives that Q (R's
// diagonal is the columns' norms, positive) and keeps it orthogonal to rounding for the sizes of layers.
void sample_orthogonal(std::vector<double>& values, const Shape& shape, const Config& args, Rng& rng) {
  if (shape.rank() < 2)
    throw ConfigError("initializer Orthogonal needs a weight of rank 2 or more, got shape " + shape.to_string());
  const double gain = args.get_double("gain");
  const std::int64_t cols = shape.dim(-1), rows = cols == 0 ? 0 : shape.num_elements() / cols;
  const std::int64_t tall = std::max(rows, cols), wide = std::min(rows, cols);
  std::vector<double> a(static_cast<std::size_t>(tall * wide));  // (tall, wide), row-major as Keras draws it
  for (double& v : a) v = rng.normal(0.0, 1.0);
  auto at = [&](std::int64_t r, std::int64_t c) -> double& { return a[static_cast<std::size_t>(r * wide + c)]; };
  for (std::int64_t c = 0; c < wide; ++c) {
    for (int pass = 0; pass < 2; ++pass)
      for (std::int64_t previous = 0; previous < c; ++previous) {
        double dot = 0.0;
        for (std::int64_t r = 0; r < tall; ++r) dot += at(r, previous) * at(r, c);
        for (std::int64_t r = 0; r < tall; ++r) at(r, c) -= dot * at(r, previous);
      }
    double norm = 0.0;
    for (std::int64_t r = 0; r < tall; ++r) norm += at(r, c) * at(r, c);
    norm = std::sqrt(norm);
    const double inverse = norm > 0.0 ? 1.0 / norm : 0.0;  // sign(0) = 0: Keras zeroes such a column too
    for (std::int64_t r = 0; r < tall; ++r) at(r, c) *= inverse;
  }
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c)
      values[static_cast<std::size_t>(r * cols + c)] = gain * (rows >= cols ? at(r, c) : at(c, r));
}

// Keras's built-in initializers; the short aliases are keras/src/initializers/__init__.py's (Embedding's
// default "uniform" is one).
bool register_builtin_initializers(Registry<InitializerClass>& registry) {
  // Keras 3.16 added input_axes and output_axes: the kernel's axes that count as fan-in and fan-out.
  const Config seed_only = {{"seed", Config()}, {"input_axes", Config()}, {"output_axes", Config()}};
  registry.add("kiln>VarianceScaling", {{{"scale", 1.0},
                                         {"mode", "fan_in"},
                                         {"distribution", "truncated_normal"},
                                         {"seed", Config()},
                                         {"input_axes", Config()},
                                         {"output_axes", Config()}},
                                        variance_scaling_from_arguments});
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
  registry.add("kiln>Orthogonal", {{{"seed", Config()}, {"gain", 1.0}}, nullptr, sample_orthogonal},
               {"OrthogonalInitializer"});
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

namespace {
// Keras's compute_fans with input_axes and output_axes: the products of those dimensions.
Fans fans_from_axes(const Shape& shape, const Config& input_axes, const Config& output_axes) {
  auto product = [&](const Config& axes, const char* what) {
    double result = 1.0;
    for (std::int64_t axis : axes.as_ints(std::string("initializer ") + what)) {
      if (axis < 0) axis += shape.rank();
      if (axis < 0 || axis >= shape.rank())
        throw ConfigError(std::string("initializer ") + what + ": axis out of range for a weight of shape " +
                          shape.to_string());
      result *= static_cast<double>(shape[static_cast<int>(axis)]);
    }
    return result;
  };
  return {product(input_axes, "input_axes"), product(output_axes, "output_axes")};
}
}  // namespace

Array Initializer::sample(const Shape& shape, DType dtype, Rng& rng, const Fans& given_fans) const {
  std::vector<double> values(static_cast<std::size_t>(shape.num_elements()));
  const Config* input_axes = arguments_.find("input_axes");
  const Config* output_axes = arguments_.find("output_axes");
  const bool axes =
      input_axes != nullptr && output_axes != nullptr && !input_axes->is_null() && !output_axes->is_null();
  const Fans fans = axes ? fans_from_axes(shape, *input_axes, *output_axes) : given_fans;
  const InitializerClass& definition = initializer_registry().get(key_);
  const Config* seed = arguments_.find("seed");
  std::optional<Rng> seeded;
  if (seed != nullptr && !seed->is_null()) seeded.emplace(static_cast<std::uint64_t>(seed->as_int("initializer seed")));
  Rng& source = seeded ? *seeded : rng;
  if (definition.sample_shaped)
    definition.sample_shaped(values, shape, arguments_, source);
  else
    definition.sample(values, fans, arguments_, source);
  // Straight into the weight's dtype: no float64 copy of the values beside them (a large embedding's would be).
  Array result(shape, dtype);
  for (std::size_t i = 0; i < values.size(); ++i) result.set_flat(i, values[i]);
  return result;
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
