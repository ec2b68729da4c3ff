#include "support/hub_fixtures.hpp"

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include <kiln/core/detail/files.hpp>
#include <kiln/serialize/detail/hdf5_reader.hpp>
#include <kiln/serialize/detail/zip_archive.hpp>
#include <kiln/serialize/json.hpp>

namespace kiln::testing {

std::vector<Array> fixture_arrays(const std::string& io_path, const std::string& group, const std::string& prefix) {
  const kiln::detail::hdf5::File io(kiln::detail::read_whole_file(io_path), io_path);
  const kiln::detail::hdf5::Object arrays_group = io.root().at(group);
  std::vector<Array> arrays;
  for (std::size_t i = 0; arrays_group.find(prefix + std::to_string(i)); ++i)
    arrays.push_back(arrays_group.at(prefix + std::to_string(i)).read(DType::float32));
  return arrays;
}

double error_against_stored(Model& model, const std::string& io_path) {
  const std::vector<Array> inputs = fixture_arrays(io_path, "inputs", "input_");
  const Array stored = fixture_arrays(io_path, "outputs", "output_").at(0);
  const Array predicted = model.predict(inputs).at(0);
  REQUIRE(predicted.shape() == stored.shape());
  double scale = 0, worst = 0;
  for (std::size_t i = 0; i < stored.size(); ++i) {
    scale = std::max(scale, std::abs(stored.flat(i)));
    worst = std::max(worst, std::abs(predicted.flat(i) - stored.flat(i)));
  }
  return worst / scale;
}

Config archive_config(const std::string& path) {
  const std::string bytes = kiln::detail::read_whole_file(path);
  const kiln::detail::ZipReader zip(bytes, path);
  return kiln::parse_json(zip.read("config.json", 1 << 20));
}

}  // namespace kiln::testing
