#include <kiln/ops/detail/kernel_util.hpp>

#include <algorithm>

namespace kiln::detail {

AxisSplit split_at_axis(const Shape& shape, int axis) {
  AxisSplit split;
  for (int i = 0; i < shape.rank(); ++i) {
    if (i < axis)
      split.outer *= shape[i];
    else if (i == axis)
      split.extent = shape[i];
    else
      split.inner *= shape[i];
  }
  return split;
}

Shape first_input_shape(const InferContext& context) { return context.input_shape(0); }

Shape broadcast_all_inputs(const InferContext& context) {
  Shape result = context.input_shape(0);
  for (int i = 1; i < context.num_inputs(); ++i) {
    auto next = try_broadcast_shapes(result, context.input_shape(i));
    if (!next) context.fail("shapes cannot be broadcast together");
    result = *next;
  }
  return result;
}

std::array<std::int64_t, Shape::max_rank> strides_of(const Shape& shape) {
  std::array<std::int64_t, Shape::max_rank> strides{};
  std::int64_t stride = 1;
  for (int axis = shape.rank() - 1; axis >= 0; --axis) {
    strides[static_cast<std::size_t>(axis)] = stride;
    stride *= shape[axis];
  }
  return strides;
}

BroadcastWalk::BroadcastWalk(const Shape& output, const Shape* const* inputs, int num_inputs) : rank(output.rank()) {
  for (int axis = 0; axis < rank; ++axis) dims[static_cast<std::size_t>(axis)] = output[axis];
  for (int i = 0; i < num_inputs; ++i) {
    const Shape& input = *inputs[i];
    const auto input_strides = strides_of(input);
    const int shift = rank - input.rank();
    for (int axis = 0; axis < rank; ++axis) {
      const int input_axis = axis - shift;
      const bool broadcast = input_axis < 0 || input[input_axis] == 1;
      strides[static_cast<std::size_t>(i)][static_cast<std::size_t>(axis)] =
          broadcast ? 0 : input_strides[static_cast<std::size_t>(input_axis)];
    }
  }
}

std::vector<int> reduction_axes(const Shape& shape, const std::vector<std::int64_t>& axes,
                                const InferContext& context) {
  std::vector<int> result;
  if (axes.empty()) {
    for (int axis = 0; axis < shape.rank(); ++axis) result.push_back(axis);
    return result;
  }
  for (std::int64_t axis : axes) {
    const std::int64_t normalized = axis < 0 ? axis + shape.rank() : axis;
    if (normalized < 0 || normalized >= shape.rank())
      context.fail("axis " + std::to_string(axis) + " is out of range for rank " + std::to_string(shape.rank()));
    result.push_back(static_cast<int>(normalized));
  }
  std::sort(result.begin(), result.end());
  if (std::adjacent_find(result.begin(), result.end()) != result.end()) context.fail("an axis is repeated");
  return result;
}

Shape reduced_shape(const Shape& shape, const std::vector<int>& axes, bool keepdims) {
  std::vector<std::int64_t> dims;
  for (int axis = 0; axis < shape.rank(); ++axis) {
    const bool reduced = std::find(axes.begin(), axes.end(), axis) != axes.end();
    if (!reduced)
      dims.push_back(shape[axis]);
    else if (keepdims)
      dims.push_back(1);
  }
  return Shape(std::move(dims));
}

}  // namespace kiln::detail
