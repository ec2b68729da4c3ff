#pragma once
// Named arrays (weights, optimizer slots) in cereal's portable binary archive: little-endian whatever the
// machine, each array with its name, dtype and shape. Reading checks every length against the bytes that
// remain before anything is allocated, so a damaged count cannot make it allocate more than the section holds.
#include <string>
#include <string_view>
#include <vector>

#include <kiln/core/array.hpp>

namespace kiln::detail {

struct NamedArray {
  std::string name;
  Array value;
};

std::string write_arrays(const std::vector<NamedArray>& arrays);
// SerializationError naming `where` ("model.kiln: weights section") and the array on anything wrong.
std::vector<NamedArray> read_arrays(std::string_view payload, const std::string& where);

}  // namespace kiln::detail
