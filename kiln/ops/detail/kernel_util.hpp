#pragma once
// Helpers shared by op kernels and shape rules (internal: not installed). Plain C++: no xtensor here,
// so op files that only loop stay cheap to compile, under the sanitizers too.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <kiln/core/attributes.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/op.hpp>
#include <kiln/core/shape.hpp>

namespace kiln::detail {

// max and min that keep a NaN from either side, as NumPy's maximum and minimum do. std::max(a, b) is
// `a < b ? b : a` and xsimd's max is the CPU's maxps: both return the other operand when one is NaN, so
// one NaN in the data would vanish into a finite result (relu(NaN) = 0) and hide a broken run.
template <class T>
T propagating_max(T a, T b) {
  return a >= b || a != a ? a : b;
}
template <class T>
T propagating_min(T a, T b) {
  return a <= b || a != a ? a : b;
}

// A shape split around one axis: `outer` blocks of `extent` x `inner` elements.
struct AxisSplit {
  std::int64_t outer = 1;
  std::int64_t extent = 1;
  std::int64_t inner = 1;
};
AxisSplit split_at_axis(const Shape& shape, int axis);

// The shape rule of every op whose output has its first input's shape.
Shape first_input_shape(const InferContext& context);

// NumPy broadcasting of every input (an unknown dimension matches itself or 1); fails via `context`.
Shape broadcast_all_inputs(const InferContext& context);

// Row-major strides of a concrete shape.
std::array<std::int64_t, Shape::max_rank> strides_of(const Shape& shape);

// Offsets of up to three inputs while walking an output shape in row-major order, for NumPy
// broadcasting: an input's stride is 0 along the axes it is broadcast on.
struct BroadcastWalk {
  int rank = 0;
  std::array<std::int64_t, Shape::max_rank> dims{};
  std::array<std::array<std::int64_t, Shape::max_rank>, 3> strides{};
  BroadcastWalk(const Shape& output, const Shape* const* inputs, int num_inputs);

  // Calls f(output_index, offset_0, offset_1, offset_2) for every output element, in order.
  template <class F>
  void for_each(F&& f) const {
    std::int64_t total = 1;
    for (int axis = 0; axis < rank; ++axis) total *= dims[static_cast<std::size_t>(axis)];
    if (total == 0) return;
    std::array<std::int64_t, Shape::max_rank> index{};
    std::array<std::int64_t, 3> offset{};
    for (std::int64_t flat = 0; flat < total; ++flat) {
      f(flat, offset[0], offset[1], offset[2]);
      advance(index, offset, rank - 1);
    }
  }

  // Calls f(output_index, offset_0, offset_1, offset_2, run) for each row of the last axis, in order: `run`
  // consecutive output elements from output_index on, whose input i steps by inner_stride(i) from offset_i.
  // A kernel's inner loop then runs over a row, not through the walk per element.
  template <class F>
  void for_each_row(F&& f) const {
    if (rank == 0) {
      f(0, 0, 0, 0, 1);
      return;
    }
    const auto last = static_cast<std::size_t>(rank - 1);
    const std::int64_t run = dims[last];
    std::int64_t rows = 1;
    for (std::size_t axis = 0; axis < last; ++axis) rows *= dims[axis];
    if (rows == 0 || run == 0) return;
    std::array<std::int64_t, Shape::max_rank> index{};
    std::array<std::int64_t, 3> offset{};
    for (std::int64_t row = 0; row < rows; ++row) {
      f(row * run, offset[0], offset[1], offset[2], run);
      advance(index, offset, rank - 2);
    }
  }
  std::int64_t inner_stride(int input) const {
    return rank == 0 ? 0 : strides[static_cast<std::size_t>(input)][static_cast<std::size_t>(rank - 1)];
  }

 private:
  // The next position in row-major order over axes [0, last] (an odometer), with every input's offset.
  void advance(std::array<std::int64_t, Shape::max_rank>& index, std::array<std::int64_t, 3>& offset, int last) const {
    for (int axis = last; axis >= 0; --axis) {
      const auto a = static_cast<std::size_t>(axis);
      for (std::size_t i = 0; i < 3; ++i) offset[i] += strides[i][a];
      if (++index[a] < dims[a]) return;
      for (std::size_t i = 0; i < 3; ++i) offset[i] -= strides[i][a] * dims[a];
      index[a] = 0;
    }
  }
};

// Normalized, sorted, unique axes of `shape` for a reduction; empty `axes` means all.
std::vector<int> reduction_axes(const Shape& shape, const std::vector<std::int64_t>& axes, const InferContext& context);

// Output shape of a reduction over `axes` (already normalized).
Shape reduced_shape(const Shape& shape, const std::vector<int>& axes, bool keepdims);

// Checks that every input has the node's dtype: done once by the Graph, so kernels need not.
inline std::size_t num_elements(const Shape& shape) { return static_cast<std::size_t>(shape.num_elements()); }

}  // namespace kiln::detail
