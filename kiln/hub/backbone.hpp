#pragma once
// keras-hub's backbones in kiln: a model made from its constructor's arguments, as keras_hub.models.X(...)
// makes one, and saved as keras-hub saves it: its config is those arguments (not a graph), its layers and
// weights are keras-hub's, under keras-hub's names, so its model.weights.h5 is read and written as keras-hub
// does. Registered as "keras_hub>GPT2Backbone", ... load_keras_model reads their .keras files.
//
//   kiln::hub::Backbone gpt2("GPT2Backbone", {{"vocabulary_size", 50257}, {"num_layers", 12}, {"num_heads", 12},
//                                             {"hidden_dim", 768}, {"intermediate_dim", 3072}});
//   std::vector<kiln::Array> out = gpt2.predict({padding_mask, token_ids});   // inputs sorted by name
//
// Inputs are keras-hub's dictionary flattened as Keras flattens it, by name: "padding_mask" (1 for the tokens
// that count), then "segment_ids" (BERT), then "token_ids", each (batch, steps) of integers held as floats.
// Outputs: the sequence output (batch, steps, hidden_dim); BERT's are ["pooled_output", "sequence_output"].
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <kiln/layers/config.hpp>
#include <kiln/layers/model_base.hpp>
#include <kiln/models/model.hpp>

namespace kiln::hub {

/// One constructor argument of a backbone: its keras-hub name and default (none: required).
struct BackboneArgument {
  std::string key;
  std::optional<Config> fallback;  ///< nullopt: required
};

/// The model behind a backbone: a functional model made from its arguments.
class BackboneModel : public ModelBase {
 public:
  /// The arguments, with their defaults filled in, in keras-hub's get_config order.
  const Config& arguments() const { return arguments_; }
  /// name, trainable, dtype and the arguments: what keras-hub's get_config writes. When layers inside are quantized,
  /// the dtype is keras-hub's DTypePolicyMap of their policies by path ("transformer_layer_0/self_attention/query").
  Config get_config() const override;
  /// keras-hub's module ("keras_hub.src.models.gpt2.gpt2_backbone"): the model is saved by its arguments.
  std::string keras_module() const override { return module_; }
  /// The token embedding (a ReversibleEmbedding, or Embedding inside TokenAndPositionEmbedding): what a
  /// language-model head reads.
  const LayerPtr& token_embedding() const { return token_embedding_; }

 protected:
  /// Reads `config`: the base keys (name, default the class in snake_case; trainable; dtype) and
  /// `arguments` in order, refusing others (ConfigError naming the class).
  BackboneModel(const Config& config, const std::string& class_name, std::string module,
                const std::vector<BackboneArgument>& arguments);
  std::int64_t integer(const std::string& key) const;  ///< a positive integer argument
  double number(const std::string& key) const;
  bool flag(const std::string& key) const;
  /// keras.initializers.RandomNormal(stddev) and TruncatedNormal(stddev), as configs.
  static Config random_normal(double stddev);
  static Config truncated_normal(double stddev);
  /// Records the calls from `inputs` to `outputs` and builds the model.
  void finish(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs);
  /// `config` with the backbone's dtype when that is a Keras DTypePolicyMap (a quantized backbone's, by layer
  /// path): keras-hub hands its dtype to every layer it makes, and each layer reads its own path in the map.
  Config with_dtype(Config config) const;
  /// kiln::create_layer(class_name, with_dtype(config)): how the backbones make their layers (the name hides
  /// kiln::create_layer inside them).
  LayerPtr create_layer(const std::string& class_name, const Config& config) const;

  LayerPtr token_embedding_;

 private:
  std::string module_;
  Config arguments_;
  Config dtype_map_;  ///< the DTypePolicyMap given as the dtype, or null
};

/// A keras-hub backbone: kiln::Model's API (compile, fit, predict, save) over a BackboneModel.
class Backbone : public TrainableModel<BackboneModel> {
 public:
  /// keras-hub's class ("GPT2Backbone", "BertBackbone", "RobertaBackbone", "DistilBertBackbone", "LlamaBackbone",
  /// "Llama3Backbone", "MistralBackbone", "QwenBackbone", "Qwen3Backbone", "Phi3Backbone", "GemmaBackbone",
  /// "FalconBackbone") and its arguments, as keras_hub.models.<class_name>(**arguments). ConfigError for an unknown
  /// class or argument.
  Backbone(const std::string& class_name, const Config& arguments);
  /// A handle to an existing backbone.
  Backbone(std::shared_ptr<BackboneModel> model) : TrainableModel(std::move(model)) {}
  /// The backbone a model handle holds (a loaded .keras file's); ValueError when it is not one.
  static Backbone of(const Model& model);
};

/// A backbone from its serialized form, as keras-hub writes it in config.json and inside a task's config
/// ({"module", "class_name", "config", "registered_name", ...}). ConfigError for a class that is not a backbone.
std::shared_ptr<BackboneModel> backbone_from_config(const Config& serialized);

/// An integer kiln::Input (batch, steps) named `name`, as keras-hub's token_ids and padding_mask inputs.
Tensor token_input(const std::string& name);

/// The backbone classes kiln implements, by keras-hub's class name.
std::vector<std::string> backbone_classes();

}  // namespace kiln::hub
