#include <kiln/data/data.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <kiln/core/error.hpp>

namespace kiln {

Array to_categorical(const Array& labels, std::int64_t num_classes, DType dtype) {
  const std::string who = "to_categorical";
  if (!is_floating(dtype)) throw DTypeError(who + ": dtype must be float32 or float64, not " + dtype_name(dtype));
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
    throw ValueError(who + ": label " + std::to_string(largest) +
                     " is not below num_classes = " + std::to_string(classes));
  std::vector<std::int64_t> dims = labels.shape().dims();
  if (dims.size() > 1 && dims.back() == 1) dims.pop_back();  // Keras: (n, 1) ids give (n, classes)
  dims.push_back(classes);
  Array one_hot(Shape(dims), dtype);
  for (std::size_t i = 0; i < labels.size(); ++i)
    one_hot.set_flat(i * static_cast<std::size_t>(classes) + static_cast<std::size_t>(labels.flat(i)), 1.0);
  return one_hot;
}

Array argmax(const Array& values, int axis) {
  const Shape& shape = values.shape();
  const std::string who = "argmax of an array " + shape.to_string();
  if (shape.rank() == 0) throw ShapeError(who + ": a scalar has no axis");
  if (axis < -shape.rank() || axis >= shape.rank())
    throw ShapeError(who + ": axis " + std::to_string(axis) + " is out of range for rank " +
                     std::to_string(shape.rank()));
  const int a = axis < 0 ? axis + shape.rank() : axis;
  const std::int64_t extent = shape[a];
  if (extent == 0) throw ShapeError(who + ": axis " + std::to_string(axis) + " is empty");
  std::int64_t outer = 1, inner = 1;
  for (int d = 0; d < a; ++d) outer *= shape[d];
  for (int d = a + 1; d < shape.rank(); ++d) inner *= shape[d];
  std::vector<std::int64_t> dims = shape.dims();
  dims.erase(dims.begin() + a);
  Array result(Shape(dims), values.dtype());
  for (std::int64_t o = 0; o < outer; ++o)
    for (std::int64_t i = 0; i < inner; ++i) {
      const std::size_t base = static_cast<std::size_t>(o * extent * inner + i);
      std::int64_t best = 0;
      double best_value = values.flat(base);
      for (std::int64_t k = 1; k < extent && !std::isnan(best_value); ++k) {
        const double value = values.flat(base + static_cast<std::size_t>(k * inner));
        if (value > best_value || std::isnan(value)) {
          best = k;
          best_value = value;
        }
      }
      result.set_flat(static_cast<std::size_t>(o * inner + i), static_cast<double>(best));
    }
  return result;
}

namespace {

// One class per sample: ids as they are ((n,) or (n, 1)), or the argmax of each row of scores (n, classes).
std::vector<std::int64_t> classes_of(const Array& values, const std::string& who) {
  const Shape& shape = values.shape();
  if (shape.rank() == 0 || shape.rank() > 2)
    throw ValueError(who + " must be class ids (samples,) or (samples, 1), or scores (samples, classes), got " +
                     shape.to_string());
  const Array ids = shape.rank() == 2 && shape[1] != 1 ? argmax(values, -1) : values;
  std::vector<std::int64_t> classes(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const double id = ids.flat(i);
    if (!(id >= 0.0) || id != std::floor(id) || id >= 9007199254740992.0)
      throw ValueError(who + ": sample " + std::to_string(i) + " is " + std::to_string(id) +
                       ", not a class id (a non-negative integer)");
    classes[i] = static_cast<std::int64_t>(id);
  }
  return classes;
}

}  // namespace

Array confusion_matrix(const Array& labels, const Array& predictions, std::int64_t num_classes) {
  const std::string who = "confusion_matrix";
  if (num_classes == 0 || num_classes < -1)
    throw ValueError(who + ": num_classes must be positive (or -1: the largest class + 1), got " +
                     std::to_string(num_classes));
  const std::vector<std::int64_t> truth = classes_of(labels, who + ": labels");
  const std::vector<std::int64_t> guess = classes_of(predictions, who + ": predictions");
  if (truth.size() != guess.size())
    throw ValueError(who + ": " + std::to_string(truth.size()) + " labels but " + std::to_string(guess.size()) +
                     " predictions");
  std::int64_t largest = -1;
  for (std::size_t i = 0; i < truth.size(); ++i) largest = std::max({largest, truth[i], guess[i]});
  const std::int64_t classes = num_classes == -1 ? largest + 1 : num_classes;
  if (classes <= 0) throw ValueError(who + ": no samples to count the classes from; give num_classes");
  if (largest >= classes)
    throw ValueError(who + ": class " + std::to_string(largest) +
                     " is not below num_classes = " + std::to_string(classes));
  Array counts({classes, classes}, DType::float64);
  for (std::size_t i = 0; i < truth.size(); ++i) {
    const std::size_t cell = static_cast<std::size_t>(truth[i] * classes + guess[i]);
    counts.set_flat(cell, counts.flat(cell) + 1.0);
  }
  return counts;
}

}  // namespace kiln
