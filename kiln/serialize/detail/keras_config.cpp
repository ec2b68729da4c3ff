#include <kiln/serialize/detail/keras_config.hpp>

#include <map>
#include <utility>
#include <vector>

#include <kiln/core/error.hpp>
#include <kiln/layers/layer.hpp>
#include <kiln/layers/operation.hpp>
#include <kiln/serialize/detail/keras_export.hpp>

namespace kiln::detail {

namespace {

// keras.ops calls recorded in a functional model: module keras.src.ops.numpy (core, nn, math, ...).
bool is_operation_module(const Config& module) {
  if (module.type() != Config::Type::string) return false;
  const std::string& name = module.as_string();
  return name.rfind("keras.src.ops", 0) == 0 || name.rfind("keras.ops", 0) == 0;
}

// A keras.ops call in a model's layer list: its module says so (Keras 3's config.json), or, in Keras 3's
// legacy HDF5 files, which drop the module, an operation's class with an operation's config (its name and
// none of a layer's base keys: a merge layer Add has trainable and dtype, the operation Add has neither).
bool is_operation_entry(const Config& entry) {
  if (!entry.is_map()) return false;
  if (const Config* module = entry.find("module")) return is_operation_module(*module);
  const Config* config = entry.find("config");
  return entry.get_string("class_name", "") != "" && has_keras_operation(entry.get_string("class_name")) &&
         config != nullptr && config->is_map() && !config->contains("trainable") && !config->contains("dtype");
}

// Keys only Python needs: where to import a class from, and the object ids Keras's serialization uses
// to share one DTypePolicy between layers.
bool python_only(const std::string& key, const Config& value) {
  return (key == "module" && !is_operation_module(value)) || key == "shared_object_id" ||
         (key == "registered_name" && value.is_null());
}

Config without_python_keys(const Config& value) {
  if (value.is_list()) {
    Config list = Config::list();
    for (const Config& item : value.as_list()) list.push_back(without_python_keys(item));
    return list;
  }
  if (!value.is_map()) return value;
  Config map = Config::map();
  for (const auto& [key, item] : value.items())
    if (!python_only(key, item)) map.set(key, without_python_keys(item));
  return map;
}

// Keras's build_config: {"input_shape": shape} for one input, {"shapes_dict": {"query_shape": ...,
// "value_shape": ...}} for layers whose build takes several (in the order of their build arguments).
Config import_build_config(const Config& build) {
  if (!build.is_map()) return Config();
  if (const Config* shapes = build.find("shapes_dict"); shapes != nullptr && shapes->is_map()) {
    Config list = Config::list();
    for (const auto& [name, shape] : shapes->items()) list.push_back(shape);
    if (list.size() == 1) return {{"input_shape", list.as_list().front()}};
    return {{"input_shapes", list}};
  }
  const Config* shape = build.find("input_shape");
  if (shape == nullptr || shape->is_null()) return Config();
  // A layer called on a list (Attention, the merge layers) has the list of their shapes as its input_shape.
  if (shape->is_list() && !shape->as_list().empty() && shape->as_list().front().is_list())
    return {{"input_shapes", *shape}};
  return build;
}

bool is_tensor_reference(const Config& value) {
  return value.is_map() &&
         (value.contains("keras_history") || value.get_string("class_name", "") == "__keras_tensor__");
}

// One call of a layer. Keras 3: {"args": [...], "kwargs": {...}}, where a merge layer's one argument is
// the list of its inputs. Keras 2: [[layer, node, tensor, kwargs], ...], one entry an input.
Config import_node(const Config& node, const std::string& where) {
  Config args = Config::list();
  Config kwargs = Config::map();
  auto add_kwargs = [&](const Config& given) {
    if (!given.is_map()) return;
    for (const auto& [name, value] : given.items())
      if (!value.is_null()) kwargs.set(name, value);  // Keras passes mask=None, training=None explicitly
  };
  if (node.is_list()) {
    for (const Config& input : node.as_list()) {
      const std::vector<Config>& parts = input.as_list(where + ": an inbound node's input");
      if (parts.size() < 3 || parts.size() > 4)
        throw ConfigError(where + ": an inbound node's input is [layer, node, tensor(, kwargs)], got " +
                          input.to_string());
      args.push_back({{"keras_history", Config::list({parts[0], parts[1], parts[2]})}});
      if (parts.size() == 4) add_kwargs(parts[3]);
    }
    return {{"args", args}, {"kwargs", kwargs}};
  }
  if (!node.is_map()) throw ConfigError(where + ": an inbound node is a map or a list, got " + node.to_string());
  if (const Config* given = node.find("args"))
    for (const Config& arg : given->as_list(where + ": an inbound node's args")) {
      if (arg.is_list() && !arg.as_list().empty() && is_tensor_reference(arg.as_list().front())) {
        for (const Config& item : arg.as_list()) args.push_back(item);  // a merge layer's list of inputs
      } else {
        args.push_back(arg);
      }
    }
  if (const Config* given = node.find("kwargs")) add_kwargs(*given);
  return {{"args", args}, {"kwargs", kwargs}};
}

Config import_layer(const Config& entry, const std::string& where);

// Keras 2's InputLayer: batch_input_shape for batch_shape.
Config import_input_layer(Config config) {
  if (const Config* shape = config.find("batch_input_shape")) {
    if (!config.contains("batch_shape")) config.set("batch_shape", *shape);
    config.erase("batch_input_shape");
  }
  return config;
}

// Sequential: Keras 2.0-2.1 wrote the layer list as the whole config; Keras 2 put the input shape on the
// first layer ("batch_input_shape") where Keras 3 writes an InputLayer.
Config import_sequential(const Config& given, const std::string& where) {
  Config config = given.is_list() ? Config{{"layers", given}} : given;
  const std::vector<Config>& layers = config.get_list("layers");
  Config imported = Config::list();
  for (std::size_t i = 0; i < layers.size(); ++i) {
    Config layer = layers[i];
    if (i == 0 && layer.is_map() && layer.get_string("class_name", "") != "InputLayer") {
      const Config& first = layer.at("config");
      if (const Config* shape = first.find("batch_input_shape"); shape != nullptr && !shape->is_null()) {
        // Keras 2 wrote the batch size the model was built with (simple_lstm: 25, predicting 100 rows); only
        // a stateful layer depends on it.
        Config batch_shape = *shape;
        if (batch_shape.is_list() && !batch_shape.as_list().empty() && !first.get_bool("stateful", false)) {
          std::vector<Config> dims = batch_shape.as_list();
          dims.front() = Config();
          batch_shape = Config::list(dims);
        }
        Config input = {{"batch_shape", batch_shape}, {"dtype", first.get_string("dtype", "float32")}};
        input.set("name", first.get_string("name", "input") + "_input");
        imported.push_back({{"class_name", "InputLayer"}, {"config", input}});
      }
    }
    imported.push_back(import_layer(layer, where + ": layers[" + std::to_string(i) + "]"));
  }
  config.set("layers", imported);
  config.erase("build_input_shape");  // Keras 3 repeats the InputLayer's shape here
  return config;
}

Config import_functional(Config config, const std::string& where) {
  Config imported = Config::list();
  const std::vector<Config>& layers = config.get_list("layers");
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const Config& layer = layers[i];
    Config entry = import_layer(layer, where + ": layers[" + std::to_string(i) + "]");
    const bool operation = is_operation_entry(layer);
    if (const Config* nodes = layer.find("inbound_nodes")) {
      Config calls = Config::list();
      // An operation's call keeps its arguments as they are: tensors and constants (an index, a number) mixed.
      for (const Config& node : nodes->as_list(where + ": inbound_nodes"))
        calls.push_back(operation ? node : import_node(node, where));
      entry.set("inbound_nodes", calls);
    }
    imported.push_back(entry);
  }
  config.set("layers", imported);
  // Keras 3 writes a model of one input (or output) as one [layer, node, tensor] triple, not a list of them.
  for (const char* key : {"input_layers", "output_layers"}) {
    const Config* triples = config.find(key);
    if (triples != nullptr && triples->is_list() && !triples->as_list().empty() &&
        triples->as_list().front().type() == Config::Type::string)
      config.set(key, Config::list({*triples}));
  }
  return config;
}

// SimpleRNN, LSTM and GRU as Keras 2 and tf.keras wrote them: tf.keras's time_major (false: Keras 3's only
// layout), and a GRU without reset_after, which Keras 2 did not have (its GRU reset before the product).
Config import_recurrent(Config config, const std::string& class_name, const std::string& here) {
  if (const Config* time_major = config.find("time_major")) {
    if (!time_major->is_null() && time_major->as_bool(here + ": time_major"))
      throw ConfigError(here +
                        ": time_major = true (sequences as (steps, batch, features)) is not supported; "
                        "kiln's recurrent layers take (batch, steps, features), as Keras 3's");
    config.erase("time_major");
  }
  if (class_name == "GRU" && !config.contains("reset_after")) config.set("reset_after", false);
  return config;
}

// tf.keras 2.x wrote a dtype into every initializer's config, which no Keras initializer takes now.
Config without_initializer_dtypes(Config config) {
  for (const std::string& key : config.keys()) {
    const Config& value = config.at(key);
    const bool initializer = key.size() > 12 && key.compare(key.size() - 12, 12, "_initializer") == 0;
    if (!initializer || !value.is_map() || !value.contains("config") || !value.at("config").is_map()) continue;
    Config arguments = value.at("config");
    if (arguments.erase("dtype")) config.set(key, value.with("config", arguments));
  }
  return config;
}

// The other names keras.layers exports some classes under (keras.layers.MaxPool2D is MaxPooling2D). Keras
// writes a class's own name, but reads these too.
const std::map<std::string, std::string>& keras_aliases() {
  static const std::map<std::string, std::string> aliases = {
      {"AvgPool1D", "AveragePooling1D"},
      {"AvgPool2D", "AveragePooling2D"},
      {"Convolution1D", "Conv1D"},
      {"Convolution1DTranspose", "Conv1DTranspose"},
      {"Convolution2D", "Conv2D"},
      {"Convolution2DTranspose", "Conv2DTranspose"},
      {"GlobalAvgPool1D", "GlobalAveragePooling1D"},
      {"GlobalAvgPool2D", "GlobalAveragePooling2D"},
      {"GlobalMaxPool1D", "GlobalMaxPooling1D"},
      {"GlobalMaxPool2D", "GlobalMaxPooling2D"},
      {"MaxPool1D", "MaxPooling1D"},
      {"MaxPool2D", "MaxPooling2D"},
      {"SeparableConvolution1D", "SeparableConv1D"},
      {"SeparableConvolution2D", "SeparableConv2D"},
  };
  return aliases;
}

// keras-hub still registers its layers under their keras-nlp names too: files from before the rename say
// "keras_nlp>TransformerEncoder" for kiln's "keras_hub>TransformerEncoder".
Config keras_hub_name(const Config& registered) {
  const std::string old_package = "keras_nlp>";
  if (registered.type() != Config::Type::string || registered.as_string().rfind(old_package, 0) != 0) return registered;
  return Config("keras_hub>" + registered.as_string().substr(old_package.size()));
}

// A class kiln has no layer for: ConfigError naming the layer, its class and where it is, and listing the
// Keras classes kiln reads.
void check_layer_class(const Config& entry, const std::string& class_name, const std::string& here) {
  const Config* registered = entry.find("registered_name");
  const std::string key = registered != nullptr && !registered->is_null() && class_name != "Functional"
                              ? keras_hub_name(*registered).as_string()
                              : class_name;
  try {
    layer_registry().key_of(key);
  } catch (const ConfigError& error) {
    std::string supported;
    for (const auto& [name, keras_class] : keras_layer_classes()) supported += (supported.empty() ? "" : ", ") + name;
    throw ConfigError(here + ": kiln has no layer '" + key + "' (" + error.what() +
                      "). The Keras classes kiln reads: " + supported + ", Sequential and Functional (docs/keras.md)");
  }
}

// One serialized layer (or nested model) of a model's "layers".
Config import_layer(const Config& entry, const std::string& where) {
  if (!entry.is_map()) throw ConfigError(where + ": a layer is a map, got " + entry.to_string());
  std::string class_name = entry.get_string("class_name");
  const std::string name = entry.contains("config") && entry.at("config").is_map()
                               ? entry.at("config").get_string("name", entry.get_string("name", ""))
                               : entry.get_string("name", "");
  const std::string here = where + ": layer '" + name + "' (" + class_name + ")";
  if (is_operation_entry(entry)) {
    // A keras.ops call (GetItem, Add, ...): kiln's OperationLayer of that class.
    if (!has_keras_operation(class_name))
      throw ConfigError(where + ": operation '" + name + "' is keras.ops's " + class_name + " (" +
                        entry.at("module").as_string() + "), which kiln does not implement");
    Config result = {{"class_name", class_name},
                     {"config", entry.contains("config") ? entry.at("config") : Config::map()},
                     {"registered_name", std::string(kOperationPackage) + ">" + class_name}};
    if (entry.contains("name")) result.set("name", entry.at("name"));
    return result;
  }
  if (class_name == "Lambda" || class_name == "TFOpLambda" || class_name == "SlicingOpLambda")
    throw ConfigError(here +
                      ": a Lambda layer holds Python code, which kiln cannot run; Keras's safe_mode "
                      "refuses it too. Rewrite it as a registered layer (KILN_REGISTER_LAYER)");
  if (class_name == "Model") class_name = "Functional";
  if (const auto alias = keras_aliases().find(class_name); alias != keras_aliases().end()) class_name = alias->second;
  check_layer_class(entry, class_name, here);
  Config config = entry.contains("config") ? entry.at("config") : Config::map();
  if (class_name == "Sequential") config = import_sequential(config, here);
  if (class_name == "Functional") config = import_functional(config, here);
  if (class_name == "InputLayer" && config.is_map()) {
    config = import_input_layer(config);
  } else if (config.is_map()) {
    // Keras 2 let any layer carry the model's input shape; import_sequential made it an InputLayer.
    config.erase("batch_input_shape");
    config.erase("batch_size");
    config = without_initializer_dtypes(config);
    if (class_name == "SimpleRNN" || class_name == "LSTM" || class_name == "GRU")
      config = import_recurrent(config, class_name, here);
    // The wrappers hold whole layer entries.
    for (const char* key : {"layer", "backward_layer"})
      if (const Config* wrapped = config.find(key);
          (class_name == "Bidirectional" || class_name == "TimeDistributed") && wrapped != nullptr && wrapped->is_map())
        config.set(key, import_layer(*wrapped, here + ": " + key));
  }
  Config result = {{"class_name", class_name}, {"config", config}};
  if (const Config* registered = entry.find("registered_name"); registered != nullptr && !registered->is_null())
    result.set("registered_name", class_name == "Functional" ? Config("Functional") : keras_hub_name(*registered));
  if (const Config* build = entry.find("build_config")) {
    const Config imported = import_build_config(*build);
    if (!imported.is_null()) result.set("build_config", imported);
  }
  if (const Config* compiled = entry.find("compile_config"); compiled != nullptr && compiled->size() > 0)
    result.set("compile_config", *compiled);
  if (entry.contains("name")) result.set("name", entry.at("name"));
  return result;
}

}  // namespace

namespace {

// Keras 2's optimizer arguments as Keras 3 names them.
Config import_optimizer(const Config& optimizer) {
  if (!optimizer.is_map() || !optimizer.contains("config")) return optimizer;
  Config arguments = optimizer.at("config");
  if (!arguments.is_map()) return optimizer;
  if (const Config* lr = arguments.find("lr"); lr != nullptr && !arguments.contains("learning_rate")) {
    arguments.set("learning_rate", *lr);
  }
  arguments.erase("lr");
  if (const Config* decay = arguments.find("decay")) {
    const double rate = decay->is_null() ? 0.0 : decay->as_double("the optimizer's decay");
    if (rate != 0.0) {
      const Config& learning_rate = arguments.at("learning_rate");
      if (learning_rate.is_map())
        throw ConfigError("the optimizer has both a learning-rate schedule and Keras 2's decay");
      arguments.set("learning_rate", {{"class_name", "InverseTimeDecay"},
                                      {"config",
                                       {{"initial_learning_rate", learning_rate},
                                        {"decay_steps", 1},
                                        {"decay_rate", rate},
                                        {"staircase", false},
                                        {"name", "InverseTimeDecay"}}}});
    }
    arguments.erase("decay");
  }
  return optimizer.with("config", arguments);
}

}  // namespace

Config import_keras_compile_config(const Config& keras) {
  const Config given = without_python_keys(keras);
  if (!given.is_map()) throw ConfigError("a compile config is a map, got " + given.to_string());
  if (const Config* value = given.find("loss_weights"); value != nullptr && !value->is_null())
    throw ConfigError("loss_weights " + value->to_string() + " is not supported by kiln");
  const Config* optimizer = given.find("optimizer");
  if (optimizer == nullptr || optimizer->is_null()) optimizer = given.find("optimizer_config");
  const Config* loss = given.find("loss");
  if (loss == nullptr || loss->is_null()) return Config();
  // Keras compiles a config without an optimizer with compile()'s default, "rmsprop".
  const Config keras_default("rmsprop");
  if (optimizer == nullptr || optimizer->is_null()) optimizer = &keras_default;
  Config compiled = {{"optimizer", import_optimizer(*optimizer)}, {"loss", *loss}};
  if (const Config* metrics = given.find("metrics"); metrics != nullptr && !metrics->is_null())
    compiled.set("metrics", *metrics);
  if (const Config* weighted = given.find("weighted_metrics"); weighted != nullptr && !weighted->is_null())
    compiled.set("weighted_metrics", *weighted);
  return compiled;
}

bool written_by_keras2(const std::string& keras_version) {
  return !keras_version.empty() && keras_version.rfind("3.", 0) != 0;
}

Config with_keras2_activations(const Config& keras) {
  if (keras.is_list()) {
    Config list = Config::list();
    for (const Config& item : keras.as_list()) list.push_back(with_keras2_activations(item));
    return list;
  }
  if (!keras.is_map()) return keras;
  Config map = Config::map();
  for (const auto& [key, item] : keras.items()) {
    const bool keras2_hard_sigmoid = (key == "activation" || key == "recurrent_activation") && item.type() == Config::Type::string &&
                                     item.as_string() == "hard_sigmoid";
    map.set(key, keras2_hard_sigmoid ? Config("hard_sigmoid_keras2") : with_keras2_activations(item));
  }
  return map;
}

Config import_keras_model_config(const Config& keras, const std::string& where) {
  if (!keras.is_map() || !keras.contains("class_name"))
    throw ConfigError(where + ": a model config is a map with a class_name, got " +
                      (keras.is_map() ? std::string("a map without one") : keras.to_string()));
  return import_layer(without_python_keys(keras), where);
}

}  // namespace kiln::detail
