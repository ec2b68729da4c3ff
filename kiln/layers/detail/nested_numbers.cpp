#include <kiln/layers/detail/nested_numbers.hpp>

#include <kiln/core/error.hpp>

namespace kiln::detail {

namespace {

// Appends the numbers of `value` at `depth`; false for a ragged list.
bool read_nested(const Config& value, std::size_t depth, NestedNumbers& numbers, const std::string& what) {
  if (!value.is_list()) {
    numbers.values.push_back(value.as_double(what));
    return depth == numbers.dims.size();
  }
  const std::vector<Config>& items = value.as_list();
  if (depth == numbers.dims.size() && numbers.values.empty())
    numbers.dims.push_back(static_cast<std::int64_t>(items.size()));
  if (depth >= numbers.dims.size() || numbers.dims[depth] != static_cast<std::int64_t>(items.size())) return false;
  for (const Config& item : items)
    if (!read_nested(item, depth + 1, numbers, what)) return false;
  return true;
}

}  // namespace

NestedNumbers read_nested_numbers(const Config& value, const std::string& what) {
  const Config* given = &value;
  if (value.is_map()) {
    const std::string class_name = value.get_string("class_name", "");
    if (class_name != "__numpy__" && class_name != "__tensor__")
      throw ConfigError(what + " must be a number, nested lists of numbers or a serialized array, got " +
                        value.to_string());
    given = &value.at("config").at("value");
  }
  NestedNumbers numbers;
  if (!read_nested(*given, 0, numbers, what) || numbers.values.empty())
    throw ConfigError(what + " must be a number or nested lists of numbers of one shape, got " + value.to_string());
  return numbers;
}

Array nested_array(const NestedNumbers& numbers, DType dtype) {
  Array array{Shape(numbers.dims), dtype};
  for (std::size_t i = 0; i < numbers.values.size(); ++i) array.set_flat(i, numbers.values[i]);
  return array;
}

}  // namespace kiln::detail
