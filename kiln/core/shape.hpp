#pragma once
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

namespace kiln {

/// A tensor's dimensions. A dimension of `Shape::unknown` (printed None, like Keras) is known only when
/// data is fed. On placeholders it is the batch size, and every fed placeholder must agree on it; an op
/// output's unknown dimension may also be derived from it (a reshape that folds the batch into rows),
/// because plans re-run every shape rule on the concrete shapes of each batch size.
class Shape {
 public:
  static constexpr std::int64_t unknown = -1;
  static constexpr int max_rank = 8;

  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims) : dims_(dims) {}
  explicit Shape(std::vector<std::int64_t> dims) : dims_(std::move(dims)) {}

  int rank() const { return static_cast<int>(dims_.size()); }
  std::int64_t operator[](int axis) const { return dims_[static_cast<std::size_t>(axis)]; }
  std::int64_t& operator[](int axis) { return dims_[static_cast<std::size_t>(axis)]; }
  /// Python-style: dim(-1) is the last dimension. Throws ShapeError when out of range.
  std::int64_t dim(int axis) const;
  /// Maps a possibly negative axis into [0, rank), or throws ShapeError naming `who`.
  int normalize_axis(int axis, const std::string& who) const;

  const std::vector<std::int64_t>& dims() const { return dims_; }
  bool is_fully_defined() const;
  bool is_scalar() const { return dims_.empty(); }
  /// Product of the dimensions; throws ShapeError if one is unknown.
  std::int64_t num_elements() const;
  /// The shape with every unknown dimension replaced by `batch_size`.
  Shape with_batch(std::int64_t batch_size) const;

  std::string to_string() const;  ///< "(None, 150, 512)", "()" for a scalar, "(3,)" for rank 1
  /// True when `given` has this rank and, from axis `from_axis` on, every dimension this shape knows
  /// (an unknown dimension takes any size): whether data of shape `given` fits a declared shape.
  bool accepts(const Shape& given, int from_axis = 0) const;
  bool operator==(const Shape& other) const { return dims_ == other.dims_; }
  bool operator!=(const Shape& other) const { return dims_ != other.dims_; }

 private:
  std::vector<std::int64_t> dims_;
};

/// NumPy broadcasting of two shapes; an unknown dimension matches an unknown one, or 1.
/// Throws ShapeError naming `who` and both shapes.
Shape broadcast_shapes(const Shape& a, const Shape& b, const std::string& who);
/// The same, or nothing when the shapes do not broadcast.
std::optional<Shape> try_broadcast_shapes(const Shape& a, const Shape& b);

}  // namespace kiln
