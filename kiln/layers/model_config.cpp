#include <kiln/layers/model_base.hpp>

#include <functional>
#include <map>

#include <kiln/core/error.hpp>
#include <kiln/layers/detail/model_state.hpp>
#include <kiln/layers/operation.hpp>

namespace kiln {

using detail::is_input_layer;

// ---- configs of models ----------------------------------------------------------------------------------------

namespace {
Config history(const std::string& layer, int call, int output) {
  return {{"keras_history", Config::list({Config(layer), Config(call), Config(output)})}};
}
}  // namespace

void ModelBase::check_members_are_separate() const {
  std::map<const Layer*, const Layer*> owner;  // every sublayer of a member, with the member holding it
  std::function<void(const Layer&, const Layer&)> claim = [&](const Layer& member, const Layer& layer) {
    for (const LayerPtr& child : layer.layers()) {
      owner.emplace(child.get(), &member);
      claim(member, *child);
    }
  };
  for (const Node& node : nodes_) claim(*node.layer, *node.layer);
  // In call order, so the first offending call is the one named.
  for (const Node& node : nodes_)
    if (const auto found = owner.find(node.layer.get()); found != owner.end())
      throw ConfigError(describe() + ": " + node.layer->describe() + " is called by the model and also belongs to " +
                        found->second->describe() +
                        "; a saved config cannot say they are one layer. Call a standalone layer in both places "
                        "instead (a kiln::ReversibleEmbedding and a kiln::PositionEmbedding, not the parts of a "
                        "TokenAndPositionEmbedding)");
}

Config ModelBase::graph_config() const {
  check_members_are_separate();
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
    if (const auto* operation = dynamic_cast<const OperationLayer*>(node.layer.get())) {
      // A keras.ops call: its arguments as Keras writes them, each tensor a reference.
      Config call = operation->arguments_with([&](std::size_t k) { return ref_config(node.inputs.at(k)); });
      if (!call.contains("kwargs")) call.set("kwargs", Config::map());
      inbound[found->second].push_back(call);
      continue;
    }
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

  // A keras.ops call: its tensors, wherever they stand in its args and kwargs, become the layer's inputs, and
  // the arguments keep a marker in their place.
  bool try_operation_call(Pending& p, OperationLayer& operation) {
    const Config& call = p.calls[p.next];
    std::vector<Tensor> inputs;
    bool ready = true;
    std::function<Config(const Config&)> mark = [&](const Config& value) -> Config {
      if (keras_history(value) != nullptr) {
        Tensor t;
        if (!resolve(value, t)) ready = false;
        inputs.push_back(t);
        return {{"__tensor__", static_cast<std::int64_t>(inputs.size() - 1)}};
      }
      if (value.is_list()) {
        Config list = Config::list();
        for (const Config& item : value.as_list()) list.push_back(mark(item));
        return list;
      }
      if (value.is_map()) {
        Config map = Config::map();
        for (const auto& [key, item] : value.items()) map.set(key, mark(item));
        return map;
      }
      return value;
    };
    const Config* given_args = call.find("args");
    const Config* given_kwargs = call.find("kwargs");
    Config arguments = {
        {"args", given_args != nullptr ? mark(*given_args) : Config::list()},
        {"kwargs", given_kwargs != nullptr && given_kwargs->is_map() ? mark(*given_kwargs) : Config::map()}};
    if (!ready) return false;
    if (inputs.empty()) throw ConfigError(who_ + ": operation '" + p.name + "' is called on no tensor");
    operation.set_arguments(arguments);
    outputs_of_[p.name].push_back((*p.layer)(inputs));
    ++p.next;
    return true;
  }

  bool try_call(Pending& p) {
    if (auto* operation = dynamic_cast<OperationLayer*>(p.layer.get())) return try_operation_call(p, *operation);
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

}  // namespace kiln
