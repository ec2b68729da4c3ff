#include <kiln/layers/model_base.hpp>

#include <algorithm>
#include <map>
#include <set>

#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/layers/detail/model_state.hpp>
#include <kiln/layers/operation.hpp>

namespace kiln {

using detail::is_input_layer;

// ---- ModelBase: recording ----------------------------------------------------------------------------------

ModelBase::ModelBase(const Config& config, std::string class_name)
    : Layer(config, std::move(class_name)), usage_(std::make_shared<Usage>()) {}

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
    const std::shared_ptr<const LayerCall>& call = layer_call_of(tensor);
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
    const std::shared_ptr<const LayerCall>& call = layer_call_of(input);
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

std::vector<LayerPtr> ModelBase::ordered_layers() const {
  std::vector<LayerPtr> result;
  for (const LayerPtr& layer : member_layers())
    if (!is_operation(*layer)) result.push_back(layer);
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

}  // namespace kiln
