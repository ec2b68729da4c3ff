// Every damaged file is refused with SerializationError: never a crash, an abort, another exception, a
// hang or an allocation the file's size cannot justify. Damage outside the checksums (every truncation,
// random bytes flipped) is caught by the frame; damage behind valid checksums (what a crafted file could
// carry) reaches the JSON and cereal readers, which must refuse it on their own.
#include <catch2/catch.hpp>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include <kiln/kiln.hpp>
#include <kiln/serialize/detail/arrays.hpp>
#include <kiln/serialize/detail/container.hpp>
#include "support/layer_check.hpp"
#include "support/temp_dir.hpp"

using kiln::SerializationError;
using kiln::testing::TempDir;

namespace {

constexpr std::int64_t None = kiln::Shape::unknown;

// A small compiled model, trained one step so every section (config, weights, optimizer, metadata) exists.
std::string small_model_file(const TempDir& dir) {
  using namespace kiln;
  Tensor x = Input({None, 3});
  Model model(x, Dense(2, "softmax")(LayerNormalization()(Dense(4, "relu")(x))));
  model.compile("adam", "categorical_crossentropy", {"accuracy"});
  Array targets = Array::full({4, 2}, 0.0);
  for (std::int64_t row = 0; row < 4; ++row) targets.set_flat(static_cast<std::size_t>(row * 2 + row % 2), 1.0);
  model.train_on_batch(testing::random_input({4, 3}, 1), targets);
  model.save(dir.file("model.kiln"));
  return testing::read_bytes(dir.file("model.kiln"));
}

// Loads `bytes` as a file. True when it loaded; a SerializationError is the only other acceptable outcome.
bool loads(const TempDir& dir, const std::string& bytes) {
  kiln::testing::write_bytes(dir.file("damaged.kiln"), bytes);
  try {
    kiln::load_model(dir.file("damaged.kiln"));
    return true;
  } catch (const SerializationError&) {
    return false;
  }
}

// The same sections re-sealed with valid checksums after `mutate` changed one payload.
std::string resealed(const std::string& bytes, const std::string& tag,
                     const std::function<void(std::string&)>& mutate) {
  const kiln::detail::Container container = kiln::detail::read_container(bytes, "model");
  std::vector<std::string> payloads;
  for (const auto& section : container.sections) payloads.emplace_back(section.payload);
  std::vector<kiln::detail::Section> sections;
  for (std::size_t i = 0; i < payloads.size(); ++i) {
    if (container.sections[i].tag == tag) mutate(payloads[i]);
    sections.push_back({container.sections[i].tag, payloads[i]});
  }
  return kiln::detail::write_container(sections);
}

}  // namespace

TEST_CASE("every truncation of a saved model is refused", "[serialize][corruption]") {
  TempDir dir;
  const std::string bytes = small_model_file(dir);
  REQUIRE(loads(dir, bytes));
  for (std::size_t length = 0; length < bytes.size(); ++length) {
    INFO("truncated to " << length << " of " << bytes.size() << " bytes");
    REQUIRE_THROWS_AS(kiln::detail::read_container(std::string_view(bytes).substr(0, length), "model"),
                      SerializationError);
  }
  // Through the file API too, at a spread of lengths (each one a real file on disk).
  for (std::size_t length = 0; length < bytes.size(); length += 7) REQUIRE_FALSE(loads(dir, bytes.substr(0, length)));
}

TEST_CASE("thousands of seeded random corruptions are all refused", "[serialize][corruption]") {
  TempDir dir;
  const std::string bytes = small_model_file(dir);
  std::mt19937_64 rng(20261201);
  for (int trial = 0; trial < 3000; ++trial) {
    std::string damaged = bytes;
    const int kind = trial % 4;
    if (kind == 0 || kind == 1) {  // 1-4 bytes changed
      const int count = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < count; ++i) {
        const std::size_t at = rng() % damaged.size();
        damaged[at] = static_cast<char>(damaged[at] ^ static_cast<char>(1 + rng() % 255));
      }
    } else if (kind == 2) {  // a byte inserted or removed
      const std::size_t at = rng() % damaged.size();
      if (rng() % 2)
        damaged.insert(at, 1, static_cast<char>(rng()));
      else
        damaged.erase(at, 1);
    } else {  // a 64-bit field somewhere set to a huge value
      const std::size_t at = rng() % (damaged.size() - 8);
      const std::uint64_t huge = std::uint64_t{1} << (40 + rng() % 24);
      for (int i = 0; i < 8; ++i) damaged[at + i] = static_cast<char>((huge >> (8 * i)) & 0xff);
      if (damaged == bytes) continue;
    }
    INFO("trial " << trial);
    REQUIRE_THROWS_AS(kiln::detail::read_container(damaged, "model"), SerializationError);
  }
  REQUIRE_FALSE(loads(dir, std::string("\x89KILN\r\n\x1a", 8) + std::string(100, '\0')));
  REQUIRE_FALSE(loads(dir, "{\"class_name\": \"Functional\"}"));
  REQUIRE_FALSE(loads(dir, ""));
}

TEST_CASE("damage behind valid checksums is refused by the readers themselves", "[serialize][corruption]") {
  TempDir dir;
  const std::string bytes = small_model_file(dir);
  std::mt19937_64 rng(7);
  int refused = 0;
  for (int trial = 0; trial < 600; ++trial) {
    static const char* tags[] = {"CONF", "WGHT", "OPTM", "META"};
    const std::string tag = tags[trial % 4];
    const std::string damaged = resealed(bytes, tag, [&](std::string& payload) {
      if (payload.empty()) return;
      switch (rng() % 3) {
        case 0:
          payload[rng() % payload.size()] ^= static_cast<char>(1 + rng() % 255);
          break;
        case 1:
          payload.resize(rng() % payload.size());
          break;
        default: {
          const std::size_t at = rng() % payload.size();
          const std::uint64_t huge = std::uint64_t{1} << (28 + rng() % 36);
          for (std::size_t i = 0; i < 8 && at + i < payload.size(); ++i)
            payload[at + i] = static_cast<char>((huge >> (8 * i)) & 0xff);
        }
      }
    });
    INFO("trial " << trial << " in section " << tag);
    refused += loads(dir, damaged) ? 0 : 1;  // anything but SerializationError fails the test
  }
  REQUIRE(refused > 300);  // most damage is detectable; a flipped weight bit is a valid (different) model
}

TEST_CASE("configs of the wrong shape and weights that disagree with their layer are refused",
          "[serialize][corruption]") {
  TempDir dir;
  const std::string bytes = small_model_file(dir);
  auto with_config = [&](const std::string& json) {
    return resealed(bytes, "CONF", [&](std::string& payload) { payload = json; });
  };
  for (const char* json : {"", "[1, 2, 3]", "null", "{}", "{\"class_name\": 5}", "{\"class_name\": \"Functional\"}",
                           "{\"class_name\": \"Functional\", \"config\": {\"layers\": \"x\"}}",
                           "{\"class_name\": \"Dense\", \"config\": {\"units\": 2}}",
                           "{\"class_name\": \"Functional\", \"config\": {\"name\": \"m\", \"layers\": [], "
                           "\"input_layers\": [[\"missing\", 0, 0]], \"output_layers\": []}}",
                           "{\"class_name\": \"Functional\", \"config\": {\"layers\": [1e400]}}",
                           "{\"class_name\": \"Functional\", \"config\": NaN}", "{\"class_name\": \"Funct"}) {
    INFO(json);
    REQUIRE_FALSE(loads(dir, with_config(json)));
  }

  // A weight of the wrong shape, with valid checksums: refused, naming the weight and both shapes.
  const kiln::detail::Container container = kiln::detail::read_container(bytes, "model");
  std::vector<kiln::detail::NamedArray> weights = kiln::detail::read_arrays(container.find("WGHT")->payload, "weights");
  weights[0].value = kiln::Array({7, 7});
  const std::string payload = kiln::detail::write_arrays(weights);
  kiln::testing::write_bytes(dir.file("wrong.kiln"), resealed(bytes, "WGHT", [&](std::string& p) { p = payload; }));
  REQUIRE_THROWS_WITH(kiln::load_model(dir.file("wrong.kiln")), Catch::Contains(weights[0].name) &&
                                                                    Catch::Contains("(7, 7)") &&
                                                                    Catch::Contains("weights section"));
}
