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

// ---- Add --------------------------------------------------------------------------------------------

AddLayer::AddLayer(const Config& config) : Layer(config, "Add") { config_reader(config).finish(); }

void AddLayer::check_shapes(const std::vector<Shape>& input_shapes) const {
  check_count(*this, input_shapes.size());
  std::optional<Shape> result = input_shapes.at(0);
  for (std::size_t i = 1; i < input_shapes.size() && result; ++i)
    result = try_broadcast_shapes(*result, input_shapes[i]);
  if (!result) shape_error("inputs must broadcast to one shape", named_shapes(input_shapes));
}

void AddLayer::build(const std::vector<Shape>& input_shapes) { check_shapes(input_shapes); }

std::vector<Tensor> AddLayer::call(const std::vector<Tensor>& inputs, const CallArgs&) {
  check_shapes(shapes_of(inputs));
  Tensor sum = inputs[0];
  for (std::size_t i = 1; i < inputs.size(); ++i) sum = sum + inputs[i];
  return {sum};
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
KILN_REGISTER_LAYER("kiln>Concatenate", ConcatenateLayer);

}  // namespace kiln
