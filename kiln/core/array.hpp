#pragma once
// Array: concrete data a user holds. A contiguous, row-major block of float32, float64 (or int8: quantized
// weights) with a fully defined shape. Copies share storage (like a NumPy view or a torch::Tensor); `copy()` is
// deep.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <kiln/core/dtype.hpp>
#include <kiln/core/shape.hpp>

namespace kiln {

/// Concrete data a user holds: a contiguous, row-major block of float32 or float64 with a fully defined
/// shape. Copies share storage (like a NumPy view or a torch::Tensor); copy() is deep. A default-constructed
/// Array is empty: it has no storage.
class Array {
 public:
  Array() = default;
  /// Zero-filled. Throws ShapeError if `shape` has an unknown dimension.
  explicit Array(Shape shape, DType dtype = DType::float32);

  /// A float32 array holding a copy of `values`, in row-major order. Throws ShapeError when their number
  /// is not the shape's, or the shape has an unknown dimension.
  static Array from_vector(const std::vector<float>& values, Shape shape);
  /// A float64 array holding a copy of `values`; throws like the float32 one.
  static Array from_vector(const std::vector<double>& values, Shape shape);
  /// An int8 array (quantized weights) holding a copy of `values`; throws like the float32 one.
  static Array from_vector(const std::vector<std::int8_t>& values, Shape shape);
  /// Every element `value`. Throws ShapeError if `shape` has an unknown dimension.
  static Array full(Shape shape, double value, DType dtype = DType::float32);
  /// A non-owning view of memory someone else keeps alive for as long as the view is used.
  static Array view(void* data, Shape shape, DType dtype);

  /// The dimensions, all known.
  const Shape& shape() const { return shape_; }
  /// The element type.
  DType dtype() const { return dtype_; }
  /// The number of elements.
  std::size_t size() const { return size_; }
  /// The size of the data in bytes.
  std::size_t nbytes() const { return size_ * dtype_size(dtype_); }
  /// True when the array has no storage (default-constructed); an array of 0 elements is not empty.
  bool empty() const { return storage_ == nullptr; }

  /// Typed access; throws DTypeError if T is not the array's dtype.
  template <class T>
  T* data();
  /// Typed read-only access; throws DTypeError if T is not the array's dtype.
  template <class T>
  const T* data() const;
  /// The data, untyped; nullptr when empty.
  void* raw() { return storage_.get(); }
  /// The data, untyped and read-only; nullptr when empty.
  const void* raw() const { return storage_.get(); }

  /// Element `index` of the flattened array, as double whatever the dtype.
  double flat(std::size_t index) const;
  /// Sets element `index` of the flattened array, converting `value` to the dtype (to int8: rounded to nearest,
  /// ties to even, saturated to [-128, 127], NaN to 0). `index` is not checked.
  void set_flat(std::size_t index, double value);

  /// Values converted to T (a copy).
  template <class T>
  std::vector<T> to_vector() const;

  /// A deep copy with storage of its own; an empty Array stays empty.
  Array copy() const;
  /// A deep copy converted to `dtype`, even when the array has that dtype already.
  Array astype(DType dtype) const;
  /// Same data, new shape with the same number of elements (shares storage).
  Array reshape(Shape shape) const;
  /// Rows [start, start + count) of the first axis: shares the storage and keeps it alive (no copy).
  /// Throws ShapeError when the range is outside the array.
  Array rows(std::int64_t start, std::int64_t count) const;
  /// Copies `rows` over this array's rows from `start` on (same dtype and row shape).
  void set_rows(std::int64_t start, const Array& rows);
  /// True when shapes, dtypes and every bit of the data are equal.
  bool bitwise_equal(const Array& other) const;

 private:
  void check_dtype(DType requested) const;

  Shape shape_;
  DType dtype_ = DType::float32;
  std::size_t size_ = 0;
  std::shared_ptr<unsigned char> storage_;
};

template <class T>
T* Array::data() {
  check_dtype(dtype_of<T>::value);
  return reinterpret_cast<T*>(storage_.get());
}
template <class T>
const T* Array::data() const {
  check_dtype(dtype_of<T>::value);
  return reinterpret_cast<const T*>(storage_.get());
}
template <class T>
std::vector<T> Array::to_vector() const {
  std::vector<T> values(size_);
  for (std::size_t i = 0; i < size_; ++i) values[i] = static_cast<T>(flat(i));
  return values;
}

namespace detail {
/// While one is alive, the Arrays this thread makes may take at most `bytes` in total; the one that
/// would pass it throws ValueError. Loading a file sets one from the file's size, so a damaged config
/// (a Dense of 10^9 units) is refused instead of allocating gigabytes.
class AllocationLimit {
 public:
  explicit AllocationLimit(std::size_t bytes, std::string what);
  ~AllocationLimit();
  AllocationLimit(const AllocationLimit&) = delete;
  AllocationLimit& operator=(const AllocationLimit&) = delete;
  void charge(std::size_t bytes);

 private:
  std::size_t remaining_;
  std::string what_;
  AllocationLimit* outer_;
};
}  // namespace detail

}  // namespace kiln
