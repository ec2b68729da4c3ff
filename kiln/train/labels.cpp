#include <kiln/train/data.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <kiln/core/error.hpp>

namespace kiln {

Array to_categorical(const Array& labels, std::int64_t num_classes, DType dtype) {
  const std::string who = "to_categorical";
  if (num_classes == 0 || num_classes < -1)
    throw ValueError(who + ": num_classes must be positive (or -1: the largest id + 1), got " +
                     std::to_string(num_classes));
  std::int64_t largest = -1;
  for (std::size_t i = 0; i < labels.size(); ++i) {
    const double id = labels.flat(i);
    // (Beyond 2^53 a double no longer holds every integer: no class id is that large.)
    if (!(id >= 0.0) || !std::isfinite(id) || id != std::floor(id) || id >= 9007199254740992.0)
      throw ValueError(who + ": label " + std::to_string(id) + " at position " + std::to_string(i) +
                       " is not a class id (a non-negative integer)");
    largest = std::max(largest, static_cast<std::int64_t>(id));
  }
  const std::int64_t classes = num_classes == -1 ? largest + 1 : num_classes;
  if (classes == 0) throw ValueError(who + ": no labels to count the classes from; give num_classes");
  if (largest >= classes)
    throw ValueError(who + ": label " + std::to_string(largest) + " is not below num_classes = " +
                     std::to_string(classes));
  std::vector<std::int64_t> dims = labels.shape().dims();
  if (dims.size() > 1 && dims.back() == 1) dims.pop_back();  // Keras: (n, 1) ids give (n, classes)
  dims.push_back(classes);
  Array one_hot(Shape(dims), dtype);
  for (std::size_t i = 0; i < labels.size(); ++i)
    one_hot.set_flat(i * static_cast<std::size_t>(classes) + static_cast<std::size_t>(labels.flat(i)), 1.0);
  return one_hot;
}

}  // namespace kiln
