// The inputs in tests/fuzz/regressions (their README says where each came from): kiln's HDF5 reader and its
// Keras loader read or refuse every one with a kiln error, never a crash, a hang or a sanitizer report.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <kiln/core/detail/files.hpp>
#include <kiln/core/error.hpp>
#include <kiln/serialize/detail/hdf5_reader.hpp>
#include <kiln/serialize/keras.hpp>
#include <kiln/models/loading.hpp>

namespace fs = std::filesystem;
namespace hdf5 = kiln::detail::hdf5;

namespace {

// Reads every group, attribute and dataset once; returns how many objects it read.
std::size_t read_everything(const hdf5::File& file) {
  std::set<std::uint64_t> seen;
  std::function<void(const hdf5::Object&, int)> walk = [&](const hdf5::Object& object, int depth) {
    if (depth > 32 || !seen.insert(object.address()).second) return;
    for (const std::string& name : object.attribute_names()) {
      try {
        object.attribute_strings(name);
      } catch (const kiln::SerializationError&) {
        object.attribute_numbers(name);
      }
    }
    if (object.is_dataset()) object.read(kiln::DType::float32);
    if (object.is_group())
      for (const std::string& name : object.member_names()) walk(*object.find(name), depth + 1);
  };
  walk(file.root(), 0);
  return seen.size();
}

}  // namespace

TEST_CASE("fuzzer findings: kiln reads or refuses each, never crashes", "[serialize][hdf5][fuzz]") {
  const fs::path folder = fs::path(__FILE__).parent_path().parent_path() / "fuzz" / "regressions";
  std::vector<fs::path> inputs;
  for (const auto& entry : fs::directory_iterator(folder))
    if (entry.path().extension() == ".h5") inputs.push_back(entry.path());
  std::sort(inputs.begin(), inputs.end());
  REQUIRE(inputs.size() >= 12);
  for (const fs::path& input : inputs) {
    INFO(input.filename().string());
    const std::string bytes = kiln::detail::read_whole_file(input.string());
    try {
      read_everything(hdf5::File(bytes, input.string()));
    } catch (const kiln::SerializationError& error) {
      CHECK_THAT(error.what(), Catch::Contains(input.string()));
    }
    CHECK_THROWS_AS(kiln::load_keras_model(input.string()), kiln::Error);
  }
}
