#include <kiln/hub/layers/masked_lm_head.hpp>

#include <memory>

#include <kiln/core/error.hpp>
#include <kiln/layers/core/embedding.hpp>
#include <kiln/ops/ops.hpp>
#include <kiln/serialize/json.hpp>

namespace kiln::hub {

namespace {

// An activation argument: a name, or null for none (keras.activations.get(None) is linear).
std::string activation_argument(ConfigReader& args, const char* key, const std::string& fallback, const Layer& layer) {
  const Config& value = args.value(key);
  if (value.is_null()) return fallback;
  if (value.type() != Config::Type::string)
    throw ConfigError(layer.describe() + ": " + key + " must be an activation's name, got " + to_json(value, 0));
  ops::check_activation(value.as_string(), layer.describe());
  return value.as_string();
}

const EmbeddingLayer& embedding_of(const Layer& head, const LayerPtr& layer) {
  const auto* embedding = dynamic_cast<const EmbeddingLayer*>(layer.get());
  if (embedding == nullptr)
    throw ConfigError(head.describe() + ": token_embedding must be an Embedding, got " + layer->describe());
  return *embedding;
}

}  // namespace

MaskedLMHeadLayer::MaskedLMHeadLayer(const Config& config) : Layer(config, "MaskedLMHead") { read(config, false); }

MaskedLMHeadLayer::MaskedLMHeadLayer(const Config& config, LayerPtr token_embedding)
    : Layer(config, "MaskedLMHead"), token_embedding_(std::move(token_embedding)) {
  if (!token_embedding_) throw ValueError(describe() + ": the token embedding to tie to is empty");
  read(config, true);
}

void MaskedLMHeadLayer::read(const Config& config, bool tied) {
  ConfigReader args = config_reader(config);
  const Config& vocabulary = args.value("vocabulary_size");
  if (!vocabulary.is_null()) vocabulary_size_ = vocabulary.as_int("vocabulary_size");
  const Config& embedding = args.value("token_embedding");
  if (tied && !embedding.is_null())
    args.fail("is tied to " + token_embedding_->describe() + ": its config cannot give another token_embedding");
  if (!tied && !embedding.is_null()) {
    token_embedding_ = layer_from_config(embedding);
    owns_embedding_ = true;
  }
  intermediate_activation_ = activation_argument(args, "intermediate_activation", "relu", *this);
  activation_ = activation_argument(args, "activation", "linear", *this);
  layer_norm_epsilon_ = args.number("layer_norm_epsilon", 1e-5);
  kernel_initializer_ = Initializer::from_argument(args, "kernel_initializer", "glorot_uniform").get_config();
  bias_initializer_ = Initializer::from_argument(args, "bias_initializer", "zeros").get_config();
  args.finish();
  if (!(layer_norm_epsilon_ > 0)) args.fail("layer_norm_epsilon must be positive");
  if (token_embedding_) {
    const std::int64_t input_dim = embedding_of(*this, token_embedding_).input_dim();
    if (vocabulary_size_ != 0 && vocabulary_size_ != input_dim)
      args.fail("vocabulary_size (" + std::to_string(vocabulary_size_) +
                ") must match the token embedding's input_dim (" + std::to_string(input_dim) + ")");
    vocabulary_size_ = input_dim;
  } else if (vocabulary.is_null()) {
    args.fail("one of vocabulary_size and token_embedding must be set");
  }
  if (vocabulary_size_ <= 0) args.fail("vocabulary_size must be positive, got " + std::to_string(vocabulary_size_));
  if (owns_embedding_) track_layer(token_embedding_);
}

Config MaskedLMHeadLayer::get_config() const {
  Config config = base_config();
  config.set("vocabulary_size", vocabulary_size_);
  config.set("token_embedding", token_embedding_ ? serialize_layer(*token_embedding_) : Config());
  config.set("intermediate_activation", intermediate_activation_);
  config.set("activation", activation_);
  config.set("layer_norm_epsilon", layer_norm_epsilon_);
  config.set("kernel_initializer", kernel_initializer_);
  config.set("bias_initializer", bias_initializer_);
  return config;
}

std::string MaskedLMHeadLayer::attribute_of(const LayerPtr& child) const {
  if (child == dense_) return "_intermediate_dense";
  if (child == norm_) return "_intermediate_layer_norm";
  return "token_embedding";  // the embedding the head owns (one made from its config)
}

std::vector<std::string> MaskedLMHeadLayer::keras_weight_paths() const {
  // Own weights first (Layer::weights' order), then the children under keras-hub's attribute names.
  std::vector<std::string> paths;
  if (!token_embedding_) paths.push_back("vars/0");
  paths.push_back(token_embedding_ ? "vars/0" : "vars/1");
  for (const LayerPtr& child : layers())
    for (const std::string& path : child->keras_weight_paths()) paths.push_back(attribute_of(child) + "/" + path);
  return paths;
}

std::vector<std::pair<std::string, std::string>> MaskedLMHeadLayer::keras_sublayers() const {
  std::vector<std::pair<std::string, std::string>> groups;
  for (const LayerPtr& child : layers()) {
    const std::string attribute = attribute_of(child);
    groups.emplace_back(attribute, child->name());
    for (const auto& [path, name] : child->keras_sublayers()) groups.emplace_back(attribute + "/" + path, name);
  }
  return groups;
}

void MaskedLMHeadLayer::build(const std::vector<Shape>& input_shapes) {
  const Shape& sequence = input_shapes.at(0);
  const Shape& positions = input_shapes.at(1);
  if (sequence.rank() != 3 || sequence[2] == Shape::unknown)
    shape_error("takes (batch, steps, hidden) with a known hidden size, then mask_positions (batch, picks)",
                {{"inputs", sequence}, {"mask_positions", positions}});
  if (positions.rank() != 2)
    shape_error("takes mask_positions of shape (batch, picks)", {{"inputs", sequence}, {"mask_positions", positions}});
  const std::int64_t feature_size =
      token_embedding_ ? embedding_of(*this, token_embedding_).output_dim() : sequence[2];
  constexpr std::int64_t any = Shape::unknown;
  if (owns_embedding_ && !token_embedding_->built()) token_embedding_->build_for(Shape{any, any});
  // keras-hub's order of creation: the Dense, the norm, then output_kernel (untied) and output_bias.
  dense_ = track(create_layer("kiln>Dense", {{"name", "intermediate_dense"},
                                             {"units", feature_size},
                                             {"activation", intermediate_activation_},
                                             {"kernel_initializer", kernel_initializer_},
                                             {"bias_initializer", bias_initializer_}}));
  norm_ = track(create_layer("kiln>LayerNormalization", {{"name", "intermediate_layer_norm"}, {"epsilon", layer_norm_epsilon_}}));
  dense_->build_for(Shape{any, any, sequence[2]});
  norm_->build_for(Shape{any, any, feature_size});
  if (!token_embedding_)
    kernel_ = add_weight("output_kernel", Shape{feature_size, vocabulary_size_}, Initializer::from_config(kernel_initializer_));
  bias_ = add_weight("output_bias", Shape{vocabulary_size_}, Initializer::from_config(bias_initializer_));
}

std::vector<Tensor> MaskedLMHeadLayer::call(const std::vector<Tensor>& inputs, const CallArgs& args) {
  const Tensor& sequence = inputs.at(0);
  const Tensor& positions = inputs.at(1);
  if (sequence.rank() != 3 || sequence.shape()[2] != build_shapes().at(0)[2])
    shape_error("takes (batch, steps, hidden) with the hidden size it was built for, " +
                    build_shapes().at(0).to_string(),
                {{"inputs", sequence.shape()}, {"mask_positions", positions.shape()}});
  if (positions.rank() != 2)
    shape_error("takes mask_positions of shape (batch, picks)",
                {{"inputs", sequence.shape()}, {"mask_positions", positions.shape()}});
  const CallArgs inner = CallArgs().training(args.training());
  Tensor x = ops::take_along_axis(sequence, ops::expand_dims(positions, -1), 1);
  x = (*norm_)((*dense_)(x, inner), inner);
  Tensor scores = token_embedding_ ? (*token_embedding_)(x, CallArgs().option("reverse", true))
                                   : ops::matmul(x, variable(kernel_, x));
  scores = scores + variable(bias_, scores);
  if (activation_ != "linear") scores = ops::activation(scores, activation_);
  return {scores};
}

KILN_REGISTER_LAYER("keras_hub>MaskedLMHead", MaskedLMHeadLayer);

}  // namespace kiln::hub
