#include <kiln/layers/model_base.hpp>

#include <algorithm>

#include <kiln/core/error.hpp>
#include <kiln/layers/detail/model_state.hpp>

namespace kiln {

using detail::is_input_layer;

// ---- SequentialModel ----------------------------------------------------------------------------------------

SequentialModel::SequentialModel(const Config& config) : ModelBase(config, "Sequential") {
  ConfigReader args = config_reader(config);
  const Config& layers = args.value("layers");
  const Config& build_shape = args.value("build_input_shape");
  args.finish();
  if (!layers.is_null())
    for (const Config& entry : layers.as_list("Sequential argument 'layers'")) add(layer_from_config(entry));
  if (!built() && !build_shape.is_null()) build_for(build_shape.as_shape("Sequential argument 'build_input_shape'"));
}

void SequentialModel::add(const LayerPtr& layer) {
  if (!layer) throw ValueError(describe() + ": add() of an empty layer");
  if (is_input_layer(layer)) {
    if (input_layer_ || !stack_.empty()) config_error("an InputLayer can only be the first layer");
    input_layer_ = layer;
    build_for(static_cast<const InputLayer&>(*layer).batch_shape());
    return;
  }
  if (std::find(stack_.begin(), stack_.end(), layer) != stack_.end())
    config_error("'" + layer->name() + "' is already in the stack");
  stack_.push_back(layer);
  if (!built()) return;
  try {
    rebuild(input_shapes().at(0));
  } catch (...) {
    stack_.pop_back();  // a layer that does not fit is not kept
    rebuild(input_shapes().at(0));
    throw;
  }
}

void SequentialModel::add_input(const Tensor& input) {
  const std::shared_ptr<const LayerCall>& call = input.valid() ? layer_call_of(input) : nullptr;
  if (!call || !is_input_layer(call->layer))
    config_error("a Sequential starts from a kiln::Input (or an input shape), and this tensor is not one");
  add(call->layer);
}

void SequentialModel::add_input(const Shape& input_shape) {
  if (input_shape.rank() == 0) config_error("an input shape needs a batch dimension first, got ()");
  add(std::make_shared<InputLayer>(
      Config{{"batch_shape", Config::from_shape(input_shape)}, {"dtype", dtype_name(dtype())}}));
}

// Keras builds an unbuilt Sequential at its first fit or predict, from the data: the batch unknown.
bool SequentialModel::build_from_data(const std::vector<Array>& inputs) {
  if (built()) return true;
  if (inputs.size() != 1 || inputs[0].shape().rank() == 0) return false;
  Shape shape = inputs[0].shape();
  shape[0] = Shape::unknown;
  take_input_dtype(inputs[0].dtype());  // as a first call on this data would
  build_for(shape);
  return true;
}

void SequentialModel::pop() {
  if (stack_.empty()) config_error("pop() on an empty Sequential");
  stack_.pop_back();
  if (built()) rebuild(input_shapes().at(0));
}

void SequentialModel::build(const std::vector<Shape>& input_shapes) {
  // A first call on a placeholder of concrete batch (4, 3) builds for (None, 3): a fixed batch would let
  // predict take only batches of exactly that size.
  Shape shape = input_shapes.at(0);
  if (shape.rank() > 0) shape[0] = Shape::unknown;
  rebuild(shape);
}

void SequentialModel::rebuild(const Shape& input_shape) {
  const Tensor input = input_layer_ ? static_cast<InputLayer&>(*input_layer_).make_input()
                                    : Input(input_shape, dtype(), name() + "_input");
  Tensor x = input;
  for (const LayerPtr& layer : stack_) x = (*layer)(x);
  record({input}, {x});
}

Config SequentialModel::get_config() const {
  Config config = base_config();
  Config layers = Config::list();
  if (input_layer_) layers.push_back(serialize_layer(*input_layer_));
  for (const LayerPtr& layer : stack_) layers.push_back(serialize_layer(*layer));
  config.set("layers", layers);
  config.set("build_input_shape", built() ? Config::from_shape(input_shapes().at(0)) : Config());
  return config;
}

KILN_REGISTER_LAYER("kiln>Sequential", SequentialModel);

}  // namespace kiln
