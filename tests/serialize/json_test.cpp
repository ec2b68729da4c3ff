#include <catch2/catch.hpp>

#include <cstdint>
#include <cstring>
#include <exception>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/layers/config.hpp>
#include <kiln/serialize/json.hpp>

using Catch::Matchers::Contains;
using kiln::Config;
using kiln::parse_json;
using kiln::SerializationError;
using kiln::to_json;
using kiln::ValueError;

namespace {

using int64_limits = std::numeric_limits<std::int64_t>;
using double_limits = std::numeric_limits<double>;

// Config::operator== ignores key order, equates 1 with 1.0 and 0.0 with -0.0; a round trip must keep all three.
bool identical(const Config& a, const Config& b) {
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Config::Type::null:
      return true;
    case Config::Type::boolean:
      return a.as_bool() == b.as_bool();
    case Config::Type::integer:
      return a.as_int() == b.as_int();
    case Config::Type::number: {
      const double x = a.as_double(), y = b.as_double();
      return std::memcmp(&x, &y, sizeof x) == 0;
    }
    case Config::Type::string:
      return a.as_string() == b.as_string();
    case Config::Type::list: {
      const std::vector<Config>& left = a.as_list();
      const std::vector<Config>& right = b.as_list();
      if (left.size() != right.size()) return false;
      for (std::size_t i = 0; i < left.size(); ++i)
        if (!identical(left[i], right[i])) return false;
      return true;
    }
    case Config::Type::map: {
      const std::vector<Config::Entry>& left = a.items();
      const std::vector<Config::Entry>& right = b.items();
      if (left.size() != right.size()) return false;
      for (std::size_t i = 0; i < left.size(); ++i)
        if (left[i].first != right[i].first || !identical(left[i].second, right[i].second)) return false;
      return true;
    }
  }
  return false;
}

Config sample_numbers() {
  return Config::list({0.1, 1e-7, 1.0 / 3, 1e300, -1e300, -0.0, 0.0, 1.0, -2.5, 1e20, 1e21, 123456789.125,
                       5e-324,                   // the smallest denormal
                       2.2250738585072009e-308,  // the largest denormal
                       double_limits::min(), double_limits::max(), double_limits::lowest()});
}

Config sample_strings() {
  return Config::list({"", "plain", "quote \" backslash \\ slash /", "new\nline\ttab\rreturn\fform\bback",
                       std::string("nul\0byte", 8), "\x01\x1f\x7f controls",
                       "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac \xf0\x9f\x98\x80"});  // é, 日本, 😀
}

Config sample_config() {
  const Config dense = {{"units", 64}, {"activation", "relu"}, {"use_bias", true}, {"rate", 0.1}};
  const Config dropout = {{"rate", 0.5}, {"seed", nullptr}, {"training", false}};
  const Config layers = Config::list({
      Config{{"class_name", "Dense"}, {"config", dense}},
      Config{{"class_name", "Dropout"}, {"config", dropout}},
      Config{{"class_name", "Flatten"}, {"config", Config::map()}, {"inbound", Config::list()}},
  });
  Config config = {{"name", "model"}, {"layers", layers}};
  config.set("integers", Config::list({0, 1, -1, -42, int64_limits::min(), int64_limits::max()}));
  config.set("numbers", sample_numbers());
  config.set("strings", sample_strings());
  config.set("empty_map", Config::map());
  config.set("empty_list", Config::list());
  config.set("nested_empties", Config::list({Config::map(), Config::list(), Config::list({Config::list()})}));
  config.set("key \"with\" \\ escapes\n and \xc3\xa9", "odd key");
  config.set("nothing", nullptr);
  return config;
}

enum class Outcome { parsed, serialization_error, other_error };

Outcome try_parse(const std::string& text, Config* result = nullptr) {
  try {
    Config config = parse_json(text);
    if (result) *result = std::move(config);
    return Outcome::parsed;
  } catch (const SerializationError&) {
    return Outcome::serialization_error;
  } catch (const std::exception&) {
    return Outcome::other_error;
  }
}

std::string nested(const std::string& open, const std::string& inner, const std::string& close, int depth) {
  std::string text;
  for (int i = 0; i < depth; ++i) text += open;
  text += inner;
  for (int i = 0; i < depth; ++i) text += close;
  return text;
}

}  // namespace

TEST_CASE("to_json and parse_json round trip a nested config exactly", "[serialize][json]") {
  const Config config = sample_config();
  for (int indent : {0, 2, 4}) {
    INFO("indent " << indent);
    const std::string text = to_json(config, indent);
    const Config back = parse_json(text);
    CHECK(back == config);
    CHECK(identical(back, config));
    CHECK(to_json(back, indent) == text);  // same keys in the same order, same number spellings
  }
}

TEST_CASE("compact output is one line and indented output parses to the same config", "[serialize][json]") {
  const Config config = sample_config();
  const std::string compact = to_json(config, 0);
  const std::string pretty = to_json(config, 2);
  CHECK(compact.find('\n') == std::string::npos);
  CHECK(pretty.find("\n  \"name\": \"model\"") != std::string::npos);
  CHECK(identical(parse_json(compact), parse_json(pretty)));
  CHECK(to_json(parse_json(pretty), 0) == compact);
  CHECK(to_json(Config{{"a", 1}}, 0) == "{\"a\": 1}");
}

TEST_CASE("key order is kept as written", "[serialize][json]") {
  const std::string text = "{\"zeta\": 1,\"alpha\": {\"y\": 2,\"b\": 3,\"m\": [{\"q\": 4,\"c\": 5}]},\"mid\": 6}";
  const Config config = parse_json(text);
  CHECK(config.keys() == std::vector<std::string>{"zeta", "alpha", "mid"});
  CHECK(to_json(config, 0) == text);
}

TEST_CASE("empty maps and lists are written as braces and brackets", "[serialize][json]") {
  CHECK(to_json(Config::map(), 0) == "{}");
  CHECK(to_json(Config::map(), 2) == "{}");
  CHECK(parse_json("{}").is_map());
  CHECK(parse_json(" [ ] ").is_list());
  const Config config = {
      {"m", Config::map()}, {"l", Config::list()}, {"both", Config::list({Config::map(), Config::list()})}};
  const std::string text = to_json(config, 0);
  CHECK(text == "{\"m\": {},\"l\": [],\"both\": [{},[]]}");
  CHECK(identical(parse_json(text), config));
  CHECK(identical(parse_json(to_json(config, 3)), config));
}

TEST_CASE("numbers keep their type and their exact bits", "[serialize][json]") {
  const Config config = {{"whole", 1.0}, {"one", 1}, {"negative_zero", -0.0}, {"numbers", sample_numbers()}};
  const std::string text = to_json(config, 0);
  CHECK_THAT(text, Contains("\"whole\": 1.0"));
  CHECK_THAT(text, Contains("\"one\": 1,"));
  CHECK_THAT(text, Contains("\"negative_zero\": -0.0"));
  const Config back = parse_json(text);
  CHECK(back.at("whole").type() == Config::Type::number);
  CHECK(back.at("one").type() == Config::Type::integer);
  CHECK(std::signbit(back.at("negative_zero").as_double()));
  CHECK(identical(back, config));

  CHECK(parse_json("1").type() == Config::Type::integer);
  CHECK(parse_json("-0").type() == Config::Type::integer);
  CHECK(parse_json("1.0").type() == Config::Type::number);
  CHECK(parse_json("1E2").type() == Config::Type::number);
  CHECK(parse_json("1E2").as_double() == 100.0);
  CHECK(parse_json("0.1").as_double() == 0.1);
  CHECK(parse_json("9223372036854775807").as_int() == int64_limits::max());
  CHECK(parse_json("-9223372036854775808").as_int() == int64_limits::min());
  CHECK(parse_json("4.9406564584124654e-324").as_double() == 5e-324);
}

TEST_CASE("strings with escapes, control characters and unicode round trip", "[serialize][json]") {
  const Config config = {{"strings", sample_strings()}};
  CHECK(identical(parse_json(to_json(config, 0)), config));
  CHECK(identical(parse_json(to_json(config, 2)), config));
  CHECK(parse_json("\"caf\\u00e9 \\ud83d\\ude00 \\/ \\\"\"").as_string() == "caf\xc3\xa9 \xf0\x9f\x98\x80 / \"");
  CHECK(parse_json("\"a\\u0000b\"").as_string() == std::string("a\0b", 3));
}

TEST_CASE("parse_json accepts any root type", "[serialize][json]") {
  CHECK(parse_json("null").is_null());
  CHECK(parse_json(" true ").as_bool());
  CHECK(parse_json("\"text\"").as_string() == "text");
  CHECK(parse_json("[1, 2.5]").size() == 2);
  CHECK(parse_json("\t{\"a\": 1}\r\n").get_int("a") == 1);
}

TEST_CASE("parse_json rejects malformed text naming the source and the byte", "[serialize][json]") {
  const std::vector<std::string> malformed = {
      "",
      "   ",
      "{",
      "{\"a\": 1",
      "{\"a\": 1 \"b\": 2}",
      "{\"a\" 1}",
      "[1 2]",
      "[1,]",
      "{\"a\": 1,}",
      "hello",
      "{\"a\": yes}",
      "{'a': 1}",
      "['a']",
      "{a: 1}",
      "[01]",
      "[1.]",
      "[.5]",
      "[1e]",
      "[+1]",
      "[0x10]",
      "\"open",
      "\"bad \\x escape\"",
      "\"tab\tinside\"",
      "[\"\\ud800\"]",
      "// c\n{}",
      "{\"a\": 1} // comment",
      "\xef\xbb\xbf{}",
  };
  for (const std::string& text : malformed) {
    INFO("text: " << text);
    CHECK_THROWS_AS(parse_json(text), SerializationError);
  }
  CHECK_THROWS_WITH(parse_json("{\"a\": tru}", "model.json"),
                    Contains("model.json") && Contains("at byte") && Contains("Invalid value"));
  CHECK_THROWS_WITH(parse_json("[1, 2"), Contains("JSON text") && Contains("byte 5"));
}

TEST_CASE("every truncation of a valid document is rejected", "[serialize][json]") {
  const std::string text = to_json(sample_config(), 0);
  int wrong = 0;
  for (std::size_t length = 0; length < text.size(); ++length) {
    if (try_parse(text.substr(0, length)) != Outcome::serialization_error) {
      UNSCOPED_INFO("prefix of " << length << " bytes did not throw SerializationError");
      ++wrong;
    }
  }
  CHECK(wrong == 0);
  CHECK(try_parse(text) == Outcome::parsed);
}

TEST_CASE("non-finite and out-of-range numbers are rejected", "[serialize][json]") {
  for (const char* text :
       {"[NaN]", "[nan]", "[Infinity]", "[-Infinity]", "[Inf]", "[-inf]", "[1e400]", "[-1e400]", "[1.8e308]",
        "[1e-400]", "[0.0000001e-320]", "[1000000000000000000000000000000000000000e300]"}) {
    INFO("text: " << text);
    CHECK_THROWS_AS(parse_json(text), SerializationError);
  }
  CHECK_THROWS_WITH(parse_json("{\"lr\": 1.8e308}", "opt.json"), Contains("opt.json") && Contains("1.8e308"));
  CHECK(parse_json("[1.7976931348623157e308]").as_list()[0].as_double() == double_limits::max());
}

TEST_CASE("integers outside int64 are rejected", "[serialize][json]") {
  for (const char* text : {"9223372036854775808", "-9223372036854775809", "18446744073709551615",
                           "18446744073709551616", "123456789012345678901234567890"}) {
    INFO("text: " << text);
    CHECK_THROWS_WITH(parse_json(text), Contains("outside the 64-bit range"));
  }
  CHECK(parse_json("9223372036854775808.0").type() == Config::Type::number);  // written as a number: fine
}

TEST_CASE("nesting deeper than max_json_depth is rejected without recursion", "[serialize][json]") {
  const int depth = kiln::max_json_depth;
  CHECK(try_parse(nested("[", "1", "]", depth)) == Outcome::parsed);
  CHECK(try_parse(nested("{\"a\":", "1", "}", depth)) == Outcome::parsed);
  CHECK_THROWS_WITH(parse_json(nested("[", "1", "]", depth + 1)), Contains("nest deeper than 128"));
  CHECK_THROWS_AS(parse_json(nested("{\"a\":", "1", "}", depth + 1)), SerializationError);
  CHECK_THROWS_AS(parse_json(std::string(100000, '[')), SerializationError);
  CHECK_THROWS_AS(parse_json(nested("[", "", "]", 100000)), SerializationError);
  CHECK_THROWS_AS(parse_json(nested("{\"k\":", "0", "}", 100000)), SerializationError);
}

TEST_CASE("duplicate keys in one object are rejected", "[serialize][json]") {
  CHECK_THROWS_WITH(parse_json("{\"a\": 1, \"a\": 2}", "dup.json"),
                    Contains("dup.json") && Contains("duplicate key 'a'"));
  CHECK_THROWS_AS(parse_json("{\"x\": {\"a\": 1, \"b\": [], \"a\": null}}"), SerializationError);
  CHECK_THROWS_AS(parse_json("{\"\\u0061\": 1, \"a\": 2}"), SerializationError);  // same key, escaped
  CHECK(parse_json("{\"a\": {\"a\": 1}, \"b\": {\"a\": 2}}").size() == 2);
  CHECK(parse_json("[{\"a\": 1}, {\"a\": 2}]").size() == 2);
}

TEST_CASE("trailing text and embedded NUL bytes are rejected", "[serialize][json]") {
  for (const std::string& text :
       {std::string("{} x"), std::string("{}{}"), std::string("{}]"), std::string("[1] 2"), std::string("{}\0", 3),
        std::string("{}\0garbage", 10), std::string("[1,\0 2]", 7), std::string("\0{}", 3)}) {
    INFO("text: " << text);
    CHECK_THROWS_AS(parse_json(text), SerializationError);
  }
  CHECK_THROWS_WITH(parse_json(std::string("{} \0x", 5)), Contains("byte 3"));
  CHECK_THROWS_AS(parse_json("{\"a\\u0000b\": 1}"), SerializationError);  // to_json could not write this key
  CHECK(parse_json("{}  \n\t ").is_map());
}

TEST_CASE("invalid UTF-8 is rejected in both directions", "[serialize][json]") {
  for (const std::string& text : {std::string("[\"\xff\"]"), std::string("[\"\xc3\"]"),
                                  std::string("[\"\xc0\xaf\"]"),      // overlong '/'
                                  std::string("[\"\xed\xa0\x80\"]"),  // a UTF-16 surrogate
                                  std::string("{\"\xe6\x97\": 1}")}) {
    CHECK_THROWS_AS(parse_json(text), SerializationError);
  }
  // rapidjson 1.1.0 alone would decode these escaped lone low surrogates into invalid UTF-8.
  CHECK_THROWS_WITH(parse_json("{\"a\": \"\\udc00\"}"), Contains("unpaired UTF-16 surrogate"));
  CHECK_THROWS_AS(parse_json("{\"\\udfff\": 1}"), SerializationError);
  CHECK(parse_json("\"\\ud83d\\ude00\"").as_string() == "\xf0\x9f\x98\x80");
  CHECK_THROWS_WITH(to_json(Config{{"name", "caf\xc3"}}), Contains("'name'") && Contains("UTF-8"));
  CHECK_THROWS_AS(to_json(Config{{"caf\xe9", 1}}), ValueError);
}

TEST_CASE("text over max_json_bytes is rejected before parsing", "[serialize][json]") {
  const std::string huge(kiln::max_json_bytes + 1, ' ');
  CHECK_THROWS_WITH(parse_json(huge, "big.json"), Contains("big.json") && Contains("max_json_bytes"));
}

TEST_CASE("to_json rejects a non-finite number naming its key path", "[serialize][json]") {
  Config layers = Config::list({Config{{"units", 1}}, Config{{"units", 2}}, Config{{"rate", 0.5}}});
  const Config ok = {{"config", Config{{"layers", layers}}}};
  CHECK_NOTHROW(to_json(ok));

  Config bad_layer = {{"config", Config{{"rate", double_limits::quiet_NaN()}}}};
  layers = Config::list({Config{{"units", 1}}, Config{{"units", 2}}, bad_layer});
  CHECK_THROWS_WITH(to_json(Config{{"config", Config{{"layers", layers}}}}),
                    Contains("'config.layers[2].config.rate'") && Contains("NaN"));
  CHECK_THROWS_AS(to_json(Config{{"x", Config::list({-double_limits::infinity()})}}), ValueError);
  CHECK_THROWS_WITH(to_json(Config{{"x", double_limits::infinity()}}, 0), Contains("'x' is infinite"));
}

TEST_CASE("to_json rejects what it cannot write", "[serialize][json]") {
  CHECK_THROWS_WITH(to_json(Config::list({1, 2})), Contains("root must be a map"));
  CHECK_THROWS_AS(to_json(Config(3)), ValueError);
  CHECK_THROWS_AS(to_json(Config()), ValueError);
  CHECK_THROWS_AS(to_json(Config{{"a", 1}}, -1), ValueError);
  CHECK_THROWS_AS(to_json(Config{{"a", 1}}, 17), ValueError);
  CHECK_THROWS_WITH(to_json(Config{{"outer", Config{{std::string("a\0b", 3), 1}}}}),
                    Contains("'outer'") && Contains("NUL"));

  Config deep = Config::list({1});
  for (int depth = 2; depth < kiln::max_json_depth; ++depth) deep = Config::list({deep});
  const Config deepest = {{"x", deep}};  // the root map and 127 lists: 128 levels
  CHECK(identical(parse_json(to_json(deepest, 0)), deepest));
  CHECK_THROWS_WITH(to_json(Config{{"x", Config::list({deep})}}), Contains("nests deeper than 128"));
}

TEST_CASE("random mutations of a valid document only ever throw SerializationError", "[serialize][json]") {
  const std::string original = to_json(sample_config(), 1);
  const std::string interesting = "{}[]\",:\\0123456789.eE+-tfnu \n\x80\xc3\xff";
  std::mt19937_64 engine(20240607);
  auto below = [&](std::size_t n) { return static_cast<std::size_t>(engine() % n); };
  int parsed = 0, rejected = 0, wrong = 0;
  for (int trial = 0; trial < 2000; ++trial) {
    std::string text = original;
    const std::size_t edits = 1 + below(4);
    for (std::size_t edit = 0; edit < edits && !text.empty(); ++edit) {
      const std::size_t at = below(text.size());
      switch (below(4)) {
        case 0:
          text[at] = static_cast<char>(text[at] ^ (1 << below(8)));
          break;
        case 1:
          text.insert(at, 1, interesting[below(interesting.size())]);
          break;
        case 2:
          text.insert(at, 1, static_cast<char>(below(256)));
          break;
        default:
          text.erase(at, 1 + below(3));
          break;
      }
    }
    Config result;
    switch (try_parse(text, &result)) {
      case Outcome::parsed:
        ++parsed;
        // Whatever parse_json accepts as a map, to_json writes back to the same config.
        if (result.is_map() && !identical(parse_json(to_json(result, 0)), result)) ++wrong;
        break;
      case Outcome::serialization_error:
        ++rejected;
        break;
      case Outcome::other_error:
        UNSCOPED_INFO("trial " << trial << " threw something other than SerializationError");
        ++wrong;
        break;
    }
  }
  INFO(parsed << " mutants parsed, " << rejected << " rejected");
  CHECK(wrong == 0);
  CHECK(rejected > 1000);
}

TEST_CASE("a map of many keys parses in linear time", "[serialize][json]") {
  // Config::set searches its keys; the reader builds each map at once instead, so this takes
  // milliseconds (it took minutes when every key was set one by one).
  std::string text = "{";
  for (int i = 0; i < 200000; ++i) text += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":" + std::to_string(i);
  text += "}";
  const kiln::Config config = kiln::parse_json(text);
  REQUIRE(config.size() == 200000);
  REQUIRE(config.get_int("k199999") == 199999);
}
