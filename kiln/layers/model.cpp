#include <kiln/layers/model.hpp>

#include <algorithm>
#include <cstring>
#include <iostream>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include <kiln/core/detail/program_pool.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/program.hpp>
#include <kiln/layers/detail/replay.hpp>

namespace kiln {

// ---- InputLayer and Input --------------------------------------------------------------------------------

InputLayer::InputLayer(const Config& config) : Layer(config, "InputLayer") {
  ConfigReader args = config_reader(config);
  if (args.has("batch_shape")) {
    batch_shape_ = args.value("batch_shape").as_shape("InputLayer argument 'batch_shape'");
  } else if (args.has("shape")) {  // Keras's InputLayer(shape=(8,)): the batch dimension is implied
    const Shape shape = args.value("shape").as_shape("InputLayer argument 'shape'");
    std::vector<std::int64_t> dims = {args.integer("batch_size", Shape::unknown)};
    dims.insert(dims.end(), shape.dims().begin(), shape.dims().end());
    batch_shape_ = Shape(dims);
  } else {
    args.fail("needs 'batch_shape' (or 'shape' without the batch dimension)");
  }
  args.value("shape");
  args.value("batch_size");
  if (args.boolean("sparse", false) || args.boolean("ragged", false))
    args.fail("sparse and ragged inputs are not supported");
  args.finish();
  build_for(batch_shape_);
}

Config InputLayer::get_config() const {
  Config config = {{"batch_shape", Config::from_shape(batch_shape_)}, {"dtype", dtype_name(dtype())}};
  config.set("name", name());
  return config;
}

Tensor InputLayer::placeholder_in(Graph& graph) {
  LayerPtr self = weak_from_this().lock();
  if (!self) throw LayerStateError(describe() + " is not held by a std::shared_ptr; create it with std::make_shared");
  const Tensor placeholder = graph.placeholder(batch_shape_, dtype(), name());
  auto record = std::make_shared<LayerCall>();
  record->layer = std::move(self);
  record->outputs = {placeholder};
  return placeholder.with_producer(record, 0);
}

Tensor InputLayer::make_input() {
  graphs_.push_back(std::make_shared<Graph>());
  return placeholder_in(*graphs_.back());
}

Tensor Input(const Shape& shape, DType dtype, const std::string& name) {
  Config config = {{"batch_shape", Config::from_shape(shape)}, {"dtype", dtype_name(dtype)}};
  if (!name.empty()) config.set("name", name);
  return std::make_shared<InputLayer>(config)->make_input();
}

namespace {
bool is_input_layer(const LayerPtr& layer) { return dynamic_cast<const InputLayer*>(layer.get()) != nullptr; }
}  // namespace

// ---- replay across graphs -----------------------------------------------------------------------------------

namespace detail {
namespace {

Tensor import_with(const Tensor& tensor, Graph& graph, std::map<const LayerCall*, std::vector<Tensor>>& memo) {
  if (&tensor.graph() == &graph) return tensor;
  const std::shared_ptr<const LayerCall>& call = tensor.producer();
  if (!call)
    throw ValueError(
        "tensor '" + tensor.name() +
        "' lives in another graph and was not made by a layer, so it cannot be brought into this one; "
        "make model inputs with kiln::Input and combine tensors with layers (kiln::Add, kiln::Concatenate)");
  auto found = memo.find(call.get());
  if (found == memo.end()) {
    std::vector<Tensor> outputs;
    if (auto* input = dynamic_cast<InputLayer*>(call->layer.get())) {
      outputs = {input->placeholder_in(graph)};
    } else {
      std::vector<Tensor> inputs;
      for (const Tensor& t : call->inputs) inputs.push_back(import_with(t, graph, memo));
      CallArgs args;
      for (const auto& [name, t] : call->args.tensors()) args.tensor(name, import_with(t, graph, memo));
      if (call->args.options().is_map())
        for (const auto& [name, value] : call->args.options().items()) args.option(name, value);
      args.training(call->args.training());
      outputs = (*call->layer)(inputs, args);
    }
    found = memo.emplace(call.get(), std::move(outputs)).first;
  }
  return found->second.at(static_cast<std::size_t>(tensor.producer_output()));
}

}  // namespace

Tensor import_tensor(const Tensor& tensor, Graph& graph) {
  std::map<const LayerCall*, std::vector<Tensor>> memo;
  return import_with(tensor, graph, memo);
}

}  // namespace detail

// ---- ModelBase: recording ----------------------------------------------------------------------------------

struct ModelBase::Inference {
  Graph graph;
  std::vector<Tensor> inputs, outputs;
  std::unique_ptr<detail::ProgramPool> programs;  // one Program per concurrent caller
};

struct ModelBase::Usage {
  std::mutex mutex;
  int inferring = 0;
  int training = 0;  // nested on the trainer's thread
  std::thread::id trainer;
};

ModelBase::ModelBase(const Config& config, std::string class_name)
    : Layer(config, std::move(class_name)), usage_(std::make_shared<Usage>()) {}

ModelBase::Use ModelBase::use_for_inference(const std::string& what) const {
  std::lock_guard<std::mutex> lock(usage_->mutex);
  if (usage_->training > 0 && usage_->trainer != std::this_thread::get_id())
    throw LayerStateError(describe() + "." + what +
                          ": the model is training on another thread; predict and evaluate "
                          "with it once fit returns (or with a copy: load_model of a checkpoint)");
  ++usage_->inferring;
  return Use(this, false);
}

ModelBase::Use ModelBase::use_for_training(const std::string& what) const {
  std::lock_guard<std::mutex> lock(usage_->mutex);
  const bool trainer_here = usage_->training > 0 && usage_->trainer == std::this_thread::get_id();
  if (usage_->training > 0 && !trainer_here)
    throw LayerStateError(describe() + "." + what + ": the model is already training on another thread");
  if (usage_->inferring > 0 && !trainer_here)
    throw LayerStateError(describe() + "." + what + ": " + std::to_string(usage_->inferring) +
                          " predict or evaluate call(s) are running with this model on other threads; training "
                          "would change the weights they read (start it once they return)");
  ++usage_->training;
  usage_->trainer = std::this_thread::get_id();
  return Use(this, true);
}

ModelBase::Use::~Use() {
  if (!model_) return;
  Usage& usage = *model_->usage_;
  std::lock_guard<std::mutex> lock(usage.mutex);
  if (training_)
    --usage.training;
  else
    --usage.inferring;
}

std::pair<std::size_t, std::size_t> ModelBase::input_count() const {
  if (input_nodes_.empty()) return {1, 1};
  return {input_nodes_.size(), input_nodes_.size()};
}

void ModelBase::clear_record() {
  nodes_.clear();
  input_nodes_.clear();
  outputs_.clear();
  std::lock_guard<std::mutex> lock(inference_mutex_);
  inference_.reset();
}

namespace {

struct Recorder {
  const ModelBase& model;
  std::vector<ModelBase::Node>& nodes;
  std::map<const Layer*, int> input_by_layer;                    // kiln::Input tensors, by their InputLayer
  std::map<std::pair<const Graph*, NodeId>, int> input_by_node;  // raw placeholders given as inputs
  std::map<const LayerCall*, int> node_of_call;
  std::vector<const Graph*> node_graph;  // per recorded node: the graph its call ran in (null for inputs)

  bool same_node(const ModelBase::Node& a, const ModelBase::Node& b) const {
    auto same_ref = [](const ModelBase::TensorRef& x, const ModelBase::TensorRef& y) {
      return x.node == y.node && x.output == y.output;
    };
    if (a.layer != b.layer || a.inputs.size() != b.inputs.size() || a.tensor_args.size() != b.tensor_args.size() ||
        a.options != b.options)
      return false;
    for (std::size_t i = 0; i < a.inputs.size(); ++i)
      if (!same_ref(a.inputs[i], b.inputs[i])) return false;
    for (std::size_t i = 0; i < a.tensor_args.size(); ++i)
      if (a.tensor_args[i].first != b.tensor_args[i].first ||
          !same_ref(a.tensor_args[i].second, b.tensor_args[i].second))
        return false;
    return true;
  }

  ModelBase::TensorRef visit(const Tensor& tensor) {
    const std::shared_ptr<const LayerCall>& call = tensor.producer();
    if (call && is_input_layer(call->layer)) {
      const auto found = input_by_layer.find(call->layer.get());
      if (found == input_by_layer.end())
        throw ValueError(model.describe() + ": the outputs depend on input '" + call->layer->name() +
                         "', which is not among the model's inputs");
      return {found->second, 0};
    }
    if (const auto found = input_by_node.find({&tensor.graph(), tensor.id()}); found != input_by_node.end())
      return {found->second, 0};
    if (!call)
      throw ValueError(model.describe() + ": the outputs depend on '" + tensor.name() + "' (" +
                       tensor.node().describe() +
                       "), which no layer made; a model is made of layers: use kiln::Add, kiln::Activation, ... "
                       "or a layer of your own instead of raw ops between layers");
    if (const auto found = node_of_call.find(call.get()); found != node_of_call.end())
      return {found->second, tensor.producer_output()};
    ModelBase::Node node;
    node.layer = call->layer;
    for (const Tensor& input : call->inputs) node.inputs.push_back(visit(input));
    for (const auto& [name, t] : call->args.tensors()) node.tensor_args.emplace_back(name, visit(t));
    node.options = call->args.options();
    for (const Tensor& output : call->outputs) node.output_shapes.push_back(output.shape());
    // The same call replayed in another graph (to meet an input from there) is one node; two calls
    // in one graph are two nodes even when identical (dropout twice on one tensor draws two masks).
    const Graph* graph = call->outputs.empty() ? nullptr : &call->outputs[0].graph();
    int index = -1;
    for (std::size_t i = 0; i < nodes.size(); ++i)
      if (i < node_graph.size() && node_graph[i] != nullptr && node_graph[i] != graph && same_node(nodes[i], node))
        index = static_cast<int>(i);
    if (index < 0) {
      nodes.push_back(std::move(node));
      index = static_cast<int>(nodes.size()) - 1;
      node_graph.resize(nodes.size(), nullptr);
      node_graph[static_cast<std::size_t>(index)] = graph;
    }
    node_of_call.emplace(call.get(), index);
    return {index, tensor.producer_output()};
  }
};

}  // namespace

void ModelBase::record(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) {
  if (inputs.empty()) throw ValueError(describe() + ": a model needs at least one input");
  if (outputs.empty()) throw ValueError(describe() + ": a model needs at least one output");
  clear_record();
  Recorder recorder{*this, nodes_, {}, {}, {}, {}};
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& input = inputs[i];
    if (!input.valid()) throw ValueError(describe() + ": input " + std::to_string(i) + " is an empty Tensor");
    Node node;
    const std::shared_ptr<const LayerCall>& call = input.producer();
    if (call && is_input_layer(call->layer)) {
      node.layer = call->layer;
      recorder.input_by_layer[call->layer.get()] = static_cast<int>(nodes_.size());
    } else if (input.node().kind == NodeKind::placeholder) {
      // A placeholder the user made in a graph of their own becomes an input layer of the same shape.
      Config config = {{"batch_shape", Config::from_shape(input.shape())},
                       {"dtype", dtype_name(input.dtype())},
                       {"name", input.name()}};
      node.layer = std::make_shared<InputLayer>(config);
      recorder.input_by_node[{&input.graph(), input.id()}] = static_cast<int>(nodes_.size());
    } else {
      throw ValueError(describe() + ": input " + std::to_string(i) + " ('" + input.name() +
                       "') is not a model input; use kiln::Input(shape)");
    }
    node.output_shapes = {input.shape()};
    input_nodes_.push_back(static_cast<int>(nodes_.size()));
    nodes_.push_back(std::move(node));
  }
  for (const Tensor& output : outputs) {
    if (!output.valid()) throw ValueError(describe() + ": an output is an empty Tensor");
    outputs_.push_back(recorder.visit(output));
  }

  // Member layers, each once; auto-named layers from different graphs may share a name ("dense" made in
  // each input's graph): the later one is renamed, as Keras would have named it. Given names are claimed
  // first, so an automatic name gives way to a given one wherever it stands in the model.
  std::vector<LayerPtr> members = member_layers();
  std::set<std::string> names, taken;
  for (const LayerPtr& layer : members) {
    names.insert(layer->name());
    if (layer->name_given() && !taken.insert(layer->name()).second)
      throw ConfigError(describe() + ": two different layers are named '" + layer->name() +
                        "'; layer names must be unique within a model");
  }
  for (const LayerPtr& layer : members) {
    if (layer->name_given()) continue;
    if (taken.count(layer->name()) != 0) {
      std::string name = layer->name();
      for (int suffix = 1; names.count(name) != 0; ++suffix) name = layer->name() + "_" + std::to_string(suffix);
      layer->rename_automatic(name);
      names.insert(name);
    }
    taken.insert(layer->name());
  }
  // A model's children are exactly its member layers.
  clear_tracked_layers();
  for (const LayerPtr& layer : members) track_layer(layer, false);
}

std::vector<LayerPtr> ModelBase::member_layers() const {
  std::vector<LayerPtr> result;
  for (const Node& node : nodes_)
    if (std::find(result.begin(), result.end(), node.layer) == result.end()) result.push_back(node.layer);
  return result;
}

LayerPtr ModelBase::get_layer(const std::string& name) const {
  std::string known;
  for (const LayerPtr& layer : member_layers()) {
    if (layer->name() == name) return layer;
    known += (known.empty() ? "" : ", ") + layer->name();
  }
  throw ValueError(describe() + " has no layer named '" + name + "' (it has " + known + ")");
}

std::vector<Shape> ModelBase::input_shapes() const {
  std::vector<Shape> shapes;
  for (int index : input_nodes_) shapes.push_back(nodes_[static_cast<std::size_t>(index)].output_shapes.at(0));
  return shapes;
}

std::vector<DType> ModelBase::input_dtypes() const {
  std::vector<DType> dtypes;
  for (int index : input_nodes_) dtypes.push_back(nodes_[static_cast<std::size_t>(index)].layer->dtype());
  return dtypes;
}

std::vector<Shape> ModelBase::model_output_shapes() const {
  std::vector<Shape> shapes;
  for (const TensorRef& ref : outputs_)
    shapes.push_back(nodes_[static_cast<std::size_t>(ref.node)].output_shapes.at(static_cast<std::size_t>(ref.output)));
  return shapes;
}

bool ModelBase::linear() const {
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const Node& node = nodes_[i];
    if (i == 0) {
      if (!node.inputs.empty()) return false;
      continue;
    }
    if (node.inputs.size() != 1 || !node.tensor_args.empty() || node.inputs[0].node != static_cast<int>(i) - 1)
      return false;
  }
  return input_nodes_.size() == 1 && outputs_.size() == 1;
}

// ---- ModelBase: running --------------------------------------------------------------------------------------

std::vector<Tensor> ModelBase::apply(const std::vector<Tensor>& inputs, bool training) const {
  // Layers name themselves and count their calls as they are called: two replays at once (the first
  // predict and the first evaluate on two threads) take turns.
  std::lock_guard<std::mutex> lock(apply_mutex_);
  if (inputs.size() != input_nodes_.size())
    throw ValueError(describe() + " takes " + std::to_string(input_nodes_.size()) + " inputs, got " +
                     std::to_string(inputs.size()));
  std::vector<std::vector<Tensor>> values(nodes_.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Shape& expected = nodes_[static_cast<std::size_t>(input_nodes_[i])].output_shapes.at(0);
    const Shape& given = inputs[i].shape();
    if (!expected.accepts(given))
      shape_error("input " + std::to_string(i) + " does not fit the model's input '" +
                      nodes_[static_cast<std::size_t>(input_nodes_[i])].layer->name() + "'",
                  {{"expected", expected}, {"given", given}});
    values[static_cast<std::size_t>(input_nodes_[i])] = {inputs[i]};
  }
  auto value_of = [&](const TensorRef& ref) {
    return values.at(static_cast<std::size_t>(ref.node)).at(static_cast<std::size_t>(ref.output));
  };
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const Node& node = nodes_[i];
    if (node.inputs.empty() && is_input_layer(node.layer)) continue;
    std::vector<Tensor> node_inputs;
    for (const TensorRef& ref : node.inputs) node_inputs.push_back(value_of(ref));
    CallArgs args;
    for (const auto& [name, ref] : node.tensor_args) args.tensor(name, value_of(ref));
    if (node.options.is_map())
      for (const auto& [name, value] : node.options.items()) args.option(name, value);
    args.training(training);
    values[i] = (*node.layer)(node_inputs, args);
  }
  std::vector<Tensor> outputs;
  for (const TensorRef& ref : outputs_) outputs.push_back(value_of(ref));
  return outputs;
}

std::vector<Tensor> ModelBase::call(const std::vector<Tensor>& inputs, const CallArgs& args) {
  return apply(inputs, args.training());
}

std::shared_ptr<ModelBase::Inference> ModelBase::inference() {
  std::lock_guard<std::mutex> lock(inference_mutex_);
  if (!inference_) {
    auto inference = std::make_shared<Inference>();
    for (int index : input_nodes_) {
      const auto& input_layer = static_cast<const InputLayer&>(*nodes_[static_cast<std::size_t>(index)].layer);
      inference->inputs.push_back(
          inference->graph.placeholder(input_layer.batch_shape(), input_layer.dtype(), input_layer.name()));
    }
    inference->outputs = apply(inference->inputs, /*training=*/false);
    inference->programs = std::make_unique<detail::ProgramPool>(inference->graph, inference->outputs);
    inference_ = inference;
  }
  return inference_;  // a caller's copy keeps it alive if the model is rebuilt meanwhile
}

// The arrays predict was given, checked against the inputs (same rows, fitting shapes) and converted
// to the inputs' dtypes.
std::vector<Array> ModelBase::predict_inputs(const std::vector<Array>& given,
                                             const std::vector<Tensor>& placeholders) const {
  if (given.size() != placeholders.size())
    throw ValueError(describe() + ".predict takes " + std::to_string(placeholders.size()) + " arrays, got " +
                     std::to_string(given.size()));
  std::vector<Array> inputs;
  for (std::size_t i = 0; i < given.size(); ++i) {
    const Shape& expected = placeholders[i].shape();
    const Shape& shape = given[i].shape();
    // Rows are fed in batches, so the row count is free even where the input fixes a batch size.
    if (shape.rank() == 0 || !expected.accepts(shape, 1))
      shape_error("predict: array " + std::to_string(i) + " does not fit the input",
                  {{"input", expected}, {"array", shape}});
    if (shape[0] != given[0].shape()[0])
      shape_error("predict: the arrays have different numbers of rows",
                  {{"array 0", given[0].shape()}, {"array " + std::to_string(i), shape}});
    inputs.push_back(given[i].dtype() == placeholders[i].dtype() ? given[i] : given[i].astype(placeholders[i].dtype()));
  }
  return inputs;
}

// Batches are stacked along the first axis, so each output needs a batch dimension; another unknown
// dimension follows the batch size (a Gram matrix), which only a single batch can stack.
void ModelBase::check_stackable(const std::vector<Tensor>& outputs, std::int64_t rows, std::int64_t batch_size) const {
  for (const Tensor& output : outputs) {
    const std::vector<std::int64_t>& dims = output.shape().dims();
    if (dims.empty() || dims[0] != Shape::unknown)
      throw ValueError(describe() + ": predict needs outputs with a batch dimension, output '" + output.name() +
                       "' has shape " + output.shape().to_string());
    for (std::size_t axis = 1; axis < dims.size(); ++axis)
      if (dims[axis] == Shape::unknown && rows > batch_size)
        shape_error("predict: output '" + output.name() +
                        "' has a dimension that follows the batch size, so its batches " +
                        "cannot be stacked; predict with batch_size >= " + std::to_string(rows),
                    {{"output", output.shape()}});
  }
}

std::vector<Array> ModelBase::predict(const std::vector<Array>& given, std::int64_t batch_size) {
  if (batch_size <= 0)
    throw ValueError(describe() + ": predict batch_size must be positive, got " + std::to_string(batch_size));
  if (!built() || input_nodes_.empty())
    throw LayerStateError(describe() + " is not built; call it on a tensor, give it an Input, or build it first");
  const Use use = use_for_inference("predict");
  const std::shared_ptr<Inference> inference_graph = inference();
  const Inference& run = *inference_graph;
  const std::vector<Array> inputs = predict_inputs(given, run.inputs);
  const std::int64_t rows = inputs[0].shape()[0];
  check_stackable(run.outputs, rows, batch_size);
  const detail::ProgramPool::Lease program = run.programs->lease(std::min(batch_size, rows));

  std::vector<Array> results(run.outputs.size());
  for (std::size_t o = 0; o < results.size(); ++o) {  // what zero rows give; real batches reallocate below
    std::vector<std::int64_t> dims = run.outputs[o].shape().dims();
    for (std::int64_t& dim : dims)
      if (dim == Shape::unknown) dim = 0;
    results[o] = Array(Shape(dims), run.outputs[o].dtype());
  }
  for (std::int64_t start = 0; start < rows; start += batch_size) {
    const std::int64_t count = std::min(batch_size, rows - start);
    for (std::size_t i = 0; i < inputs.size(); ++i) program->feed(run.inputs[i], inputs[i].rows(start, count));
    program->run();
    for (std::size_t o = 0; o < results.size(); ++o) {
      const Array batch = program->view(run.outputs[o]);
      if (start == 0) {
        std::vector<std::int64_t> dims = batch.shape().dims();
        dims[0] = rows;
        results[o] = Array(Shape(dims), batch.dtype());
      }
      if (batch.shape()[0] != count)
        shape_error("predict: output '" + run.outputs[o].name() + "' does not have one row per input row (" +
                        std::to_string(count) + " rows in, " + batch.shape().to_string() + " out)",
                    {{"output", run.outputs[o].shape()}});
      results[o].set_rows(start, batch);  // ShapeError if a batch's rows are shaped differently
    }
  }
  return results;
}

Array ModelBase::predict(const Array& input, std::int64_t batch_size) {
  std::vector<Array> outputs = predict(std::vector<Array>{input}, batch_size);
  if (outputs.size() != 1)
    throw ValueError(describe() + " has " + std::to_string(outputs.size()) +
                     " outputs; use predict with a list of arrays");
  return outputs[0];
}

// ---- summary --------------------------------------------------------------------------------------------------

namespace {

std::string with_commas(std::int64_t value) {
  std::string digits = std::to_string(value);
  for (int i = static_cast<int>(digits.size()) - 3; i > 0; i -= 3) digits.insert(static_cast<std::size_t>(i), ",");
  return digits;
}

std::string readable_size(double bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int unit = 0;
  while (bytes >= 1024.0 && unit < 4) {
    bytes /= 1024.0;
    ++unit;
  }
  char buffer[32];
  std::snprintf(buffer, sizeof buffer, "%.2f %s", bytes, units[unit]);
  return buffer;
}

// Display width of UTF-8 text (the table's box characters are one column each).
std::size_t columns(const std::string& text) {
  std::size_t count = 0;
  for (unsigned char c : text) count += (c & 0xC0) != 0x80;
  return count;
}

std::string pad(const std::string& text, std::size_t width, bool right) {
  const std::size_t used = columns(text);
  const std::string fill(used < width ? width - used : 0, ' ');
  return right ? fill + text : text + fill;
}

std::string repeat(const std::string& piece, std::size_t count) {
  std::string out;
  for (std::size_t i = 0; i < count; ++i) out += piece;
  return out;
}

std::string shapes_text(const std::vector<Shape>& shapes) {
  if (shapes.size() == 1) return shapes[0].to_string();
  std::string text = "[";
  for (std::size_t i = 0; i < shapes.size(); ++i) text += (i ? ", " : "") + shapes[i].to_string();
  return text + "]";
}

}  // namespace

namespace {

struct SummaryRow {
  std::string layer, shape, params;
  std::vector<std::string> connected;  // "dense[0][0]" per input of every call of the layer
};

// One row per layer (not per call), as Keras prints it; a shared layer lists all its calls' inputs.
std::vector<SummaryRow> summary_rows(const std::vector<ModelBase::Node>& nodes, bool hide_inputs,
                                     bool show_connections) {
  std::map<const Layer*, int> calls_so_far;
  std::vector<int> call_index(nodes.size());
  for (std::size_t i = 0; i < nodes.size(); ++i) call_index[i] = calls_so_far[nodes[i].layer.get()]++;
  auto ref_text = [&](const ModelBase::TensorRef& ref) {
    const std::size_t n = static_cast<std::size_t>(ref.node);
    return nodes[n].layer->name() + "[" + std::to_string(call_index[n]) + "][" + std::to_string(ref.output) + "]";
  };
  std::vector<SummaryRow> rows;
  std::map<const Layer*, std::size_t> row_of;
  for (const ModelBase::Node& node : nodes) {
    if (hide_inputs && is_input_layer(node.layer)) continue;
    std::vector<std::string> connected;
    for (const ModelBase::TensorRef& ref : node.inputs) connected.push_back(ref_text(ref));
    for (const auto& [name, ref] : node.tensor_args) connected.push_back(ref_text(ref));
    if (const auto found = row_of.find(node.layer.get()); found != row_of.end()) {
      SummaryRow& row = rows[found->second];
      row.connected.insert(row.connected.end(), connected.begin(), connected.end());
      continue;
    }
    row_of[node.layer.get()] = rows.size();
    rows.push_back({node.layer->name() + " (" + node.layer->class_name() + ")", shapes_text(node.output_shapes),
                    with_commas(node.layer->count_params()), connected});
    if (show_connections && rows.back().connected.empty()) rows.back().connected.push_back("-");
  }
  return rows;
}

// Keras's box table: heavy rules around the header, light ones between rows, the counts right-aligned.
std::string render_table(const std::vector<SummaryRow>& rows, bool show_connections) {
  std::vector<std::string> headers = {"Layer (type)", "Output Shape", "Param #"};
  if (show_connections) headers.push_back("Connected to");
  std::vector<std::size_t> widths = {29, 22, 11, 20};
  for (const SummaryRow& row : rows) {
    widths[0] = std::max(widths[0], columns(row.layer));
    widths[1] = std::max(widths[1], columns(row.shape));
    widths[2] = std::max(widths[2], columns(row.params));
    for (const std::string& c : row.connected) widths[3] = std::max(widths[3], columns(c));
  }
  const std::size_t num_columns = headers.size();
  auto rule = [&](const char* left, const char* line, const char* middle, const char* right) {
    std::string out = left;
    for (std::size_t c = 0; c < num_columns; ++c)
      out += repeat(line, widths[c] + 2) + (c + 1 < num_columns ? middle : right);
    return out + "\n";
  };
  auto line = [&](const std::vector<std::string>& cells, const char* bar) {
    std::string out = bar;
    for (std::size_t c = 0; c < num_columns; ++c) out += " " + pad(cells[c], widths[c], c == 2) + " " + bar;
    return out + "\n";
  };
  std::string out = rule("┏", "━", "┳", "┓") + line(headers, "┃") + rule("┡", "━", "╇", "┩");
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const SummaryRow& row = rows[r];
    const std::size_t height = show_connections ? std::max<std::size_t>(1, row.connected.size()) : 1;
    for (std::size_t k = 0; k < height; ++k) {
      std::vector<std::string> cells = {k == 0 ? row.layer : "", k == 0 ? row.shape : "", k == 0 ? row.params : ""};
      if (show_connections) cells.push_back(k < row.connected.size() ? row.connected[k] : "");
      out += line(cells, "│");
    }
    out += r + 1 < rows.size() ? rule("├", "─", "┼", "┤") : rule("└", "─", "┴", "┘");
  }
  return out;
}

std::string parameter_totals(const std::vector<Weight>& weights) {
  std::int64_t trainable = 0, frozen = 0;
  double trainable_bytes = 0, frozen_bytes = 0;
  for (const Weight& weight : weights) {
    (weight.trainable ? trainable : frozen) += static_cast<std::int64_t>(weight.value.size());
    (weight.trainable ? trainable_bytes : frozen_bytes) += static_cast<double>(weight.value.nbytes());
  }
  return " Total params: " + with_commas(trainable + frozen) + " (" + readable_size(trainable_bytes + frozen_bytes) +
         ")\n" + " Trainable params: " + with_commas(trainable) + " (" + readable_size(trainable_bytes) + ")\n" +
         " Non-trainable params: " + with_commas(frozen) + " (" + readable_size(frozen_bytes) + ")\n";
}

}  // namespace

std::string ModelBase::summary_string() const {
  const bool show_connections = !linear();
  // Keras shows a Sequential model's input layer as no row of its own.
  const bool hide_inputs = dynamic_cast<const SequentialModel*>(this) != nullptr;
  return "Model: \"" + name() + "\"\n" +
         render_table(summary_rows(nodes_, hide_inputs, show_connections), show_connections) +
         parameter_totals(weights());
}

void ModelBase::summary(std::ostream& out) const { out << summary_string(); }
void ModelBase::summary() const { summary(std::cout); }

// ---- configs of models ----------------------------------------------------------------------------------------

namespace {
Config history(const std::string& layer, int call, int output) {
  return {{"keras_history", Config::list({Config(layer), Config(call), Config(output)})}};
}
}  // namespace

Config ModelBase::graph_config() const {
  std::map<const Layer*, int> calls_so_far;
  std::vector<int> call_index(nodes_.size());
  for (std::size_t i = 0; i < nodes_.size(); ++i) call_index[i] = calls_so_far[nodes_[i].layer.get()]++;
  auto ref_config = [&](const TensorRef& ref) {
    const std::size_t n = static_cast<std::size_t>(ref.node);
    return history(nodes_[n].layer->name(), call_index[n], ref.output);
  };
  std::vector<Config> entries, inbound;  // per member layer, in the order of their first calls
  std::map<const Layer*, std::size_t> entry_of;
  for (std::size_t i = 0; i < nodes_.size(); ++i) {
    const Node& node = nodes_[i];
    auto found = entry_of.find(node.layer.get());
    if (found == entry_of.end()) {
      entries.push_back(serialize_layer(*node.layer).with("name", node.layer->name()));
      inbound.push_back(Config::list());
      found = entry_of.emplace(node.layer.get(), entries.size() - 1).first;
    }
    if (node.inputs.empty() && is_input_layer(node.layer)) continue;
    Config args = Config::list();
    for (const TensorRef& ref : node.inputs) args.push_back(ref_config(ref));
    Config kwargs = Config::map();
    for (const auto& [name, ref] : node.tensor_args) kwargs.set(name, ref_config(ref));
    if (node.options.is_map())
      for (const auto& [name, value] : node.options.items()) kwargs.set(name, value);
    inbound[found->second].push_back({{"args", args}, {"kwargs", kwargs}});
  }
  Config layers = Config::list();
  for (std::size_t k = 0; k < entries.size(); ++k)
    layers.push_back(entries[k].with("inbound_nodes", std::move(inbound[k])));
  Config input_layers = Config::list();
  for (int index : input_nodes_)
    input_layers.push_back(history(nodes_[static_cast<std::size_t>(index)].layer->name(), 0, 0).at("keras_history"));
  Config output_layers = Config::list();
  for (const TensorRef& ref : outputs_) output_layers.push_back(ref_config(ref).at("keras_history"));
  return {{"layers", layers}, {"input_layers", input_layers}, {"output_layers", output_layers}};
}

namespace {
// The [layer, call, output] of a tensor reference: kiln writes {"keras_history": [...]}, Keras
// {"class_name": "__keras_tensor__", "config": {"shape": ..., "dtype": ..., "keras_history": [...]}}.
// nullptr when `ref` is no tensor reference (a plain option).
const Config* keras_history(const Config& ref) {
  if (!ref.is_map()) return nullptr;
  if (const Config* history = ref.find("keras_history")) return history;
  if (ref.get_string("class_name", "") != "__keras_tensor__") return nullptr;
  const Config* tensor = ref.find("config");
  return tensor != nullptr ? tensor->find("keras_history") : nullptr;
}
}  // namespace

namespace {

// Rebuilds a functional model's calls from its config: each layer's inbound calls run as soon as the
// tensors they refer to exist, so a shared layer's second call may wait for a later layer's output.
class GraphRestorer {
 public:
  explicit GraphRestorer(std::string who) : who_(std::move(who)) {}

  void add_layers(const std::vector<Config>& entries) {
    for (const Config& entry : entries) {
      LayerPtr layer = layer_from_config(entry);
      const std::string name = entry.get_string("name", layer->name());
      if (!outputs_of_.emplace(name, std::vector<std::vector<Tensor>>{}).second)
        throw ConfigError(who_ + ": two layers are named '" + name + "'");
      if (auto* input = dynamic_cast<InputLayer*>(layer.get())) {
        outputs_of_[name].push_back({input->make_input()});
        continue;
      }
      const Config* inbound = entry.find("inbound_nodes");
      pending_.push_back({layer, name, inbound ? inbound->as_list("inbound_nodes") : std::vector<Config>{}, 0});
    }
  }

  // Runs every call whose inputs exist until none is left; ConfigError for calls that can never run.
  void run_calls() {
    for (bool progress = true; progress;) {
      progress = false;
      for (Pending& p : pending_)
        while (p.next < p.calls.size() && try_call(p)) progress = true;
    }
    for (const Pending& p : pending_)
      if (p.next < p.calls.size())
        throw ConfigError(who_ + ": call " + std::to_string(p.next) + " of layer '" + p.name +
                          "' refers to tensors no layer makes");
  }

  // The tensors named by [layer, call, output] triples (input_layers, output_layers).
  std::vector<Tensor> tensors(const std::vector<Config>& triples, const char* what) {
    std::vector<Tensor> result;
    for (const Config& triple : triples) {
      Tensor t;
      if (!resolve({{"keras_history", triple}}, t))
        throw ConfigError(who_ + ": unknown " + what + " " + triple.to_string());
      result.push_back(t);
    }
    return result;
  }

 private:
  struct Pending {
    LayerPtr layer;
    std::string name;
    std::vector<Config> calls;
    std::size_t next = 0;
  };

  bool try_call(Pending& p) {
    const Config& call = p.calls[p.next];
    std::vector<Tensor> inputs;
    CallArgs args;
    for (const Config& ref : call.get_list("args")) {
      Tensor t;
      if (!resolve(ref, t)) return false;
      inputs.push_back(t);
    }
    if (const Config* kwargs = call.find("kwargs"); kwargs != nullptr && kwargs->is_map())
      for (const auto& [name, value] : kwargs->items()) {
        if (keras_history(value) == nullptr) {
          args.option(name, value);
          continue;
        }
        Tensor t;
        if (!resolve(value, t)) return false;
        args.tensor(name, t);
      }
    outputs_of_[p.name].push_back((*p.layer)(inputs, args));
    ++p.next;
    return true;
  }

  // False while the referenced call has not run yet.
  bool resolve(const Config& ref, Tensor& out) const {
    const Config* history = keras_history(ref);
    if (history == nullptr)
      throw ConfigError(who_ + ": " + ref.to_string() + " is not a tensor reference (keras_history)");
    const std::vector<Config>& h = history->as_list("keras_history");
    if (h.size() != 3) throw ConfigError(who_ + ": keras_history needs [layer, call, output], got " + ref.to_string());
    const auto found = outputs_of_.find(h[0].as_string("keras_history layer"));
    const std::size_t call = static_cast<std::size_t>(h[1].as_int("keras_history call"));
    const std::size_t output = static_cast<std::size_t>(h[2].as_int("keras_history output"));
    if (found == outputs_of_.end() || call >= found->second.size()) return false;
    if (output >= found->second[call].size())
      throw ConfigError(who_ + ": " + ref.to_string() + " refers to an output the layer does not have");
    out = found->second[call][output];
    return true;
  }

  std::string who_;
  std::vector<Pending> pending_;
  std::map<std::string, std::vector<std::vector<Tensor>>> outputs_of_;  // layer name -> per call outputs
};

}  // namespace

void ModelBase::restore_graph(const Config& config) {
  GraphRestorer restorer(describe());
  restorer.add_layers(config.get_list("layers"));
  restorer.run_calls();
  record(restorer.tensors(config.get_list("input_layers"), "input layer"),
         restorer.tensors(config.get_list("output_layers"), "output"));
}

// ---- FunctionalModel ----------------------------------------------------------------------------------------

FunctionalModel::FunctionalModel(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                                 const std::string& name)
    : ModelBase(name.empty() ? Config() : Config{{"name", name}}, "Functional") {
  record(inputs, outputs);
  build_for(input_shapes());
}

FunctionalModel::FunctionalModel(const Config& config) : ModelBase(config, "Functional") {
  ConfigReader args = config_reader(config);
  restore_graph({{"layers", args.value("layers")},
                 {"input_layers", args.value("input_layers")},
                 {"output_layers", args.value("output_layers")}});
  args.finish();
  build_for(input_shapes());
}

Config FunctionalModel::get_config() const {
  Config config = base_config();
  const Config graph = graph_config();  // named: a range-for over graph_config().items() would dangle
  for (const auto& [key, value] : graph.items()) config.set(key, value);
  return config;
}

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

KILN_REGISTER_LAYER("kiln>InputLayer", InputLayer);
KILN_REGISTER_LAYER("kiln>Functional", FunctionalModel);
KILN_REGISTER_LAYER("kiln>Sequential", SequentialModel);

}  // namespace kiln
