#include <kiln/layers/merging/merging.hpp>

#include <algorithm>
#include <optional>
#include <string>

#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

namespace {

// Every input's shape, named by position, for messages.
std::vector<std::pair<std::string, Shape>> named_shapes(const std::vector<Shape>& shapes) {
  std::vector<std::pair<std::string, Shape>> named;
  for (std::size_t i = 0; i < shapes.size(); ++i) named.emplace_back("input " + std::to_string(i), shapes[i]);
  return named;
}

// build_for counts the inputs of the first call only; later calls are counted here.
void check_count(const Layer& layer, std::size_t count) {
  if (count < 2) throw ConfigError(layer.describe() + ": takes at least 2 inputs, got " + std::to_string(count));
}

std::vector<Shape> shapes_of(const std::vector<Tensor>& tensors) {
  std::vector<Shape> shapes;
  for (const Tensor& tensor : tensors) shapes.push_back(tensor.shape());
  return shapes;
}

}  // namespace

// ---- Add, Subtract, Multiply, Average, Maximum, Minimum ---------------------------------------------

MergeLayer::MergeLayer(const Config& config, const std::string& class_name, Kind kind)
    : Layer(config, class_name), kind_(kind) {
  config_reader(config).finish();
}

void MergeLayer::check_shapes(const std::vector<Shape>& input_shapes) const {
  if (kind_ == Kind::subtract && input_shapes.size() != 2)
    throw ConfigError(describe() + ": takes exactly 2 inputs, got " + std::to_string(input_shapes.size()));
  check_count(*this, input_shapes.size());
  std::optional<Shape> result = input_shapes.at(0);
  for (std::size_t i = 1; i < input_shapes.size() && result; ++i)
    result = try_broadcast_shapes(*result, input_shapes[i]);
  if (!result) shape_error("inputs must broadcast to one shape", named_shapes(input_shapes));
}

void MergeLayer::build(const std::vector<Shape>& input_shapes) { check_shapes(input_shapes); }

namespace {
// Each input's mask, empty where it has none.
std::vector<Tensor> masks_of(const std::vector<Tensor>& inputs) {
  std::vector<Tensor> masks;
  for (const Tensor& input : inputs) masks.push_back(input.graph().mask_of(input));
  return masks;
}
bool all_valid(const std::vector<Tensor>& masks) {
  return std::all_of(masks.begin(), masks.end(), [](const Tensor& m) { return m.valid(); });
}
// Masks hold 1 and 0: their maximum is the logical or.
Tensor any_of(const std::vector<Tensor>& masks) {
  Tensor result = masks.front();
  for (std::size_t i = 1; i < masks.size(); ++i) result = ops::maximum(result, masks[i]);
  return result;
}
}  // namespace

std::vector<Tensor> MergeLayer::compute_mask(const std::vector<Tensor>& inputs, const Tensor&) const {
  const std::vector<Tensor> masks = masks_of(inputs);
  if (!all_valid(masks)) return {};
  return {any_of(masks)};
}

std::vector<Tensor> MergeLayer::call(const std::vector<Tensor>& inputs, const CallArgs&) {
  check_shapes(shapes_of(inputs));
  Tensor result = inputs[0];
  for (std::size_t i = 1; i < inputs.size(); ++i) {
    switch (kind_) {
      case Kind::add:
      case Kind::average:
        result = result + inputs[i];
        break;
      case Kind::subtract:
        result = result - inputs[i];
        break;
      case Kind::multiply:
        result = result * inputs[i];
        break;
      case Kind::maximum:
        result = ops::maximum(result, inputs[i]);
        break;
      case Kind::minimum:
        result = ops::minimum(result, inputs[i]);
        break;
    }
  }
  if (kind_ == Kind::average) result = result * (1.0 / static_cast<double>(inputs.size()));
  return {result};
}

// ---- Concatenate ------------------------------------------------------------------------------------

ConcatenateLayer::ConcatenateLayer(const Config& config) : Layer(config, "Concatenate") {
  ConfigReader args = config_reader(config);
  axis_ = args.integer("axis", -1);
  args.finish();
}

Config ConcatenateLayer::get_config() const {
  Config config = base_config();
  config.set("axis", axis_);
  return config;
}

void ConcatenateLayer::check_shapes(const std::vector<Shape>& input_shapes) const {
  check_count(*this, input_shapes.size());
  const Shape& first = input_shapes.at(0);
  const int rank = first.rank();
  const std::int64_t axis = axis_ < 0 ? axis_ + rank : axis_;
  if (rank == 0 || axis < 0 || axis >= rank)
    shape_error("axis " + std::to_string(axis_) + " is out of range for the inputs", named_shapes(input_shapes));
  for (const Shape& shape : input_shapes) {
    if (shape.rank() != rank) shape_error("inputs must have the same rank", named_shapes(input_shapes));
    for (int a = 0; a < rank; ++a)
      if (a != axis && shape[a] != first[a])
        shape_error("inputs must have equal dimensions except on axis " + std::to_string(axis_),
                    named_shapes(input_shapes));
    // The parts' offsets along the axis must be known when the graph (and its gradient) is built.
    if (shape[static_cast<int>(axis)] == Shape::unknown)
      shape_error("cannot concatenate along an unknown dimension (the batch)", named_shapes(input_shapes));
  }
}

void ConcatenateLayer::build(const std::vector<Shape>& input_shapes) { check_shapes(input_shapes); }

std::vector<Tensor> ConcatenateLayer::call(const std::vector<Tensor>& inputs, const CallArgs&) {
  check_shapes(shapes_of(inputs));
  return {ops::concat(inputs, static_cast<int>(axis_))};
}

std::vector<Tensor> ConcatenateLayer::compute_mask(const std::vector<Tensor>& inputs, const Tensor&) const {
  std::vector<Tensor> masks = masks_of(inputs);
  if (std::none_of(masks.begin(), masks.end(), [](const Tensor& m) { return m.valid(); })) return {};
  const int rank = inputs.front().rank();
  const int axis = static_cast<int>(axis_ < 0 ? axis_ + rank : axis_);
  const Tensor& first_mask = *std::find_if(masks.begin(), masks.end(), [](const Tensor& m) { return m.valid(); });
  if (axis < first_mask.rank()) {
    // Joined along the masked axes (the steps): the masks join too, all ones for an input without one.
    for (std::size_t i = 0; i < masks.size(); ++i)
      if (!masks[i].valid()) masks[i] = ops::ones_like(ops::max(inputs[i], {-1}));
    return {ops::concat(masks, axis)};
  }
  if (!all_valid(masks)) return {};  // an input without a mask keeps every step
  return {any_of(masks)};
}

// ---- Dot ------------------------------------------------------------------------------------------------

DotLayer::DotLayer(const Config& config) : Layer(config, "Dot") {
  ConfigReader args = config_reader(config);
  if (!args.has("axes")) args.fail("the argument 'axes' is required");
  axes_ = args.int_or_ints("axes", 0, axes_is_list_);
  normalize_ = args.boolean("normalize", false);
  args.finish();
  if (axes_.size() != 2 && axes_is_list_)
    args.fail("axes must be an int or a list of two ints, got " + Config::from_ints(axes_).to_string());
  if (!axes_is_list_) axes_.push_back(axes_[0]);
}

Config DotLayer::get_config() const {
  Config config = base_config();
  config.set("axes", axes_is_list_ ? Config::from_ints(axes_) : Config(axes_[0]));
  config.set("normalize", normalize_);
  return config;
}

std::pair<int, int> DotLayer::checked_axes(const std::vector<Shape>& input_shapes) const {
  const Shape& x = input_shapes.at(0);
  const Shape& y = input_shapes.at(1);
  if (x.rank() < 2 || y.rank() < 2)
    shape_error("needs two inputs of rank 2 or more (a batch axis and a contracted axis)", {{"x", x}, {"y", y}});
  int axes[2];
  for (int i = 0; i < 2; ++i) {
    const int rank = input_shapes[static_cast<std::size_t>(i)].rank();
    const std::int64_t axis = axes_[static_cast<std::size_t>(i)];
    if (axis >= rank || axis < -rank)
      shape_error("axis " + std::to_string(axis) + " does not exist in input " + std::to_string(i) + " of rank " +
                      std::to_string(rank),
                  {{"x", x}, {"y", y}});
    axes[i] = static_cast<int>(axis < 0 ? axis + rank : axis);
    if (axes[i] == 0) shape_error("cannot contract the batch axis 0", {{"x", x}, {"y", y}});
  }
  if (x[axes[0]] != Shape::unknown && y[axes[1]] != Shape::unknown && x[axes[0]] != y[axes[1]])
    shape_error("the contracted axes differ in size: " + std::to_string(x[axes[0]]) + " (axis " +
                    std::to_string(axes[0]) + " of x) and " + std::to_string(y[axes[1]]) + " (axis " +
                    std::to_string(axes[1]) + " of y)",
                {{"x", x}, {"y", y}});
  return {axes[0], axes[1]};
}

void DotLayer::build(const std::vector<Shape>& input_shapes) { checked_axes(input_shapes); }

namespace {

// The product of dims [first, last) of `shape`; ShapeError through `fail` when one is unknown.
template <class Fail>
std::int64_t known_product(const Shape& shape, int first, int last, const Fail& fail) {
  std::int64_t product = 1;
  for (int axis = first; axis < last; ++axis) {
    if (shape[axis] == Shape::unknown) fail();
    product *= shape[axis];
  }
  return product;
}

}  // namespace

// batch_dot as one batched matmul: x with its contracted axis moved last, squashed to (batch, X, d); y with
// its contracted axis moved to 1, squashed to (batch, d, Y); the (batch, X, Y) product then takes x's and
// y's remaining dimensions back.
std::vector<Tensor> DotLayer::call(const std::vector<Tensor>& inputs, const CallArgs&) {
  const auto [ax, ay] = checked_axes({inputs[0].shape(), inputs[1].shape()});
  Tensor x = inputs[0], y = inputs[1];
  if (normalize_) {
    x = ops::l2_normalize(x, {ax});
    y = ops::l2_normalize(y, {ay});
  }
  std::vector<std::int64_t> x_perm, y_perm{0, ay}, out_dims{-1};
  for (int axis = 0; axis < x.rank(); ++axis)
    if (axis != ax) x_perm.push_back(axis);
  x_perm.push_back(ax);
  for (int axis = 1; axis < y.rank(); ++axis)
    if (axis != ay) y_perm.push_back(axis);
  if (ax != x.rank() - 1) x = ops::transpose(x, x_perm);
  if (ay != 1) y = ops::transpose(y, y_perm);
  const auto unknown = [&] {
    shape_error("needs the inputs' dimensions besides the batch known", {{"x", x.shape()}, {"y", y.shape()}});
  };
  const std::int64_t depth = known_product(x.shape(), x.rank() - 1, x.rank(), unknown);
  const std::int64_t rows = known_product(x.shape(), 1, x.rank() - 1, unknown);
  const std::int64_t columns = known_product(y.shape(), 2, y.rank(), unknown);
  for (int axis = 1; axis < x.rank() - 1; ++axis) out_dims.push_back(x.shape()[axis]);
  for (int axis = 2; axis < y.rank(); ++axis) out_dims.push_back(y.shape()[axis]);
  if (out_dims.size() == 1) out_dims.push_back(1);  // Keras: (batch, 1) rather than (batch,)
  const Tensor product = ops::matmul(ops::reshape(x, {-1, rows, depth}), ops::reshape(y, {-1, depth, columns}));
  return {ops::reshape(product, out_dims)};
}

Dot::Dot(std::int64_t axes, const Config& options)
    : LayerHandle(std::make_shared<DotLayer>(options.with("axes", axes))) {}
Dot::Dot(std::int64_t x_axis, std::int64_t y_axis, const Config& options)
    : LayerHandle(std::make_shared<DotLayer>(options.with("axes", Config::from_ints({x_axis, y_axis})))) {}

Concatenate::Concatenate(std::int64_t axis, const Config& options)
    : LayerHandle(std::make_shared<ConcatenateLayer>(options.with("axis", axis))) {}

KILN_REGISTER_LAYER("kiln>Add", AddLayer);
KILN_REGISTER_LAYER("kiln>Subtract", SubtractLayer);
KILN_REGISTER_LAYER("kiln>Multiply", MultiplyLayer);
KILN_REGISTER_LAYER("kiln>Average", AverageLayer);
KILN_REGISTER_LAYER("kiln>Maximum", MaximumLayer);
KILN_REGISTER_LAYER("kiln>Minimum", MinimumLayer);
KILN_REGISTER_LAYER("kiln>Concatenate", ConcatenateLayer);
KILN_REGISTER_LAYER("kiln>Dot", DotLayer);

}  // namespace kiln
