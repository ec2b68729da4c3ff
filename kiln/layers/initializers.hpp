#pragma once
// Initializers: how a layer's weights get their first values, by Keras name and config.
//
//   Initializer::get("glorot_uniform")                       // by name, as in Keras strings
//   Initializer::from_config({{"class_name", "RandomNormal"},
//                             {"config", {{"mean", 0.0}, {"stddev", 0.05}, {"seed", 7}}}})
//
// Randomness is explicit: `sample` draws from the Rng it is given. An initializer with a `seed` in its
// config ignores that Rng and draws from Rng(seed), so it gives the same values every time, as in Keras.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/dtype.hpp>
#include <kiln/core/registry.hpp>
#include <kiln/core/shape.hpp>
#include <kiln/layers/config.hpp>

namespace kiln {

class Rng;

/// Fans of a weight of this shape, as Keras computes them: (in, out) for a matrix; for higher ranks
/// the leading axes are a receptive field that multiplies both.
struct Fans {
  double fan_in = 1.0;   ///< inputs that feed each output unit
  double fan_out = 1.0;  ///< output units that each input feeds
};
/// Keras's fans for a weight of `shape`: (1, 1) for a scalar, (n, n) for a vector, (rows, columns) for a
/// matrix, and for higher ranks the last two axes, each times the product of the leading ones.
Fans compute_fans(const Shape& shape);

/// A registered initializer class: its arguments with their defaults, and how it fills a weight.
///
///   KILN_REGISTER_INITIALIZER("acme>Halves", {kiln::Config::map(),
///       [](std::vector<double>& values, const kiln::Fans&, const kiln::Config&, kiln::Rng&) {
///         for (double& v : values) v = 0.5;
///       }});
///   kiln::Dense(4, "", {{"kernel_initializer", "halves"}});
struct InitializerClass {
  /// Fills `values` (a weight of those fans, flattened) from `arguments` (every one present) and `rng`.
  using Sampler = std::function<void(std::vector<double>& values, const Fans& fans, const Config& arguments, Rng& rng)>;
  /// Fills `values` (a weight of `shape`, flattened) from `arguments` and `rng`: for a class that needs the
  /// whole shape, not only the fans (Orthogonal). When set, it is used instead of `sample`.
  using ShapedSampler =
      std::function<void(std::vector<double>& values, const Shape& shape, const Config& arguments, Rng& rng)>;
  Config defaults;  ///< every argument ("seed" too, when it has one), in Keras's order, with its default
  Sampler sample;   ///< fills a weight's values
  ShapedSampler sample_shaped = nullptr;  ///< fills a weight's values, knowing its shape
};

/// Every initializer class by key ("kiln>GlorotUniform"); "GlorotUniform", "glorot_uniform" and Keras's
/// aliases ("uniform") find it too (core/registry.hpp).
Registry<InitializerClass>& initializer_registry();

/// How a weight gets its first values: a registered initializer class with every argument set, named as in
/// Keras ("glorot_uniform") or read from a Keras config. A value: copy it and compare it freely. Unknown
/// names and arguments throw ConfigError with the nearest ones.
class Initializer {
 public:
  Initializer();  ///< glorot_uniform
  /// A registered name: snake_case ("glorot_uniform"), the class name ("GlorotUniform") or the key.
  static Initializer get(const std::string& name);
  /// A string name, or {"class_name": ..., "config": {...}} as Keras writes it.
  static Initializer from_config(const Config& config);
  /// A layer's initializer argument `key` (a name or a config, as from_config), or the initializer named
  /// `fallback` (Keras's default) when the argument is absent or null.
  static Initializer from_argument(ConfigReader& args, const std::string& key, const std::string& fallback);
  /// {"class_name": "GlorotUniform", "config": {"seed": null}}; a class of your own adds "registered_name".
  Config get_config() const;

  /// The Keras class name: "GlorotUniform".
  const std::string& class_name() const { return class_name_; }
  /// Every argument of the class, defaults filled in: {"seed": null} for GlorotUniform.
  const Config& arguments() const { return arguments_; }

  /// Values for a weight of `shape`. `fans` overrides compute_fans(shape) (attention kernels).
  Array sample(const Shape& shape, DType dtype, Rng& rng) const;
  /// sample() with the fans given instead of compute_fans(shape).
  Array sample(const Shape& shape, DType dtype, Rng& rng, const Fans& fans) const;

  /// The same class with equal arguments (a seed included).
  bool operator==(const Initializer& other) const;

  /// Every registered snake_case name ("glorot_uniform"), for messages and tests.
  static std::vector<std::string> names();

 private:
  Initializer(std::string key, Config arguments);

  std::string key_;         ///< "kiln>GlorotUniform"
  std::string class_name_;  ///< "GlorotUniform"
  Config arguments_;        ///< the class's config, every argument present
};

}  // namespace kiln

// Registers an InitializerClass under "Package>Name", optionally with aliases: KILN_REGISTER_INITIALIZER("acme>Name",
// {...}); or KILN_REGISTER_INITIALIZER("acme>Name", {...}, {"alias"});
#define KILN_REGISTER_INITIALIZER(key, ...) KILN_AT_STARTUP(::kiln::initializer_registry().add(key, __VA_ARGS__))
