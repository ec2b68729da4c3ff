#include <kiln/layers/merging.hpp>

#include <optional>
#include <string>

#include <kiln/core/error.hpp>
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

Concatenate::Concatenate(std::int64_t axis, const Config& options)
    : LayerHandle(std::make_shared<ConcatenateLayer>(options.with("axis", axis))) {}

KILN_REGISTER_LAYER("kiln>Add", AddLayer);
KILN_REGISTER_LAYER("kiln>Subtract", SubtractLayer);
KILN_REGISTER_LAYER("kiln>Multiply", MultiplyLayer);
KILN_REGISTER_LAYER("kiln>Average", AverageLayer);
KILN_REGISTER_LAYER("kiln>Maximum", MaximumLayer);
KILN_REGISTER_LAYER("kiln>Minimum", MinimumLayer);
KILN_REGISTER_LAYER("kiln>Concatenate", ConcatenateLayer);

}  // namespace kiln
