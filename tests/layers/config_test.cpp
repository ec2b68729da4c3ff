#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/layers/config.hpp>

using kiln::Config;
using kiln::ConfigError;
using kiln::ConfigReader;
using kiln::Shape;

namespace {
constexpr std::int64_t None = Shape::unknown;
}

TEST_CASE("Config: every value type keeps its type and value", "[layers][config]") {
  CHECK(Config().type() == Config::Type::null);
  CHECK(Config().is_null());
  CHECK(Config(nullptr).is_null());
  CHECK(Config{}.is_null());  // an empty brace list is null, not an empty map

  const Config yes = true;
  CHECK(yes.type() == Config::Type::boolean);
  CHECK(yes.as_bool() == true);

  CHECK(Config(7).type() == Config::Type::integer);
  CHECK(Config(std::int64_t{-3}).as_int() == -3);
  CHECK(Config(std::size_t{9}).as_int() == 9);
  CHECK(Config(std::int8_t{5}).type() == Config::Type::integer);
  CHECK(Config(std::numeric_limits<std::int64_t>::max()).as_int() == std::numeric_limits<std::int64_t>::max());

  CHECK(Config(2.5).type() == Config::Type::number);
  CHECK(Config(0.25f).as_double() == 0.25);

  CHECK(Config("relu").type() == Config::Type::string);
  CHECK(Config(std::string("tanh")).as_string() == "tanh");

  const Config list = Config::list({1, "two", 3.0});
  CHECK(list.is_list());
  CHECK(list.size() == 3);
  CHECK(list.as_list()[1].as_string() == "two");

  const Config map = {{"units", 64}, {"activation", "relu"}};
  CHECK(map.is_map());
  CHECK(map.size() == 2);
  CHECK(Config::map().is_map());
  CHECK(Config::map().size() == 0);
  CHECK(Config::list().is_list());
  CHECK(Config(3).size() == 0);

  CHECK(std::string(Config::type_name(Config::Type::null)) == "null");
  CHECK(std::string(Config::type_name(Config::Type::integer)) == "an integer");
  CHECK(std::string(Config::type_name(Config::Type::map)) == "a map");
}

TEST_CASE("Config: typed getters throw ConfigError naming the key and the expected type", "[layers][config][errors]") {
  const Config config = {{"units", "four"}, {"use_bias", 1}, {"rate", "high"}, {"shape", 3}, {"flag", true}};
  CHECK_THROWS_AS(config.get_int("units"), ConfigError);
  CHECK_THROWS_WITH(config.get_int("units"), Catch::Contains("key 'units'") && Catch::Contains("a string") &&
                                                 Catch::Contains("expected an integer"));
  CHECK_THROWS_WITH(config.get_bool("use_bias"),
                    Catch::Contains("key 'use_bias'") && Catch::Contains("expected a bool"));
  CHECK_THROWS_WITH(config.get_double("rate"), Catch::Contains("key 'rate'") && Catch::Contains("expected a number"));
  CHECK_THROWS_WITH(config.get_string("flag"), Catch::Contains("key 'flag'") && Catch::Contains("expected a string"));
  CHECK_THROWS_WITH(config.get_list("shape"), Catch::Contains("key 'shape'") && Catch::Contains("expected a list"));
  CHECK_THROWS_WITH(config.get_shape("shape"), Catch::Contains("key 'shape'") && Catch::Contains("expected a list"));
  // The message quotes the value it found.
  CHECK_THROWS_WITH(config.get_int("units"), Catch::Contains("\"four\""));

  // A missing key names itself and the nearest key there is.
  CHECK_THROWS_AS(config.at("unit"), ConfigError);
  CHECK_THROWS_WITH(config.get_int("unit"), Catch::Contains("missing key 'unit'") && Catch::Contains("units"));
  // Reading a key of something that is not a map.
  CHECK_THROWS_WITH(Config(3).at("units"), Catch::Contains("units") && Catch::Contains("expected a map"));
  CHECK_THROWS_AS(Config::list().items(), ConfigError);
}

TEST_CASE("Config: getters with defaults use them only when the key is absent or null", "[layers][config]") {
  const Config config = {{"units", 8}, {"name", Config()}, {"activation", "relu"}};
  CHECK(config.get_int("units", 3) == 8);
  CHECK(config.get_int("filters", 3) == 3);
  CHECK(config.get_double("rate", 0.5) == 0.5);
  CHECK(config.get_double("units", 0.5) == 8.0);
  CHECK(config.get_bool("use_bias", true) == true);
  CHECK(config.get_string("activation", "linear") == "relu");
  CHECK(config.get_string("padding", "valid") == "valid");
  // Keras writes null for "use the default" (name, seed): null reads as absent.
  CHECK(config.get_string("name", "dense") == "dense");
  CHECK(config.get_int("name", 4) == 4);
  // A present key of the wrong type still throws.
  CHECK_THROWS_WITH(config.get_bool("units", false),
                    Catch::Contains("key 'units'") && Catch::Contains("expected a bool"));
  CHECK_THROWS_AS(config.get_int("activation", 1), ConfigError);
  // A default on something that is not a map is just the default.
  CHECK(Config().get_int("units", 2) == 2);
}

TEST_CASE("Config: integers and numbers", "[layers][config]") {
  // JSON writers may print 64.0 for an integer: a whole number reads as one, a fraction does not.
  CHECK(Config(64.0).as_int() == 64);
  CHECK(Config(-2.0).as_int() == -2);
  CHECK_THROWS_WITH(Config(64.5).as_int("key 'units'"), Catch::Contains("key 'units'") && Catch::Contains("64.5"));
  CHECK_THROWS_AS(Config(std::nan("")).as_int(), ConfigError);
  CHECK_THROWS_AS(Config(1e300).as_int(), ConfigError);
  CHECK(Config(3).as_double() == 3.0);
  CHECK_THROWS_AS(Config(true).as_int(), ConfigError);
  CHECK_THROWS_AS(Config(true).as_double(), ConfigError);

  // They compare by value, but keep their types (and print differently).
  CHECK(Config(1) == Config(1.0));
  CHECK(Config(1) != Config(1.5));
  CHECK(Config(2.5) == Config(2.5));
  CHECK(Config(1.0).type() == Config::Type::number);
  CHECK(Config(1).to_string() == "1");
  CHECK(Config(1.0).to_string() == "1.0");
  // A bool is not the integer 1, and null is not 0.
  CHECK(Config(true) != Config(1));
  CHECK(Config() != Config(0));
  CHECK(Config("1") != Config(1));
}

TEST_CASE("Config: maps compare equal regardless of key order", "[layers][config]") {
  const Config a = {{"units", 4}, {"activation", "relu"}, {"nested", Config{{"x", 1}, {"y", 2}}}};
  const Config b = {{"nested", Config{{"y", 2}, {"x", 1.0}}}, {"activation", "relu"}, {"units", 4}};
  CHECK(a == b);
  CHECK_FALSE(a != b);
  CHECK(a != b.with("units", 5));
  CHECK(a != b.with("extra", 1));  // one more key
  Config fewer = b;
  fewer.erase("units");
  CHECK(a != fewer);
  CHECK(fewer != a);
  CHECK(Config::map() == Config::map());
  CHECK(Config::map() != Config::list());
  CHECK(Config::map() != Config());
  // Lists compare in order.
  CHECK(Config::list({1, 2}) == Config::list({1.0, 2}));
  CHECK(Config::list({1, 2}) != Config::list({2, 1}));
  CHECK(Config::list({1, 2}) != Config::list({1, 2, 3}));
}

TEST_CASE("Config: set, with and erase keep the order keys were first written in", "[layers][config]") {
  Config config = {{"name", "dense"}, {"units", 4}, {"activation", "relu"}};
  config.set("units", 8);        // replaced in place
  config.set("use_bias", true);  // appended
  CHECK(config.keys() == std::vector<std::string>{"name", "units", "activation", "use_bias"});
  CHECK(config.get_int("units") == 8);
  CHECK(config.to_string() == R"({"name": "dense", "units": 8, "activation": "relu", "use_bias": true})");

  const Config copy = config.with("activation", "tanh").with("seed", 3);
  CHECK(copy.keys() == std::vector<std::string>{"name", "units", "activation", "use_bias", "seed"});
  CHECK(copy.get_string("activation") == "tanh");
  CHECK(config.get_string("activation") == "relu");  // `with` leaves the original alone
  CHECK_FALSE(config.contains("seed"));

  CHECK(config.erase("units"));
  CHECK_FALSE(config.erase("units"));
  CHECK(config.keys() == std::vector<std::string>{"name", "activation", "use_bias"});
  CHECK(config.find("units") == nullptr);
  CHECK(config.find("name") != nullptr);
  CHECK(config.contains("name"));

  // set turns null into a map, and refuses anything else that is not one.
  Config fresh;
  fresh.set("a", 1);
  CHECK(fresh.is_map());
  CHECK(fresh.get_int("a") == 1);
  Config list = Config::list();
  CHECK_THROWS_AS(list.set("a", 1), ConfigError);
  CHECK_FALSE(list.erase("a"));
  CHECK(Config(3).find("a") == nullptr);
  CHECK(Config(3).keys().empty());

  // Chained sets, as get_config implementations write them.
  Config chained;
  chained.set("units", 1).set("activation", "linear");
  CHECK(chained.keys() == std::vector<std::string>{"units", "activation"});
}

TEST_CASE("Config: lists and lists of integers", "[layers][config]") {
  Config list;
  list.push_back(1).push_back("a").push_back(Config());
  CHECK(list.is_list());
  CHECK(list.size() == 3);
  CHECK(list.to_string() == R"([1, "a", null])");
  Config map = Config::map();
  CHECK_THROWS_AS(map.push_back(1), ConfigError);

  const Config ints = Config::from_ints({3, -1, 7});
  CHECK(ints.as_ints() == std::vector<std::int64_t>{3, -1, 7});
  CHECK(ints.to_string() == "[3, -1, 7]");
  CHECK(Config::list({1, 2.0}).as_ints() == std::vector<std::int64_t>{1, 2});
  CHECK_THROWS_WITH(Config::list({1, "x"}).as_ints("key 'axes'"),
                    Catch::Contains("key 'axes'") && Catch::Contains("integers"));
  CHECK_THROWS_WITH(Config(1).as_list("key 'axes'"),
                    Catch::Contains("key 'axes'") && Catch::Contains("expected a list"));
}

TEST_CASE("Config: shapes write unknown dimensions as null and read them back", "[layers][config]") {
  const Shape shape{None, 8, 3};
  const Config config = Config::from_shape(shape);
  CHECK(config.to_string() == "[null, 8, 3]");
  CHECK(config.as_shape() == shape);
  CHECK(Config::from_shape(Shape{}).to_string() == "[]");
  CHECK(Config::from_shape(Shape{}).as_shape() == Shape{});
  CHECK(Config::list({Config(), 4.0}).as_shape() == Shape{None, 4});
  const Config holder = {{"batch_shape", config}};
  CHECK(holder.get_shape("batch_shape") == shape);

  CHECK_THROWS_WITH(Config::list({-3, 2}).as_shape("key 'batch_shape'"),
                    Catch::Contains("key 'batch_shape'") && Catch::Contains("negative"));
  CHECK_THROWS_WITH(Config::list({"x", 2}).as_shape("key 'batch_shape'"),
                    Catch::Contains("key 'batch_shape'") && Catch::Contains("shape"));
  CHECK_THROWS_AS(Config(8).as_shape(), ConfigError);
}

TEST_CASE("Config: to_string writes JSON with escapes, and numbers that stay numbers", "[layers][config]") {
  CHECK(Config().to_string() == "null");
  CHECK(Config(true).to_string() == "true");
  CHECK(Config(false).to_string() == "false");
  CHECK(Config(-12).to_string() == "-12");
  CHECK(Config(std::numeric_limits<std::int64_t>::min()).to_string() == "-9223372036854775808");

  CHECK(Config("plain").to_string() == "\"plain\"");
  CHECK(Config("a \"quoted\" word").to_string() == R"("a \"quoted\" word")");
  CHECK(Config("back\\slash").to_string() == R"("back\\slash")");
  CHECK(Config("line\nbreak\ttab").to_string() == R"("line\nbreak\ttab")");
  CHECK(Config(std::string("bell\x01"
                           "end"))
            .to_string() == R"("bell\u0001end")");
  CHECK(Config(std::string("cr\r")).to_string() == R"("cr\u000d")");
  CHECK(Config("caf\xC3\xA9").to_string() == "\"caf\xC3\xA9\"");  // UTF-8 passes through

  // A number always reads back as a number: whole values keep a ".0".
  CHECK(Config(2.0).to_string() == "2.0");
  CHECK(Config(-0.5).to_string() == "-0.5");
  CHECK(Config(100000.0).to_string() == "100000.0");
  CHECK(Config(0.1).to_string() == "0.1");
  CHECK(Config(1e-7).to_string() == "1e-07");
  CHECK(Config(1e20).to_string() == "1e+20");
  // The shortest text that reads back to the same double.
  CHECK(Config(0.1 + 0.2).to_string() == "0.30000000000000004");
  CHECK(Config(0.001f).to_string() == "0.0010000000474974513");  // a float32 round trip, as Keras writes
  CHECK(Config(std::nan("")).to_string() == "NaN");
  CHECK(Config(std::numeric_limits<double>::infinity()).to_string() == "Infinity");
  CHECK(Config(-std::numeric_limits<double>::infinity()).to_string() == "-Infinity");
  for (double value : {1.0 / 3.0, 123456.789, 6.02214076e23, 5e-324, -1.7976931348623157e308})
    CHECK(std::strtod(Config(value).to_string().c_str(), nullptr) == value);

  const Config nested = {{"k\"ey", Config::list({1, 2.5, Config()})}, {"m", Config::map()}, {"l", Config::list()}};
  CHECK(nested.to_string() == R"({"k\"ey": [1, 2.5, null], "m": {}, "l": []})");
}

TEST_CASE("ConfigReader: reads arguments and rejects unknown ones with the nearest names", "[layers][config][errors]") {
  const Config config = {{"units", 4}, {"activaton", "relu"}, {"name", "fc"}};
  ConfigReader reader(config, "Dense");
  CHECK(reader.who() == "Dense");
  CHECK(reader.has("units"));
  CHECK_FALSE(reader.has("use_bias"));
  CHECK(reader.integer("units") == 4);
  CHECK(reader.text("activation", "linear") == "linear");
  CHECK(reader.boolean("use_bias", true));
  CHECK(reader.number("rate", 0.5) == 0.5);
  CHECK(reader.integer("seed", 7) == 7);
  reader.value("name");
  CHECK_THROWS_AS(reader.finish(), ConfigError);
  CHECK_THROWS_WITH(reader.finish(), Catch::StartsWith("Dense: unknown argument 'activaton'") &&
                                         Catch::Contains("did you mean 'activation'"));

  // Several unknown arguments are all named.
  const Config two = {{"unit", 4}, {"bias", true}};
  ConfigReader several(two, "Dense");
  several.integer("units", 1);
  several.boolean("use_bias", true);
  CHECK_THROWS_WITH(several.finish(),
                    Catch::Contains("unknown arguments 'unit', 'bias'") && Catch::Contains("'units'"));

  // Reading a key twice does not suggest it twice.
  const Config typo = {{"untis", 4}};
  ConfigReader twice(typo, "Dense");
  twice.integer("units", 1);
  twice.integer("units", 1);
  CHECK_THROWS_WITH(twice.finish(), !Catch::Contains("'units', 'units'"));

  // Everything read: no error. A null config has no arguments.
  ConfigReader complete(Config{{"units", 4}}, "Dense");
  complete.integer("units");
  CHECK_NOTHROW(complete.finish());
  ConfigReader empty(Config(), "Dense");
  CHECK(empty.integer("units", 2) == 2);
  CHECK_NOTHROW(empty.finish());
}

TEST_CASE("ConfigReader: required, mistyped and unsupported arguments", "[layers][config][errors]") {
  const Config config = {
      {"units", "four"}, {"kernel_regularizer", "l2"}, {"bias_constraint", Config()}, {"rate", Config()}};
  ConfigReader reader(config, "Dense");
  CHECK_THROWS_WITH(reader.integer("filters"), Catch::Contains("Dense") && Catch::Contains("'filters' is required"));
  CHECK_THROWS_WITH(reader.integer("units"),
                    Catch::Contains("Dense argument 'units'") && Catch::Contains("expected an integer"));
  CHECK_THROWS_WITH(reader.integer("units", 1), Catch::Contains("Dense argument 'units'"));
  CHECK(reader.text("units", "") == "four");
  CHECK(reader.number("rate", 0.25) == 0.25);  // null means the default
  CHECK_THROWS_WITH(reader.unsupported("kernel_regularizer"),
                    Catch::Contains("Dense") && Catch::Contains("'kernel_regularizer' is not supported") &&
                        Catch::Contains("\"l2\""));
  CHECK_NOTHROW(reader.unsupported("bias_constraint"));
  CHECK_NOTHROW(reader.unsupported("activity_regularizer"));
  CHECK_NOTHROW(reader.finish());  // every key was read
  CHECK_THROWS_WITH(reader.fail("units must be positive"), Catch::Equals("Dense: units must be positive"));

  CHECK_THROWS_WITH(ConfigReader(Config::list({1}), "Dense"), Catch::Contains("Dense") && Catch::Contains("map"));
}

TEST_CASE("ConfigReader: reads a temporary config safely", "[layers][config]") {
  // A reader made from a temporary (config.with(...)) must not refer to it after the full expression.
  const Config base = {{"units", 4}};
  ConfigReader reader(base.with("activation", "relu"), "Dense");
  std::string padding(1000, 'x');  // reuse the freed memory
  CHECK(reader.integer("units") == 4);
  CHECK(reader.text("activation", "linear") == "relu");
  CHECK_NOTHROW(reader.finish());
  CHECK(padding.size() == 1000);
}

TEST_CASE("Config: brace lists and vectors of numbers and strings, nested, as a Keras config is written",
          "[layers][config]") {
  // A pair, a shape, a list of lists: what Keras's arguments look like.
  const Config crop = {{"cropping", {23, 0}}, {"name", "crop"}};
  CHECK(crop.at("cropping") == Config::list({23, 0}));
  CHECK(crop.get_string("name") == "crop");
  const Config pad = {{"padding", {{1, 2}, {3, 4}}}};
  CHECK(pad.at("padding") == Config::list({Config::list({1, 2}), Config::list({3, 4})}));
  const Config rates = {{"rates", {0.5, 0.25}}, {"flags", {true, false}}};
  CHECK(rates.at("rates").as_list().at(1).as_double() == 0.25);
  CHECK(rates.at("flags").as_list().at(0).as_bool());
  // Vectors of numbers, strings and Configs.
  const std::vector<std::int64_t> dims = {None, 8};
  CHECK(Config{{"shape", dims}}.at("shape").as_ints() == dims);
  const std::vector<std::string> metrics = {"mae", "mse"};
  const Config compiled = {{"metrics", metrics}};
  CHECK(compiled.at("metrics").as_list().at(1).as_string() == "mse");
  CHECK(Config(std::vector<double>{1.5, 2.0}).as_list().at(0).as_double() == 1.5);
  CHECK(Config(std::vector<Config>{Config("a"), Config(1)}).size() == 2);
  // A single-entry map with a string value stays a map (not a list of two strings).
  const Config named = {{"name", "joined"}};
  CHECK(named.is_map());
  CHECK(named.get_string("name") == "joined");
}

TEST_CASE("ConfigReader: Keras 2's renamed arguments name the Keras 3 one", "[layers][config][errors]") {
  const Config config = {{"lr", 0.01}};
  ConfigReader reader(config, "Adam 'adam'");
  reader.number("learning_rate", 1e-3);
  reader.number("beta_1", 0.9);
  reader.boolean("amsgrad", false);
  CHECK_THROWS_WITH(reader.finish(),
                    "Adam 'adam': unknown argument 'lr'; Keras 3 names it 'learning_rate' (Keras 2's 'lr')");
}
