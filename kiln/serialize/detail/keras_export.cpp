#include <kiln/serialize/detail/keras_export.hpp>

#include <algorithm>
#include <functional>
#include <set>
#include <utility>

#include <kiln/core/error.hpp>
#include <kiln/core/names.hpp>
#include <kiln/layers/operation.hpp>

namespace kiln::detail {

const std::map<std::string, KerasLayerClass>& keras_layer_classes() {
  static const std::map<std::string, KerasLayerClass> classes = [] {
    std::map<std::string, KerasLayerClass> table;
    for (const char* name : {"BatchNormalization",
                             "Conv1D",
                             "Conv1DTranspose",
                             "Conv2D",
                             "Conv2DTranspose",
                             "Cropping1D",
                             "Cropping2D",
                             "Dense",
                             "DepthwiseConv2D",
                             "Bidirectional",
                             "Embedding",
                             "Flatten",
                             "GroupNormalization",
                             "InputLayer",
                             "GRU",
                             "LSTM",
                             "LayerNormalization",
                             "Masking",
                             "Normalization",
                             "PReLU",
                             "Permute",
                             "RMSNormalization",
                             "RepeatVector",
                             "Rescaling",
                             "ReversibleEmbedding",
                             "SeparableConv1D",
                             "SeparableConv2D",
                             "SimpleRNN",
                             "TimeDistributed",
                             "UpSampling1D",
                             "UpSampling2D",
                             "ZeroPadding1D",
                             "ZeroPadding2D"})
      table[name] = {};
    for (const char* name :
         {"Add", "Attention", "Average", "Concatenate", "Dot", "Maximum", "Minimum", "Multiply", "Subtract"})
      table[name].list_input = true;
    // Keras's layers that call _build_at_init() (or set built) in __init__: their build_config is null.
    for (const char* name : {"Activation",
                             "ActivityRegularization",
                             "AveragePooling1D",
                             "AveragePooling2D",
                             "Dropout",
                             "ELU",
                             "GaussianDropout",
                             "GaussianNoise",
                             "GlobalAveragePooling1D",
                             "GlobalAveragePooling2D",
                             "GlobalMaxPooling1D",
                             "GlobalMaxPooling2D",
                             "InputLayer",
                             "LeakyReLU",
                             "Masking",
                             "MaxPooling1D",
                             "MaxPooling2D",
                             "ReLU",
                             "Reshape",
                             "Softmax",
                             "SpatialDropout1D",
                             "SpatialDropout2D",
                             "UnitNormalization"})
      table[name].built_at_init = true;
    for (const char* name : {"BatchNormalization", "Bidirectional", "GRU", "GlobalAveragePooling1D", "LSTM",
                             "SimpleRNN", "Softmax", "TimeDistributed"})
      table[name].mask_argument = true;
    table["MultiHeadAttention"].build_arguments = {"query_shape", "value_shape", "key_shape"};
    // keras.applications' own layers. CustomScaleLayer and StochasticDepth have no build(), so Keras builds
    // them at init.
    table["LayerScale"].module = "keras.src.applications.convnext";
    table["StochasticDepth"].module = "keras.src.applications.convnext";
    table["StochasticDepth"].built_at_init = true;
    table["CustomScaleLayer"].module = "keras.src.applications.inception_resnet_v2";
    table["CustomScaleLayer"].list_input = true;
    table["CustomScaleLayer"].built_at_init = true;
    return table;
  }();
  return classes;
}

namespace {

const std::set<std::string>& model_classes() {
  static const std::set<std::string> classes = {"Functional", "Sequential"};
  return classes;
}

Config dtype_policy(const std::string& name) {
  return {
      {"module", "keras"}, {"class_name", "DTypePolicy"}, {"config", {{"name", name}}}, {"registered_name", Config()}};
}

// A serialized object ({"class_name", "config", "registered_name"}) in Keras's form, from `module` when it is
// one of kiln's built-ins, under its own package's name otherwise.
Config keras_object(const Config& object, const std::string& module) {
  if (!object.is_map() || !object.contains("class_name")) return object;
  const Config* registered = object.find("registered_name");
  const bool builtin = registered == nullptr || registered->is_null() || registered->as_string().rfind("kiln>", 0) == 0;
  Config result = {{"module", builtin ? Config(module) : Config(package_part(registered->as_string()))},
                   {"class_name", object.at("class_name")},
                   {"config", object.contains("config") ? object.at("config") : Config::map()},
                   {"registered_name", builtin ? Config() : *registered}};
  return result;
}

// A dtype policy object in Keras's form: Quantized/Int4DTypePolicy and DTypePolicyMap (with every policy in it) are
// keras.dtype_policies objects; a DTypePolicy's module is "keras", as Keras writes it.
Config keras_policy(const Config& policy) {
  if (!policy.is_map() || !policy.contains("class_name")) return policy;
  const std::string kind = policy.get_string("class_name", "");
  if (kind == "DTypePolicy") return keras_object(policy, "keras");
  Config result = keras_object(policy, "keras.dtype_policies");
  if (kind != "DTypePolicyMap") return result;
  Config arguments = result.at("config");
  if (!arguments.is_map()) return result;
  if (const Config* fallback = arguments.find("default_policy"); fallback != nullptr && fallback->is_map())
    arguments.set("default_policy", keras_policy(*fallback));
  if (const Config* entries = arguments.find("policy_map"); entries != nullptr && entries->is_map()) {
    Config written = Config::map();
    for (const auto& [path, entry] : entries->items()) written.set(path, keras_policy(entry));
    arguments.set("policy_map", written);
  }
  return result.with("config", arguments);
}

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A layer's arguments with their nested objects in Keras's form.
Config keras_arguments(const Config& config, bool input_layer) {
  if (!config.is_map()) return config;
  Config result = Config::map();
  for (const auto& [key, value] : config.items()) {
    if (key == "dtype" && !input_layer) {
      // Null (an unbuilt layer that takes its dtype from its first input) stays null: Keras reads it as its
      // default policy, kiln as "from the input".
      // (A quantized layer's QuantizedDTypePolicy is already Keras's object.)
      result.set(key, value.is_null() ? Config() : value.is_map() ? keras_policy(value) : dtype_policy(value.as_string()));
    } else if (ends_with(key, "_initializer") && value.is_map()) {
      result.set(key, keras_object(value, "keras.initializers"));
    } else if (ends_with(key, "_regularizer") && value.is_map()) {
      result.set(key, keras_object(value, "keras.regularizers"));
    } else if (ends_with(key, "_constraint") && value.is_map()) {
      result.set(key, keras_object(value, "keras.constraints"));
    } else if (key == "quantization_config" && value.is_map()) {
      // Int8QuantizationConfig and its quantizers (AbsMaxQuantizer) are keras.quantizers objects.
      Config quantization = keras_object(value, "keras.quantizers");
      Config arguments = quantization.at("config");
      if (arguments.is_map())
        for (const char* quantizer : {"weight_quantizer", "activation_quantizer"})
          if (const Config* given = arguments.find(quantizer); given != nullptr && given->is_map())
            arguments.set(quantizer, keras_object(*given, "keras.quantizers"));
      result.set(key, quantization.with("config", arguments));
    } else {
      result.set(key, value);
    }
  }
  return result;
}

// Keras's get_build_config: the shapes build() saw (as the layer's build_config() reports them), by the names
// of Keras's build() arguments.
Config keras_build_config(const Layer& layer, const KerasLayerClass* keras_class) {
  const Config build = layer.build_config();
  if (!build.is_map()) return Config();
  if (const Config* shape = build.find("input_shape")) return {{"input_shape", *shape}};
  const Config* shapes = build.find("input_shapes");
  if (shapes == nullptr) return build;
  if (keras_class != nullptr && !keras_class->build_arguments.empty()) {
    Config named = Config::map();
    const std::vector<Config>& list = shapes->as_list();
    for (std::size_t i = 0; i < list.size() && i < keras_class->build_arguments.size(); ++i)
      named.set(keras_class->build_arguments[i], list[i]);
    return {{"shapes_dict", named}};
  }
  return {{"input_shape", *shapes}};
}

Config export_model(const ModelBase& model, const Config& compile_config);

// One layer as Keras serializes it (without the "name" and "inbound_nodes" of a functional model's entry).
Config export_layer(const Layer& layer) {
  if (const auto* model = dynamic_cast<const ModelBase*>(&layer)) return export_model(*model, Config());
  if (const auto* operation = dynamic_cast<const OperationLayer*>(&layer))
    return {{"module", operation->keras_module()},
            {"class_name", operation->class_name()},
            {"config", operation->get_config()},
            {"registered_name", operation->class_name()}};
  const Config serialized = serialize_layer(layer);
  const std::string& class_name = layer.class_name();
  const std::string registered = serialized.get_string("registered_name", "");
  const auto found = keras_layer_classes().find(class_name);
  const bool keras = found != keras_layer_classes().end() && registered.rfind("kiln>", 0) == 0;
  const bool input_layer = class_name == "InputLayer";
  Config arguments = keras_arguments(serialized.at("config"), input_layer);
  if (input_layer) {
    // Keras's InputLayer config: its shape, dtype, sparse, ragged, name and optional.
    arguments = {{"batch_shape", arguments.at("batch_shape")},
                 {"dtype", arguments.at("dtype")},
                 {"sparse", false},
                 {"ragged", false},
                 {"name", arguments.at("name")},
                 {"optional", false}};
  }
  // A wrapper's layers (Bidirectional's "layer" and "backward_layer", TimeDistributed's "layer") in Keras's form.
  for (const char* key : {"layer", "backward_layer"}) {
    const Config* wrapped = arguments.find(key);
    if (wrapped == nullptr || !wrapped->is_map() || !wrapped->contains("config")) continue;
    const std::string wrapped_name = wrapped->at("config").get_string("name", "");
    for (const LayerPtr& child : layer.layers())
      if (child->name() == wrapped_name) arguments.set(key, export_layer(*child));
  }
  const bool keras_layers = keras && found->second.module == "keras.layers";
  Config entry = {{"module", keras ? Config(found->second.module) : Config(package_part(registered))},
                  {"class_name", class_name},
                  {"config", arguments},
                  {"registered_name", keras_layers ? Config() : Config(keras ? class_name : registered)}};
  if (!keras || !found->second.built_at_init) {
    const Config build = keras_build_config(layer, keras ? &found->second : nullptr);
    if (!build.is_null()) entry.set("build_config", build);
  }
  return entry;
}

// The dtype Keras records for an output of `node`: an integer input's declared dtype, else the layer's.
std::string tensor_dtype(const ModelBase::Node& node) {
  if (node.layer->class_name() == "InputLayer") return node.layer->get_config().get_string("dtype");
  return dtype_name(node.layer->dtype());
}

class FunctionalExport {
 public:
  explicit FunctionalExport(const ModelBase& model) : model_(model) {
    const std::vector<ModelBase::Node>& nodes = model.nodes();
    std::map<const Layer*, int> calls;
    for (const ModelBase::Node& node : nodes) call_index_.push_back(calls[node.layer.get()]++);
  }

  Config keras_tensor(const ModelBase::TensorRef& ref) const {
    const ModelBase::Node& node = model_.nodes().at(static_cast<std::size_t>(ref.node));
    return {{"class_name", "__keras_tensor__"},
            {"config",
             {{"shape", Config::from_shape(node.output_shapes.at(static_cast<std::size_t>(ref.output)))},
              {"dtype", tensor_dtype(node)},
              {"keras_history", history(ref)}}}};
  }

  Config history(const ModelBase::TensorRef& ref) const {
    const ModelBase::Node& node = model_.nodes().at(static_cast<std::size_t>(ref.node));
    return Config::list(
        {Config(node.layer->name()), Config(call_index_.at(static_cast<std::size_t>(ref.node))), Config(ref.output)});
  }

  Config inbound_nodes(const Layer& layer) const {
    const auto found = keras_layer_classes().find(layer.class_name());
    const bool list_input = found != keras_layer_classes().end() && found->second.list_input;
    const bool mask_argument = (found != keras_layer_classes().end() && found->second.mask_argument) ||
                               dynamic_cast<const ModelBase*>(&layer) != nullptr;
    Config calls = Config::list();
    for (const ModelBase::Node& node : model_.nodes()) {
      if (node.layer.get() != &layer || (node.inputs.empty() && layer.class_name() == "InputLayer")) continue;
      if (const auto* operation = dynamic_cast<const OperationLayer*>(&layer)) {
        Config call = operation->arguments_with([&](std::size_t k) { return keras_tensor(node.inputs.at(k)); });
        if (!call.contains("kwargs")) call.set("kwargs", Config::map());
        calls.push_back(call);
        continue;
      }
      Config inputs = Config::list();
      for (const ModelBase::TensorRef& ref : node.inputs) inputs.push_back(keras_tensor(ref));
      Config kwargs = Config::map();
      for (const auto& [name, ref] : node.tensor_args) kwargs.set(name, keras_tensor(ref));
      if (node.options.is_map())
        for (const auto& [name, value] : node.options.items()) kwargs.set(name, value);
      if (mask_argument && !kwargs.contains("mask")) kwargs.set("mask", Config());
      calls.push_back({{"args", list_input ? Config::list({inputs}) : inputs}, {"kwargs", kwargs}});
    }
    return calls;
  }

  // Keras writes a model of one input (or output) as one triple rather than a list of them.
  Config triples(const std::vector<ModelBase::TensorRef>& refs) const {
    Config list = Config::list();
    for (const ModelBase::TensorRef& ref : refs) list.push_back(history(ref));
    return refs.size() == 1 ? list.as_list().front() : list;
  }

 private:
  const ModelBase& model_;
  std::vector<int> call_index_;
};

Config export_functional(const ModelBase& model) {
  model.check_members_are_separate();
  const FunctionalExport graph(model);
  Config layers = Config::list();
  for (const LayerPtr& layer : keras_layer_order(model)) {
    Config entry = export_layer(*layer);
    entry.set("name", layer->name());
    entry.set("inbound_nodes", graph.inbound_nodes(*layer));
    layers.push_back(entry);
  }
  std::vector<ModelBase::TensorRef> inputs;
  for (const int node : model.input_nodes()) inputs.push_back({node, 0});
  return {{"name", model.name()},
          {"trainable", model.trainable()},
          {"layers", layers},
          {"input_layers", graph.triples(inputs)},
          {"output_layers", graph.triples(model.output_refs())}};
}

Config export_sequential(const ModelBase& model) {
  Config layers = Config::list();
  if (!model.input_nodes().empty())
    layers.push_back(export_layer(*model.nodes().at(static_cast<std::size_t>(model.input_nodes().front())).layer));
  for (const LayerPtr& layer : model.ordered_layers()) layers.push_back(export_layer(*layer));
  Config config = {{"name", model.name()},
                   {"trainable", model.trainable()},
                   {"dtype", dtype_policy(model.policy_name())},
                   {"layers", layers}};
  if (model.built()) config.set("build_input_shape", Config::from_shape(model.input_shapes().at(0)));
  return config;
}

// A keras-hub model (a backbone) as keras-hub saves it: its constructor's arguments, built at init.
Config export_arguments_model(const ModelBase& model, const Config& compile_config) {
  const Config serialized = serialize_layer(model);
  Config entry = {{"module", model.keras_module()},
                  {"class_name", model.class_name()},
                  {"config", keras_arguments(serialized.at("config"), false)},
                  {"registered_name", serialized.at("registered_name")}};
  entry.set("build_config", {{"input_shape", Config()}});
  entry.set("compile_config", compile_config.is_null() ? Config::map() : export_keras_compile_config(compile_config));
  return entry;
}

Config export_model(const ModelBase& model, const Config& compile_config) {
  if (!model.keras_module().empty()) return export_arguments_model(model, compile_config);
  const bool sequential = model.class_name() == "Sequential";
  Config entry = {{"module", sequential ? "keras" : "keras.src.models.functional"},
                  {"class_name", sequential ? "Sequential" : "Functional"},
                  {"config", sequential ? export_sequential(model) : export_functional(model)},
                  {"registered_name", sequential ? Config() : Config("Functional")}};
  // Keras's Functional builds when made, so it writes no input shape; a Sequential writes the one it built for.
  entry.set("build_config",
            {{"input_shape", sequential && model.built() ? Config::from_shape(model.input_shapes().at(0)) : Config()}});
  entry.set("compile_config", compile_config.is_null() ? Config::map() : export_keras_compile_config(compile_config));
  return entry;
}

}  // namespace

Config export_keras_model_config(const ModelBase& model, const Config& compile_config) {
  if (!model_classes().count(model.class_name()) && model.keras_module().empty())
    throw ConfigError(model.describe() + ": only Sequential, Functional and keras-hub models are written as Keras files");
  return export_model(model, compile_config);
}

namespace {

// A layer entry as Keras's legacy serialization writes it.
Config legacy_entry(const Config& entry) {
  const Config& registered = entry.at("registered_name");
  const bool custom = !registered.is_null() && registered.as_string() != "Functional";
  Config config = entry.at("config");
  if (config.is_map() && config.contains("layers")) {
    Config layers = Config::list();
    for (const Config& layer : config.get_list("layers")) layers.push_back(legacy_entry(layer));
    config.set("layers", layers);
  }
  const Config* module = entry.find("module");
  const bool operation =
      module != nullptr && module->type() == Config::Type::string && module->as_string().rfind("keras.src.ops", 0) == 0;
  Config legacy = {{"class_name", custom ? registered : entry.at("class_name")}, {"config", config}};
  if (operation) legacy = {{"module", *module}, {"class_name", entry.at("class_name")}, {"config", config}};
  for (const char* key : {"name", "inbound_nodes"})
    if (const Config* value = entry.find(key)) legacy.set(key, *value);
  return legacy;
}

}  // namespace

Config export_keras_legacy_model_config(const ModelBase& model) {
  if (!model.keras_module().empty())
    throw ConfigError(model.describe() + ": keras-hub models are written as .keras files (save_keras_model), as "
                      "keras-hub saves them; Keras's legacy .h5 format does not hold them");
  return legacy_entry(export_keras_model_config(model));
}

// Keras's Function.operations (keras/src/ops/function.py, map_graph): nodes sorted topologically by a depth
// first walk from the outputs; each node's depth is the longest path from it to an output, each layer's the
// largest of its nodes'; layers by decreasing depth, ties by the order the walk first met them. Inputs that no
// output depends on come at depth 0.
std::vector<LayerPtr> keras_layer_order(const ModelBase& model) {
  if (model.class_name() == "Sequential") return model.ordered_layers();
  const std::vector<ModelBase::Node>& nodes = model.nodes();
  std::vector<int> finished_order;           // nodes from the inputs to the outputs
  std::vector<char> state(nodes.size(), 0);  // 0 new, 1 in progress, 2 finished
  std::map<const Layer*, int> first_seen;
  std::function<void(int)> walk = [&](int n) {
    const auto index = static_cast<std::size_t>(n);
    if (state[index] != 0) return;
    state[index] = 1;
    first_seen.emplace(nodes[index].layer.get(), static_cast<int>(first_seen.size()));
    for (const ModelBase::TensorRef& ref : nodes[index].inputs) walk(ref.node);
    for (const auto& [name, ref] : nodes[index].tensor_args) walk(ref.node);
    state[index] = 2;
    finished_order.push_back(n);
  };
  for (const ModelBase::TensorRef& ref : model.output_refs()) walk(ref.node);

  std::map<int, int> node_depth;
  std::map<const Layer*, int> layer_depth;
  for (auto it = finished_order.rbegin(); it != finished_order.rend(); ++it) {
    const ModelBase::Node& node = nodes[static_cast<std::size_t>(*it)];
    int depth = node_depth.emplace(*it, 0).first->second;
    auto [entry, inserted] = layer_depth.emplace(node.layer.get(), depth);
    if (!inserted) depth = entry->second = std::max(entry->second, depth);
    node_depth[*it] = depth;
    auto raise = [&](int parent) { node_depth[parent] = std::max(node_depth[parent], depth + 1); };
    for (const ModelBase::TensorRef& ref : node.inputs) raise(ref.node);
    for (const auto& [name, ref] : node.tensor_args) raise(ref.node);
  }
  for (const int input : model.input_nodes()) {
    const Layer* layer = nodes[static_cast<std::size_t>(input)].layer.get();
    if (layer_depth.emplace(layer, 0).second) first_seen[layer] = -1;
  }
  std::vector<LayerPtr> layers;
  for (const ModelBase::Node& node : nodes)
    if (layer_depth.count(node.layer.get()) && std::find(layers.begin(), layers.end(), node.layer) == layers.end())
      layers.push_back(node.layer);
  std::stable_sort(layers.begin(), layers.end(), [&](const LayerPtr& a, const LayerPtr& b) {
    const int da = layer_depth.at(a.get()), db = layer_depth.at(b.get());
    return da != db ? da > db : first_seen.at(a.get()) < first_seen.at(b.get());
  });
  return layers;
}

Config export_keras_compile_config(const Config& compile_config) {
  auto metrics_of = [&](const std::string& key) {
    Config metrics = Config::list();
    if (const Config* given = compile_config.find(key); given != nullptr && given->is_list())
      for (const Config& metric : given->as_list()) metrics.push_back(keras_object(metric, "keras.metrics"));
    return metrics.size() > 0 ? metrics : Config();
  };
  Config loss = compile_config.at("loss");
  if (loss.is_list()) {
    Config list = Config::list();
    for (const Config& one : loss.as_list()) list.push_back(keras_object(one, "keras.losses"));
    loss = list;
  } else {
    loss = keras_object(loss, "keras.losses");
  }
  Config optimizer = keras_object(compile_config.at("optimizer"), "keras.optimizers");
  if (optimizer.is_map() && optimizer.at("config").is_map())
    if (const Config* rate = optimizer.at("config").find("learning_rate"); rate != nullptr && rate->is_map())
      optimizer.set("config",
                    optimizer.at("config").with("learning_rate", keras_object(*rate, "keras.optimizers.schedules")));
  return {{"optimizer", optimizer},
          {"loss", loss},
          {"loss_weights", Config()},
          {"metrics", metrics_of("metrics")},
          {"weighted_metrics", metrics_of("weighted_metrics")},
          {"run_eagerly", false},
          {"steps_per_execution", 1},
          {"jit_compile", false}};
}

}  // namespace kiln::detail
