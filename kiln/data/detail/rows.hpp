#pragma once
// Internal: what the data helpers (data/windows.cpp, splits.cpp, scaling.cpp) share about arrays of rows.
#include <cstdint>
#include <string>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/shape.hpp>

namespace kiln::detail {

// ShapeError naming `who` unless the array has a leading sample (or time) axis.
void check_has_rows(const Array& array, const std::string& who);
// Elements per row of axis 0, i.e. the product of the trailing dimensions.
std::size_t row_elements(const Array& array);
// `array`'s shape with axis 0 replaced by `leading` dimensions.
Shape with_leading_dims(const Array& array, std::vector<std::int64_t> leading);
// Copies `count` rows starting at `source_row` into `destination` starting at `destination_row`. Both
// arrays share a dtype, so rows are moved as bytes.
void copy_rows(const Array& source, std::int64_t source_row, std::int64_t count, Array& destination,
               std::int64_t destination_row);
// ValueError naming `who` unless value >= 1.
void check_positive(std::int64_t value, const char* what, const std::string& who);

}  // namespace kiln::detail
