#pragma once
// Reading the fixtures of data/keras (make_fixtures.py's IO format) and the config of a .keras archive, for the
// tests of keras-hub's tasks.
#include <string>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/layers/config.hpp>
#include <kiln/models/model.hpp>

namespace kiln::testing {

// The arrays <prefix>0, <prefix>1, ... of the group `group` ("inputs", "outputs") of the fixture file `io_path`.
std::vector<Array> fixture_arrays(const std::string& io_path, const std::string& group, const std::string& prefix);

// max |predicted - stored| / max |stored| of `model`'s first output on the fixture's inputs (REQUIREs the shapes).
double error_against_stored(Model& model, const std::string& io_path);

// config.json of a .keras archive.
Config archive_config(const std::string& path);

}  // namespace kiln::testing
