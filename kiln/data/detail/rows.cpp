#include <kiln/data/detail/rows.hpp>

#include <cstring>

#include <kiln/core/error.hpp>

namespace kiln::detail {

void check_has_rows(const Array& array, const std::string& who) {
  if (array.empty() || array.shape().rank() == 0)
    throw ShapeError(who, "needs an array with a leading sample (or time) axis", {{"array", array.shape()}});
}

std::size_t row_elements(const Array& array) {
  std::size_t elements = 1;
  for (int axis = 1; axis < array.shape().rank(); ++axis) elements *= static_cast<std::size_t>(array.shape()[axis]);
  return elements;
}

Shape with_leading_dims(const Array& array, std::vector<std::int64_t> leading) {
  const std::vector<std::int64_t>& dims = array.shape().dims();
  leading.insert(leading.end(), dims.begin() + 1, dims.end());
  return Shape(std::move(leading));
}

void copy_rows(const Array& source, std::int64_t source_row, std::int64_t count, Array& destination,
               std::int64_t destination_row) {
  const std::size_t row_bytes = row_elements(source) * dtype_size(source.dtype());
  const auto* from = static_cast<const unsigned char*>(source.raw()) + static_cast<std::size_t>(source_row) * row_bytes;
  auto* to = static_cast<unsigned char*>(destination.raw()) + static_cast<std::size_t>(destination_row) * row_bytes;
  std::memcpy(to, from, static_cast<std::size_t>(count) * row_bytes);
}

void check_positive(std::int64_t value, const char* what, const std::string& who) {
  if (value < 1) throw ValueError(who + ": " + what + " must be at least 1, got " + std::to_string(value));
}

}  // namespace kiln::detail
