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
  static constexpr std::int64_t unknown = -1;  ///< a dimension known only when data is fed (printed None)
  static constexpr int max_rank = 8;           ///< the highest rank a graph node may have (ShapeError beyond)

  /// The scalar shape ().
  Shape() = default;
  /// The shape with these dimensions: `Shape{Shape::unknown, 784}`; `{}` is a scalar.
  Shape(std::initializer_list<std::int64_t> dims) : dims_(dims) {}
  /// The shape with these dimensions.
  explicit Shape(std::vector<std::int64_t> dims) : dims_(std::move(dims)) {}

  /// The number of dimensions; 0 for a scalar.
  int rank() const { return static_cast<int>(dims_.size()); }
  /// Dimension `axis`, in [0, rank) and not checked; dim() takes negative axes and checks.
  std::int64_t operator[](int axis) const { return dims_[static_cast<std::size_t>(axis)]; }
  /// Dimension `axis` to write, in [0, rank) and not checked.
  std::int64_t& operator[](int axis) { return dims_[static_cast<std::size_t>(axis)]; }
  /// Python-style: dim(-1) is the last dimension. Throws ShapeError when out of range.
  std::int64_t dim(int axis) const;
  /// Maps a possibly negative axis into [0, rank), or throws ShapeError naming `who`.
  int normalize_axis(int axis, const std::string& who) const;

  /// The dimensions, outermost first.
  const std::vector<std::int64_t>& dims() const { return dims_; }
  /// True when no dimension is Shape::unknown.
  bool is_fully_defined() const;
  /// True for rank 0.
  bool is_scalar() const { return dims_.empty(); }
  /// Product of the dimensions; throws ShapeError if one is unknown.
  std::int64_t num_elements() const;
  /// The shape with every unknown dimension replaced by `batch_size`.
  Shape with_batch(std::int64_t batch_size) const;

  std::string to_string() const;  ///< "(None, 150, 512)", "()" for a scalar, "(3,)" for rank 1
  /// True when `given` has this rank and, from axis `from_axis` on, every dimension this shape knows
  /// (an unknown dimension takes any size): whether data of shape `given` fits a declared shape.
  bool accepts(const Shape& given, int from_axis = 0) const;
  /// Same rank and dimensions; an unknown dimension equals only an unknown one.
  bool operator==(const Shape& other) const { return dims_ == other.dims_; }
  /// Not ==.
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
