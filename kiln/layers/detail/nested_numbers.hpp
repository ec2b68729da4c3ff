#pragma once
// Numbers given in a config as a number, nested lists of numbers, or a Keras-serialized array
// ({"class_name": "__numpy__" or "__tensor__", "config": {"value": ..., "dtype": ...}}): Normalization's mean
// and variance, Rescaling's per-channel scale and offset.
#include <cstdint>
#include <string>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/layers/config.hpp>

namespace kiln::detail {

/// A shape (empty for one number) and its values in row-major order.
struct NestedNumbers {
  std::vector<std::int64_t> dims;
  std::vector<double> values;
};

/// The numbers `value` holds. ConfigError naming `what` for anything else: a ragged or empty list, a string.
NestedNumbers read_nested_numbers(const Config& value, const std::string& what);

/// The numbers as an array of their own shape and `dtype`.
Array nested_array(const NestedNumbers& numbers, DType dtype);

}  // namespace kiln::detail
