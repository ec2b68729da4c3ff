#include <kiln/layers/rnn/wrappers.hpp>

#include <algorithm>

#include <kiln/core/error.hpp>
#include <kiln/core/names.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

namespace {

// A wrapped layer's Keras paths and sublayers, under the wrapper's attribute.
std::vector<std::string> prefixed(const std::string& attribute, const std::vector<std::string>& paths) {
  std::vector<std::string> result;
  for (const std::string& path : paths) result.push_back(attribute + "/" + path);
  return result;
}

void add_sublayers(std::vector<std::pair<std::string, std::string>>& list, const std::string& attribute,
                   const Layer& layer) {
  list.emplace_back(attribute, layer.name());
  for (const auto& [path, name] : layer.keras_sublayers()) list.emplace_back(attribute + "/" + path, name);
}

// A serialized layer's config, read as a map; `who` and `key` name it in messages.
Config serialized_layer(ConfigReader& args, const std::string& key, bool required) {
  const Config& value = args.value(key);
  if (value.is_null()) {
    if (required) args.fail("the argument '" + key + "' (a serialized layer) is required");
    return value;
  }
  if (!value.is_map() || !value.contains("class_name"))
    args.fail("'" + key + "' must be a serialized layer ({\"class_name\": ..., \"config\": {...}}), got " +
              value.to_string());
  return value;
}

std::string without_prefix(const std::string& name, const std::string& prefix) {
  return name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name;
}

}  // namespace

// ---- Bidirectional -----------------------------------------------------------------------------------------

BidirectionalLayer::BidirectionalLayer(const Config& config) : Layer(config, "Bidirectional") {
  ConfigReader args = config_reader(config);
  const Config layer = serialized_layer(args, "layer", true);
  const Config backward = serialized_layer(args, "backward_layer", false);
  // Absent: Keras's default; null: Keras's None, the two outputs apart.
  const Config& merge = args.value("merge_mode");
  merge_mode_ = !config.contains("merge_mode") ? "concat" : merge.is_null() ? "" : merge.as_string("merge_mode");
  args.unsupported("weights");
  args.finish();
  if (merge_mode_ != "concat" && merge_mode_ != "sum" && merge_mode_ != "mul" && merge_mode_ != "ave" &&
      !merge_mode_.empty())
    args.fail("merge_mode must be 'concat', 'sum', 'mul', 'ave' or null, got '" + merge_mode_ + "'");

  // Keras's copies: "forward_" + the layer's name; the backward one reads the sequence from its end. Both
  // output zeros at masked steps when they return sequences, so that the merged steps line up.
  if (!std::dynamic_pointer_cast<RecurrentLayer>(layer_from_config(layer)))
    args.fail("the wrapped layer must be a recurrent layer (SimpleRNN, LSTM or GRU), got " +
              layer.get_string("class_name"));
  Config inner = layer.contains("config") ? layer.at("config") : Config::map();
  const std::string base = inner.get_string("name", "").empty() ? to_snake_case(layer.get_string("class_name"))
                                                                 : inner.get_string("name");
  const bool sequences = inner.get_bool("return_sequences", false);
  auto make = [&](Config entry, const std::string& name, const char* role) {
    Config entry_config = entry.contains("config") ? entry.at("config") : Config::map();
    if (!name.empty()) entry_config.set("name", name);
    entry_config.set("zero_output_for_mask", sequences);
    entry.set("config", entry_config);
    LayerPtr made = layer_from_config(entry);
    auto recurrent = std::dynamic_pointer_cast<RecurrentLayer>(made);
    if (!recurrent)
      args.fail(std::string("the ") + role + " layer must be a recurrent layer (SimpleRNN, LSTM or GRU), got " +
                made->describe());
    return recurrent;
  };
  forward_ = make(layer, "forward_" + without_prefix(base, "forward_"), "wrapped");
  if (backward.is_null()) {
    Config copy = layer;
    Config copy_config = inner;
    copy_config.set("go_backwards", true);
    copy.set("config", copy_config);
    backward_ = make(copy, "backward_" + without_prefix(base, "backward_"), "backward");
  } else {
    backward_ = make(backward, "", "backward");
    if (backward_->go_backwards() == forward_->go_backwards())
      args.fail("backward_layer must read the sequence the other way: its go_backwards equals the layer's");
    if (backward_->return_sequences() != forward_->return_sequences() ||
        backward_->return_state() != forward_->return_state())
      args.fail("backward_layer must agree with the layer on return_sequences and return_state");
  }
  forward_->keep_own_policy();
  backward_->keep_own_policy();
  track(forward_);
  track(backward_);
}

Config BidirectionalLayer::get_config() const {
  Config config = base_config();
  config.set("merge_mode", merge_mode_.empty() ? Config() : Config(merge_mode_));
  config.set("layer", serialize_layer(*forward_));
  config.set("backward_layer", serialize_layer(*backward_));
  return config;
}

std::vector<std::string> BidirectionalLayer::keras_weight_paths() const {
  std::vector<std::string> paths = prefixed("forward_layer", forward_->keras_weight_paths());
  for (const std::string& path : prefixed("backward_layer", backward_->keras_weight_paths())) paths.push_back(path);
  return paths;
}

std::vector<std::pair<std::string, std::string>> BidirectionalLayer::keras_sublayers() const {
  std::vector<std::pair<std::string, std::string>> list;  // in Keras's order, sorted by attribute
  add_sublayers(list, "backward_layer", *backward_);
  add_sublayers(list, "forward_layer", *forward_);
  return list;
}

std::pair<std::size_t, std::size_t> BidirectionalLayer::input_count() const {
  return {1, 1 + 2 * static_cast<std::size_t>(forward_->num_states())};
}

void BidirectionalLayer::build(const std::vector<Shape>& input_shapes) {
  const Shape& input = input_shapes.at(0);
  if (input.rank() != 3)
    shape_error("takes sequences (batch, steps, features)", {{"input", input}});
  forward_->build_for(input);
  backward_->build_for(input);
  for (const auto* wrapped : {forward_.get(), backward_.get()})
    if (wrapped->build_shapes().at(0)[2] != input[2])
      shape_error("was built for sequences of " + std::to_string(wrapped->build_shapes().at(0)[2]) + " features",
                  {{"built for", wrapped->build_shapes().at(0)}, {"input", input}});
}

std::vector<Tensor> BidirectionalLayer::call(const std::vector<Tensor>& inputs, const CallArgs& args) {
  const Shape& built_for = build_shapes().at(0);
  if (inputs[0].rank() != 3 || inputs[0].shape()[2] != built_for[2])
    shape_error("was built for sequences (batch, steps, features) of " + std::to_string(built_for[2]) + " features",
                {{"built for", built_for}, {"input", inputs[0].shape()}});
  const std::size_t states = inputs.size() - 1, half = states / 2;
  if (states != 0 && states != 2 * static_cast<std::size_t>(forward_->num_states()))
    shape_error("takes the initial states of both directions (" + std::to_string(2 * forward_->num_states()) +
                    " tensors) or none, got " + std::to_string(states),
                {{"input", inputs[0].shape()}});
  std::vector<Tensor> forward_inputs = {inputs[0]}, backward_inputs = {inputs[0]};
  for (std::size_t i = 0; i < half; ++i) {
    forward_inputs.push_back(inputs[1 + i]);
    backward_inputs.push_back(inputs[1 + half + i]);
  }
  const Outputs forward = (*forward_)(forward_inputs, args);
  const Outputs backward = (*backward_)(backward_inputs, args);
  const Tensor y = forward[0];
  // The backward layer returns its outputs in its own reading order: flipped back to the input's.
  const Tensor y_reverse = forward_->return_sequences() ? ops::flip(backward[0], 1) : backward[0];
  std::vector<Tensor> outputs;
  if (merge_mode_ == "concat")
    outputs = {ops::concat({y, y_reverse}, -1)};
  else if (merge_mode_ == "sum")
    outputs = {y + y_reverse};
  else if (merge_mode_ == "mul")
    outputs = {y * y_reverse};
  else if (merge_mode_ == "ave")
    outputs = {ops::scale(y + y_reverse, 0.5)};
  else
    outputs = {y, y_reverse};
  outputs.insert(outputs.end(), forward.begin() + 1, forward.end());
  outputs.insert(outputs.end(), backward.begin() + 1, backward.end());
  return outputs;
}

Bidirectional::Bidirectional(const LayerPtr& layer, const std::string& merge_mode, const Config& options)
    : LayerHandle(std::make_shared<BidirectionalLayer>(
          options.with("layer", serialize_layer(*layer))
              .with("merge_mode", merge_mode.empty() ? Config() : Config(merge_mode)))) {}

// ---- TimeDistributed ---------------------------------------------------------------------------------------

TimeDistributedLayer::TimeDistributedLayer(const Config& config) : Layer(config, "TimeDistributed") {
  ConfigReader args = config_reader(config);
  layer_ = layer_from_config(serialized_layer(args, "layer", true));
  args.finish();
  layer_->keep_own_policy();
  track_layer(layer_);
}

TimeDistributedLayer::TimeDistributedLayer(LayerPtr layer, const Config& options)
    : Layer(options, "TimeDistributed"), layer_(std::move(layer)) {
  ConfigReader args = config_reader(options);
  args.finish();
  if (!layer_) args.fail("needs a layer to wrap");
  layer_->keep_own_policy();  // (Keras: a wrapped layer keeps the policy it was made with)
  track_layer(layer_);
}

Config TimeDistributedLayer::get_config() const {
  Config config = base_config();
  config.set("layer", serialize_layer(*layer_));
  return config;
}

std::vector<std::string> TimeDistributedLayer::keras_weight_paths() const {
  return prefixed("layer", layer_->keras_weight_paths());
}

std::vector<std::pair<std::string, std::string>> TimeDistributedLayer::keras_sublayers() const {
  std::vector<std::pair<std::string, std::string>> list;
  add_sublayers(list, "layer", *layer_);
  return list;
}

namespace {
// (batch, ...) of one step of a (batch, steps, ...) input.
Shape step_shape(const Shape& input) {
  std::vector<std::int64_t> dims = {input[0]};
  dims.insert(dims.end(), input.dims().begin() + 2, input.dims().end());
  return Shape(std::move(dims));
}
}  // namespace

void TimeDistributedLayer::build(const Shape& input_shape) {
  if (input_shape.rank() < 3)
    shape_error("takes inputs of rank 3 or more, (batch, steps, ...)", {{"input", input_shape}});
  layer_->build_for(step_shape(input_shape));
}

Tensor TimeDistributedLayer::call(const Tensor& input, const CallArgs& args) {
  const Shape& shape = input.shape();
  if (shape.rank() < 3) shape_error("takes inputs of rank 3 or more, (batch, steps, ...)", {{"input", shape}});
  const Shape& built_for = build_shapes().at(0);
  if (shape.rank() != built_for.rank() ||
      !std::equal(shape.dims().begin() + 2, shape.dims().end(), built_for.dims().begin() + 2))
    shape_error("was built for steps of shape " +
                    Shape(std::vector<std::int64_t>(built_for.dims().begin() + 2, built_for.dims().end())).to_string(),
                {{"built for", built_for}, {"input", shape}});
  for (int axis = 2; axis < shape.rank(); ++axis)
    if (shape[axis] == Shape::unknown) shape_error("needs known dimensions after the steps", {{"input", shape}});
  // Every step at once: the steps folded into the batch, through the layer, unfolded again.
  std::vector<std::int64_t> folded = {-1};
  folded.insert(folded.end(), shape.dims().begin() + 2, shape.dims().end());
  CallArgs inner_args;
  inner_args.training(args.training());
  const Tensor output = (*layer_)(ops::reshape(input, folded), inner_args);
  // Unfolded with the input's batch and steps, which may be known only when planned.
  for (int axis = 1; axis < output.rank(); ++axis)
    if (output.shape()[axis] == Shape::unknown)
      shape_error("needs the wrapped layer's output to have known dimensions after the batch",
                  {{"input", shape}, {"output", output.shape()}});
  return ops::reshape_like(output, input, 2,
                           std::vector<std::int64_t>(output.shape().dims().begin() + 1, output.shape().dims().end()));
}

TimeDistributed::TimeDistributed(const LayerPtr& layer, const Config& options)
    : LayerHandle(std::make_shared<TimeDistributedLayer>(layer, options)) {}

KILN_REGISTER_LAYER("kiln>Bidirectional", BidirectionalLayer);
KILN_REGISTER_LAYER("kiln>TimeDistributed", TimeDistributedLayer);

}  // namespace kiln
