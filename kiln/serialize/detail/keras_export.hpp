#pragma once
// kiln models as Keras 3 writes them: the config.json of a `.keras` file (and model.to_json()), and the
// order and names under which Keras's saving_lib keeps each layer's weights.
//
// A built-in kiln layer with a Keras counterpart is written as Keras writes that class: "module"
// "keras.layers", registered_name null, dtype as a DTypePolicy, initializers, regularizers and
// constraints with their Keras modules, build_config as Keras's build() arguments name it
// ("shapes_dict" for MultiHeadAttention), and its calls as Keras nodes: "__keras_tensor__" arguments with
// shape, dtype and keras_history, a merge layer's inputs as one list. A functional model lists its layers
// in the order Keras's Functional computes (by depth from the outputs, then traversal order), because
// that order also numbers the weights' groups. kiln-only layers keep their registered "Package>Name".
#include <map>
#include <string>
#include <vector>

#include <kiln/layers/config.hpp>
#include <kiln/layers/model_base.hpp>

namespace kiln::detail {

// What kiln knows of a Keras layer class it implements.
struct KerasLayerClass {
  bool list_input = false;                   // called on a list: merge layers, Attention
  std::vector<std::string> build_arguments;  // build()'s shape arguments when more than input_shape
  bool built_at_init = false;                // built in __init__ (no weights): Keras writes no build_config
  bool mask_argument = false;                // call() takes `mask`, which Keras records in each node as null
  // The Python module Keras writes for the class: keras.layers for its layers; a keras.applications family's
  // own layers are written with their module and their class name as registered_name.
  std::string module = "keras.layers";
};
// Every Keras layer class kiln implements, by Keras class name (the docs' mapping table is checked against it).
const std::map<std::string, KerasLayerClass>& keras_layer_classes();

// Keras 3's serialization of `model`: {"module", "class_name", "config", "registered_name", "build_config"
// (, "compile_config" when `compile_config` is not null)}.
Config export_keras_model_config(const ModelBase& model, const Config& compile_config = Config());

// The model_config of Keras 3's legacy `.h5` format: export_keras_model_config's, with each layer entry only
// {"class_name", "config"} (and a functional model's "name" and "inbound_nodes"), as Keras's legacy
// serialization writes it; a registered custom layer's class_name is its "Package>Name".
Config export_keras_legacy_model_config(const ModelBase& model);

// A model's layers in Keras's order: Sequential.layers (no InputLayer), or Functional.operations.
std::vector<LayerPtr> keras_layer_order(const ModelBase& model);

// Keras 3's compile_config from kiln's ({"optimizer", "loss", "metrics"}).
Config export_keras_compile_config(const Config& compile_config);

}  // namespace kiln::detail
