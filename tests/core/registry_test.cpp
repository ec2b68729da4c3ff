// The one set of lookup rules every registry follows (core/registry.hpp), on a registry of its own.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/core/names.hpp>
#include <kiln/core/registry.hpp>

using kiln::ConfigError;
using kiln::Registry;

namespace {
Registry<int>& numbers() {
  static Registry<int> registry("number");
  static const bool filled = [] {
    registry.add("kiln>MeanSquaredError", 1, {"mse", "MSE"});
    registry.add("kiln>RMSprop", 2);
    registry.add("acme>Gated", 3);
    registry.add("beta>Gated", 4);
    registry.add("acme>Dense", 5);
    registry.add("kiln>Dense", 6);
    return true;
  }();
  (void)filled;
  return registry;
}
}  // namespace

TEST_CASE("a registry finds an entry by key, class name, snake_case, lower case and alias", "[core][registry]") {
  const Registry<int>& registry = numbers();
  for (const char* name :
       {"kiln>MeanSquaredError", "MeanSquaredError", "mean_squared_error", "meansquarederror", "mse", "MSE"})
    CHECK(registry.get(name) == 1);
  for (const char* name : {"kiln>RMSprop", "RMSprop", "rmsprop", "rm_sprop"}) CHECK(registry.get(name) == 2);
  CHECK(registry.key_of("mse") == "kiln>MeanSquaredError");
  CHECK(registry.find("RMSProp") == nullptr);  // case matters outside the spellings above
  CHECK(registry.contains("kiln>RMSprop"));
  CHECK_FALSE(registry.contains("RMSprop"));  // contains() takes exact keys only
  CHECK(registry.keys().size() == 6);
  CHECK(registry.key_where([](int value) { return value == 3; }) == "acme>Gated");
  CHECK(registry.key_where([](int value) { return value == 99; }).empty());
}

TEST_CASE("a bare name two packages share is kiln's, or refused naming both keys", "[core][registry]") {
  const Registry<int>& registry = numbers();
  CHECK(registry.get("Dense") == 6);  // kiln>Dense, though acme>Dense came first
  CHECK(registry.get("acme>Dense") == 5);
  CHECK(registry.get("acme>Gated") == 3);
  CHECK_THROWS_AS(registry.get("Gated"), ConfigError);
  CHECK_THROWS_WITH(registry.get("gated"),
                    Catch::Contains("'acme>Gated', 'beta>Gated'") && Catch::Contains("give the whole key"));
}

TEST_CASE("a name that matches nothing suggests the nearest, in the form asked", "[core][registry]") {
  const Registry<int>& registry = numbers();
  CHECK_THROWS_WITH(registry.get("msee"), Catch::StartsWith("unknown number 'msee'; did you mean 'mse'"));
  CHECK_THROWS_WITH(registry.get("MeanSquaredErr"), Catch::Contains("did you mean 'kiln>MeanSquaredError'"));
  CHECK_THROWS_WITH(registry.get("kiln>Dence"), Catch::Contains("did you mean 'kiln>Dense'"));
  CHECK_THROWS_WITH(registry.get("Gatted"), Catch::Contains("'acme>Gated'") && Catch::Contains("'beta>Gated'"));
}

TEST_CASE("refused registrations keep the first and are reported by check()", "[core][registry]") {
  Registry<int> registry("thing");
  CHECK(registry.add("acme>One", 1, {"uno"}));
  CHECK_NOTHROW(registry.check());
  CHECK_FALSE(registry.add("acme>One", 2));           // the key again
  CHECK_FALSE(registry.add("acme>Two", 3, {"uno"}));  // an alias taken
  CHECK_FALSE(registry.add("NoPackage", 4));          // not "Package>Name"
  CHECK(registry.get("One") == 1);
  CHECK(registry.find("Two") == nullptr);
  CHECK_THROWS_AS(registry.check(), ConfigError);
  CHECK_THROWS_WITH(registry.check(), Catch::Contains("acme>One is registered twice") &&
                                          Catch::Contains("its alias 'uno' already names acme>One") &&
                                          Catch::Contains("'NoPackage' is not a key of the form"));
}

TEST_CASE("an entry's own problem is reported by check()", "[core][registry]") {
  Registry<int> registry("count", [](const std::string& key, const int& value) {
    return value < 0 ? key + " is negative" : std::string();
  });
  registry.add("acme>Fine", 1);
  CHECK_NOTHROW(registry.check());
  registry.add("acme>Broken", -1);
  CHECK_THROWS_WITH(registry.check(), "acme>Broken is negative");
}

TEST_CASE("names: Keras's snake_case, nearest names and did-you-mean", "[core][names]") {
  CHECK(kiln::to_snake_case("GlorotUniform") == "glorot_uniform");
  CHECK(kiln::class_part("acme>Gated") == "Gated");
  CHECK(kiln::class_part("Gated") == "Gated");
  CHECK(kiln::to_lower_case("AdamW") == "adamw");
  CHECK(kiln::edit_distance("Dense", "dense") == 0);
  CHECK(kiln::edit_distance("Dens", "Dense") == 1);
  CHECK(kiln::nearest_names("dens", {"dense", "dropout", "dense"}, 2) == std::vector<std::string>{"dense", "dropout"});
  CHECK(kiln::did_you_mean({}).empty());
  CHECK(kiln::did_you_mean({"a", "b"}) == "; did you mean 'a', 'b'?");
}
