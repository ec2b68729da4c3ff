#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/layers/initializers.hpp>

using kiln::Array;
using kiln::Config;
using kiln::ConfigError;
using kiln::DType;
using kiln::Initializer;
using kiln::Rng;
using kiln::Shape;

namespace {

// Keras's VarianceScaling divides a truncated normal's stddev by this, the stddev of a unit normal
// truncated at two standard deviations, so the samples end up with the stddev the formula asks for.
constexpr double truncation_factor = 0.87962566103423978;

struct Stats {
  double mean = 0, stddev = 0, min = 0, max = 0;
  std::size_t count = 0;
};

Stats stats_of(const Array& values) {
  Stats s;
  s.count = values.size();
  s.min = s.max = values.flat(0);
  double sum = 0;
  for (std::size_t i = 0; i < values.size(); ++i) {
    const double v = values.flat(i);
    sum += v;
    s.min = std::min(s.min, v);
    s.max = std::max(s.max, v);
  }
  s.mean = sum / static_cast<double>(s.count);
  double squares = 0;
  for (std::size_t i = 0; i < values.size(); ++i) squares += (values.flat(i) - s.mean) * (values.flat(i) - s.mean);
  s.stddev = std::sqrt(squares / static_cast<double>(s.count));
  return s;
}

// 60,000 draws for a (200, 300) kernel: fan_in 200, fan_out 300.
const Shape kernel_shape{200, 300};
constexpr double fan_in = 200, fan_out = 300;

Stats sample_stats(const Initializer& initializer, std::uint64_t seed = 11) {
  Rng rng(seed);
  return stats_of(initializer.sample(kernel_shape, DType::float64, rng));
}

// A uniform distribution on [low, high): bounds respected and nearly reached, mean and stddev as expected.
void check_uniform(const Stats& s, double low, double high) {
  INFO("mean " << s.mean << " stddev " << s.stddev << " min " << s.min << " max " << s.max);
  const double stddev = (high - low) / std::sqrt(12.0);
  CHECK(s.min >= low);
  CHECK(s.max <= high);
  CHECK(s.min < low + 0.01 * (high - low));
  CHECK(s.max > high - 0.01 * (high - low));
  CHECK(std::fabs(s.mean - (low + high) / 2) < 5 * stddev / std::sqrt(static_cast<double>(s.count)));
  CHECK(s.stddev == Approx(stddev).epsilon(0.015));
}

// A normal truncated at two of its stddevs (`parameter`), whose samples have stddev parameter * 0.8796.
void check_truncated_normal(const Stats& s, double mean, double parameter) {
  INFO("mean " << s.mean << " stddev " << s.stddev << " min " << s.min << " max " << s.max);
  CHECK(s.min >= mean - 2 * parameter);
  CHECK(s.max <= mean + 2 * parameter);
  CHECK(s.min < mean - 1.95 * parameter);
  CHECK(s.max > mean + 1.95 * parameter);
  CHECK(std::fabs(s.mean - mean) < 5 * parameter / std::sqrt(static_cast<double>(s.count)));
  CHECK(s.stddev == Approx(parameter * truncation_factor).epsilon(0.02));
}

}  // namespace

TEST_CASE("Initializers: every one is found by snake_case and class name, with Keras's config",
          "[layers][initializers]") {
  struct Case {
    const char* snake;
    const char* class_name;
    Config arguments;
  };
  const Config seed = {{"seed", Config()}, {"input_axes", Config()}, {"output_axes", Config()}};  // Keras 3.16's keys
  const std::vector<Case> cases = {
      {"glorot_uniform", "GlorotUniform", seed},
      {"glorot_normal", "GlorotNormal", seed},
      {"he_uniform", "HeUniform", seed},
      {"he_normal", "HeNormal", seed},
      {"lecun_uniform", "LecunUniform", seed},
      {"lecun_normal", "LecunNormal", seed},
      {"zeros", "Zeros", Config::map()},
      {"ones", "Ones", Config::map()},
      {"constant", "Constant", {{"value", 0.0}}},
      {"random_normal", "RandomNormal", {{"mean", 0.0}, {"stddev", 0.05}, {"seed", Config()}}},
      {"truncated_normal", "TruncatedNormal", {{"mean", 0.0}, {"stddev", 0.05}, {"seed", Config()}}},
      {"random_uniform", "RandomUniform", {{"minval", -0.05}, {"maxval", 0.05}, {"seed", Config()}}},
      {"orthogonal", "Orthogonal", {{"seed", Config()}, {"gain", 1.0}}},
      {"variance_scaling",
       "VarianceScaling",
       {{"scale", 1.0},
        {"mode", "fan_in"},
        {"distribution", "truncated_normal"},
        {"seed", Config()},
        {"input_axes", Config()},
        {"output_axes", Config()}}},
  };
  const std::vector<std::string> names = Initializer::names();
  for (const Case& c : cases) {
    INFO(c.snake);
    const Initializer by_snake = Initializer::get(c.snake);
    const Initializer by_class = Initializer::get(c.class_name);
    CHECK(by_snake.class_name() == c.class_name);
    CHECK(by_snake == by_class);
    CHECK(by_snake.arguments() == c.arguments);
    const Config config = by_snake.get_config();
    CHECK(config == Config{{"class_name", c.class_name}, {"config", c.arguments}});
    CHECK(Initializer::from_config(config) == by_snake);
    CHECK(Initializer::from_config(Config(c.snake)) == by_snake);
    CHECK(Initializer::from_config(Config(c.class_name)) == by_snake);
    CHECK(std::find(names.begin(), names.end(), c.snake) != names.end());
  }
  std::size_t builtins = 0;  // this binary registers a user's initializer too (serialize/saving_test.cpp)
  for (const std::string& key : kiln::initializer_registry().keys()) builtins += key.rfind("kiln>", 0) == 0;
  CHECK(builtins == cases.size());
  CHECK(names.size() == kiln::initializer_registry().keys().size());
  CHECK(Initializer() == Initializer::get("glorot_uniform"));
  // Keras's short aliases.
  CHECK(Initializer::get("uniform") == Initializer::get("RandomUniform"));
  CHECK(Initializer::get("normal") == Initializer::get("RandomNormal"));
}

TEST_CASE("Initializers: compute_fans follows Keras", "[layers][initializers]") {
  const auto fans = [](const Shape& shape) {
    const kiln::Fans f = kiln::compute_fans(shape);
    return std::vector<double>{f.fan_in, f.fan_out};
  };
  CHECK(fans(Shape{}) == std::vector<double>{1, 1});
  CHECK(fans(Shape{5}) == std::vector<double>{5, 5});
  CHECK(fans(Shape{3, 4}) == std::vector<double>{3, 4});
  // Leading axes are a receptive field that multiplies both fans (convolution kernels).
  CHECK(fans(Shape{3, 4, 5}) == std::vector<double>{12, 15});
  CHECK(fans(Shape{2, 3, 4, 5}) == std::vector<double>{24, 30});
}

TEST_CASE("Initializers: variance-scaling uniform ones have Keras's limits", "[layers][initializers][statistics]") {
  SECTION("glorot_uniform: limit sqrt(6 / (fan_in + fan_out))") {
    const double limit = std::sqrt(6.0 / (fan_in + fan_out));
    check_uniform(sample_stats(Initializer::get("glorot_uniform")), -limit, limit);
  }
  SECTION("he_uniform: limit sqrt(6 / fan_in)") {
    const double limit = std::sqrt(6.0 / fan_in);
    check_uniform(sample_stats(Initializer::get("he_uniform")), -limit, limit);
  }
  SECTION("lecun_uniform: limit sqrt(3 / fan_in)") {
    const double limit = std::sqrt(3.0 / fan_in);
    check_uniform(sample_stats(Initializer::get("LecunUniform")), -limit, limit);
  }
}

TEST_CASE("Initializers: variance-scaling normal ones are truncated normals with the corrected stddev",
          "[layers][initializers][statistics]") {
  SECTION("glorot_normal: stddev sqrt(2 / (fan_in + fan_out))") {
    const double wanted = std::sqrt(2.0 / (fan_in + fan_out));
    check_truncated_normal(sample_stats(Initializer::get("glorot_normal")), 0.0, wanted / truncation_factor);
  }
  SECTION("he_normal: stddev sqrt(2 / fan_in)") {
    const double wanted = std::sqrt(2.0 / fan_in);
    check_truncated_normal(sample_stats(Initializer::get("he_normal")), 0.0, wanted / truncation_factor);
  }
  SECTION("lecun_normal: stddev sqrt(1 / fan_in)") {
    const double wanted = std::sqrt(1.0 / fan_in);
    check_truncated_normal(sample_stats(Initializer::get("LecunNormal")), 0.0, wanted / truncation_factor);
  }
}

TEST_CASE("Initializers: explicit fans override the shape's", "[layers][initializers][statistics]") {
  // Attention kernels pass their own fans; a (4, 4) weight then draws as if it were much larger.
  Rng rng(3);
  const Array values = Initializer::get("glorot_uniform").sample({40, 50}, DType::float64, rng, kiln::Fans{1000, 2000});
  const double limit = std::sqrt(6.0 / 3000.0);
  const Stats s = stats_of(values);
  CHECK(s.max <= limit);
  CHECK(s.min >= -limit);
  CHECK(s.max > 0.9 * limit);
}

TEST_CASE("Initializers: random and constant ones honour their arguments", "[layers][initializers][statistics]") {
  SECTION("random_normal is a plain (untruncated) normal") {
    const Stats defaults = sample_stats(Initializer::get("random_normal"));
    CHECK(std::fabs(defaults.mean) < 5 * 0.05 / std::sqrt(60000.0));
    CHECK(defaults.stddev == Approx(0.05).epsilon(0.02));
    const Initializer custom =
        Initializer::from_config({{"class_name", "RandomNormal"}, {"config", {{"mean", 1.0}, {"stddev", 2.0}}}});
    CHECK(custom.arguments() == Config{{"mean", 1.0}, {"stddev", 2.0}, {"seed", Config()}});
    const Stats s = sample_stats(custom);
    CHECK(std::fabs(s.mean - 1.0) < 5 * 2.0 / std::sqrt(60000.0));
    CHECK(s.stddev == Approx(2.0).epsilon(0.02));
    CHECK(s.max > 1.0 + 3.5 * 2.0);  // not truncated: 60,000 draws reach past 3.5 stddevs
    CHECK(s.min < 1.0 - 3.5 * 2.0);
  }
  SECTION("truncated_normal stays within two stddevs of its mean") {
    check_truncated_normal(sample_stats(Initializer::get("truncated_normal")), 0.0, 0.05);
    const Initializer custom =
        Initializer::from_config({{"class_name", "TruncatedNormal"}, {"config", {{"mean", 0.5}, {"stddev", 0.1}}}});
    check_truncated_normal(sample_stats(custom), 0.5, 0.1);
  }
  SECTION("random_uniform draws from [minval, maxval)") {
    check_uniform(sample_stats(Initializer::get("random_uniform")), -0.05, 0.05);
    const Initializer custom =
        Initializer::from_config({{"class_name", "RandomUniform"}, {"config", {{"minval", 2}, {"maxval", 3.0}}}});
    check_uniform(sample_stats(custom), 2.0, 3.0);
  }
  SECTION("zeros, ones and constant") {
    const Stats zeros = sample_stats(Initializer::get("zeros"));
    CHECK((zeros.min == 0.0 && zeros.max == 0.0));
    const Stats ones = sample_stats(Initializer::get("Ones"));
    CHECK((ones.min == 1.0 && ones.max == 1.0));
    const Initializer constant = Initializer::from_config({{"class_name", "Constant"}, {"config", {{"value", 2.5}}}});
    const Stats s = sample_stats(constant);
    CHECK((s.min == 2.5 && s.max == 2.5));
    CHECK(constant.get_config() == Config{{"class_name", "Constant"}, {"config", {{"value", 2.5}}}});
    CHECK(Initializer::from_config(constant.get_config()) == constant);
  }
}

TEST_CASE("Initializers: samples have the requested shape and dtype", "[layers][initializers]") {
  Rng rng(1);
  const Array single = Initializer::get("glorot_uniform").sample({3, 4, 5}, DType::float32, rng);
  CHECK(single.dtype() == DType::float32);
  CHECK(single.shape() == Shape{3, 4, 5});
  const Array scalar = Initializer::get("ones").sample(Shape{}, DType::float64, rng);
  CHECK(scalar.dtype() == DType::float64);
  CHECK(scalar.size() == 1);
  CHECK(scalar.flat(0) == 1.0);
  CHECK_THROWS_AS(Initializer::get("zeros").sample({Shape::unknown, 3}, DType::float32, rng), kiln::ShapeError);
}

TEST_CASE("Initializers: seeded ones repeat, unseeded ones follow the Rng they are given",
          "[layers][initializers][rng]") {
  const Shape shape{16, 8};
  for (const char* name : {"GlorotUniform", "HeNormal", "RandomNormal", "RandomUniform", "TruncatedNormal"}) {
    INFO(name);
    const Initializer unseeded = Initializer::get(name);
    Rng a(1), b(1), c(2);
    const Array first = unseeded.sample(shape, DType::float64, a);
    CHECK(first.bitwise_equal(unseeded.sample(shape, DType::float64, b)));  // same seed, same values
    CHECK_FALSE(first.bitwise_equal(unseeded.sample(shape, DType::float64, c)));
    CHECK_FALSE(first.bitwise_equal(unseeded.sample(shape, DType::float64, a)));  // the Rng moved on

    const Initializer seeded = Initializer::from_config({{"class_name", name}, {"config", {{"seed", 7}}}});
    CHECK(seeded.arguments().get_int("seed") == 7);
    CHECK_FALSE(seeded == unseeded);
    Rng d(1), e(99);
    const Array repeat = seeded.sample(shape, DType::float64, d);
    CHECK(repeat.bitwise_equal(seeded.sample(shape, DType::float64, e)));
    CHECK(repeat.bitwise_equal(seeded.sample(shape, DType::float64, d)));  // the given Rng is ignored
    Rng seven(7);
    CHECK(repeat.bitwise_equal(unseeded.sample(shape, DType::float64, seven)));  // drawn from Rng(seed)
    const Initializer other = Initializer::from_config({{"class_name", name}, {"config", {{"seed", 8}}}});
    CHECK_FALSE(repeat.bitwise_equal(other.sample(shape, DType::float64, d)));
    CHECK(Initializer::from_config(seeded.get_config()) == seeded);
  }
}

TEST_CASE("Initializers: Keras's serialized form is accepted", "[layers][initializers][config]") {
  const Config keras = {{"module", "keras.initializers"},
                        {"class_name", "GlorotUniform"},
                        {"config", {{"seed", Config()}}},
                        {"registered_name", Config()}};
  CHECK(Initializer::from_config(keras) == Initializer::get("glorot_uniform"));
  CHECK(Initializer::from_config({{"class_name", "Zeros"}, {"config", Config::map()}}) == Initializer::get("zeros"));
  CHECK(Initializer::from_config({{"class_name", "Ones"}}) == Initializer::get("ones"));
  CHECK(Initializer::from_config({{"class_name", "he_normal"}, {"config", Config()}}) == Initializer::get("HeNormal"));
  // A whole-number seed written as a float is still a seed.
  CHECK(
      Initializer::from_config({{"class_name", "HeNormal"}, {"config", {{"seed", 3.0}}}}).arguments().get_int("seed") ==
      3);
}

TEST_CASE("Initializers: unknown names and arguments fail with the nearest ones", "[layers][initializers][errors]") {
  CHECK_THROWS_AS(Initializer::get("glorot_unifrom"), ConfigError);
  CHECK_THROWS_WITH(Initializer::get("glorot_unifrom"), Catch::Contains("unknown initializer 'glorot_unifrom'") &&
                                                            Catch::Contains("did you mean 'glorot_uniform'"));
  CHECK_THROWS_WITH(Initializer::get("HeNormel"), Catch::Contains("did you mean 'kiln>HeNormal'"));
  CHECK_THROWS_WITH(Initializer::from_config({{"class_name", "Orthogonl"}}), Catch::Contains("'Orthogonl'"));
  CHECK_THROWS_WITH(
      Initializer::from_config({{"class_name", "RandomNormal"}, {"config", {{"stdev", 0.1}}}}),
      Catch::Contains("RandomNormal") && Catch::Contains("'stdev'") && Catch::Contains("did you mean 'stddev'"));
  CHECK_THROWS_WITH(Initializer::from_config({{"class_name", "RandomNormal"}, {"config", {{"mean", "zero"}}}}),
                    Catch::Contains("'mean'") && Catch::Contains("expected a number"));
  CHECK_THROWS_WITH(Initializer::from_config({{"class_name", "GlorotUniform"}, {"config", {{"seed", 1.5}}}}),
                    Catch::Contains("seed") && Catch::Contains("expected an integer"));
  CHECK_THROWS_WITH(Initializer::from_config({{"class_name", "GlorotUniform"}, {"config", Config::list()}}),
                    Catch::Contains("GlorotUniform") && Catch::Contains("map"));
  CHECK_THROWS_WITH(Initializer::from_config(Config(3)), Catch::Contains("class_name"));
  CHECK_THROWS_WITH(Initializer::from_config({{"config", Config::map()}}), Catch::Contains("missing key 'class_name'"));
}

// A user's initializer with a text and a flag argument: each keeps its default's type through a config.
KILN_REGISTER_INITIALIZER("acme>Stripes",
                          {Config{{"pattern", "even"}, {"negate", false}, {"value", 2.0}},
                           [](std::vector<double>& values, const kiln::Fans&, const Config& arguments, Rng&) {
                             const bool even = arguments.get_string("pattern") == "even";
                             const double sign = arguments.get_bool("negate") ? -1.0 : 1.0;
                             for (std::size_t i = 0; i < values.size(); ++i)
                               values[i] = (i % 2 == 0) == even ? sign * arguments.get_double("value") : 0.0;
                           }});

TEST_CASE("Initializers: a user's text and flag arguments are read back from a config",
          "[layers][initializers][config]") {
  const Initializer odd = Initializer::from_config(
      Config{{"class_name", "Stripes"}, {"config", Config{{"pattern", "odd"}, {"negate", true}}}});
  Rng rng(1);
  CHECK(odd.sample({4}, DType::float64, rng).to_vector<double>() == std::vector<double>{0, -2, 0, -2});
  CHECK(Initializer::from_config(odd.get_config()).arguments() == odd.arguments());
  CHECK_THROWS_WITH(Initializer::from_config(Config{{"class_name", "Stripes"}, {"config", Config{{"pattern", 3.0}}}}),
                    Catch::Contains("argument 'pattern'"));
}

TEST_CASE("VarianceScaling: Keras's scale, modes and distributions, fans from input_axes and output_axes",
          "[layers][initializers]") {
  kiln::Rng rng(4);
  auto sample = [&](const Config& arguments, const Shape& shape) {
    return Initializer::from_config(Config{{"class_name", "VarianceScaling"}, {"config", arguments}})
        .sample(shape, kiln::DType::float64, rng);
  };
  auto moments = [](const kiln::Array& a) {
    double sum = 0, squares = 0, largest = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      sum += a.flat(i);
      squares += a.flat(i) * a.flat(i);
      largest = std::max(largest, std::abs(a.flat(i)));
    }
    const double n = static_cast<double>(a.size());
    return std::make_tuple(sum / n, squares / n, largest);
  };
  // (200, 300): fan_avg 250, so the variance is 2 / 250 with scale 2.
  {
    const auto [mean, second, largest] =
        moments(sample({{"scale", 2.0}, {"mode", "fan_avg"}, {"distribution", "uniform"}}, {200, 300}));
    CHECK(std::abs(mean) < 0.001);
    CHECK(second == Approx(2.0 / 250).epsilon(0.02));
    CHECK(largest <= std::sqrt(3.0 * 2.0 / 250));
  }
  {
    const auto [mean, second, largest] =
        moments(sample({{"mode", "fan_out"}, {"distribution", "untruncated_normal"}}, {200, 300}));
    CHECK(std::abs(mean) < 0.001);
    CHECK(second == Approx(1.0 / 300).epsilon(0.02));
    CHECK(largest > 3.5 * std::sqrt(1.0 / 300));  // not truncated: 60,000 draws reach past 3.5 sigma
  }
  {
    // Truncated at two standard deviations of the corrected normal, with the variance kept at scale / fan_in.
    const auto [mean, second, largest] = moments(sample(Config::map(), {200, 300}));
    CHECK(std::abs(mean) < 0.001);
    CHECK(second == Approx(1.0 / 200).epsilon(0.03));
    CHECK(largest <= 2.0 * std::sqrt(1.0 / 200) / 0.87962566103423978);
  }
  // input_axes and output_axes choose the fans: (40, 2, 3) with inputs [0] and outputs [1, 2] is a Dense from
  // 40 to 6 (fan_avg 23), where the default rule would take fans 80 and 120 (fan_avg 100).
  const kiln::Array kernel = sample({{"mode", "fan_avg"},
                                     {"distribution", "uniform"},
                                     {"input_axes", Config::from_ints({0})},
                                     {"output_axes", Config::from_ints({1, -1})}},
                                    {40, 2, 3});
  const double largest = std::get<2>(moments(kernel));
  CHECK(largest <= std::sqrt(3.0 / 23.0));
  CHECK(largest > std::sqrt(3.0 / 100.0));  // beyond the default rule's limit
  CHECK_THROWS_WITH(sample({{"mode", "fan_middle"}}, {2, 2}),
                    Catch::Contains("mode must be fan_in, fan_out or fan_avg"));
  CHECK_THROWS_WITH(sample({{"distribution", "cauchy"}}, {2, 2}), Catch::Contains("distribution must be"));
  CHECK_THROWS_WITH(sample({{"input_axes", Config::from_ints({3})}, {"output_axes", Config::from_ints({0})}}, {2, 2}),
                    Catch::Contains("axis out of range"));
}

TEST_CASE("Orthogonal: the fewer of rows and columns are orthonormal, times gain, for any rank >= 2",
          "[layers][initializers]") {
  kiln::Rng rng(3);
  const Initializer orthogonal = Initializer::from_config(Config{{"class_name", "Orthogonal"}, {"config", {{"gain", 2.0}}}});
  // rows = prod(shape[:-1]), columns = shape[-1], as Keras flattens it.
  for (const Shape& shape : {Shape{7, 3}, Shape{3, 12}, Shape{2, 3, 5}, Shape{4, 4}}) {
    INFO(shape.to_string());
    const kiln::Array w = orthogonal.sample(shape, kiln::DType::float64, rng);
    const std::int64_t cols = shape.dim(-1), rows = shape.num_elements() / cols;
    const bool by_columns = rows >= cols;
    const std::int64_t count = by_columns ? cols : rows, length = by_columns ? rows : cols;
    auto at = [&](std::int64_t vector, std::int64_t i) {
      return by_columns ? w.flat(static_cast<std::size_t>(i * cols + vector)) : w.flat(static_cast<std::size_t>(vector * cols + i));
    };
    for (std::int64_t a = 0; a < count; ++a)
      for (std::int64_t b = 0; b < count; ++b) {
        double dot = 0;
        for (std::int64_t i = 0; i < length; ++i) dot += at(a, i) * at(b, i);
        CHECK(dot == Approx(a == b ? 4.0 : 0.0).margin(1e-12));
      }
  }
  CHECK(Initializer::get("OrthogonalInitializer") == Initializer::get("orthogonal"));
  CHECK_THROWS_WITH(orthogonal.sample(Shape{5}, kiln::DType::float64, rng), Catch::Contains("rank 2 or more"));
  // A seed makes it reproducible.
  const Initializer seeded = Initializer::from_config(Config{{"class_name", "Orthogonal"}, {"config", {{"seed", 5}}}});
  kiln::Rng one(1), two(2);
  CHECK(seeded.sample(Shape{4, 6}, kiln::DType::float64, one).bitwise_equal(seeded.sample(Shape{4, 6}, kiln::DType::float64, two)));
}
