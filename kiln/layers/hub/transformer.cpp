#include <kiln/layers/hub/transformer.hpp>

#include <kiln/core/error.hpp>
#include <kiln/layers/detail/decoding.hpp>
#include <kiln/layers/attention/multi_head_attention.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln {

// ---- what both blocks share ----------------------------------------------------------------------------------

TransformerBlockLayer::TransformerBlockLayer(const Config& config, const std::string& class_name,
                                             const std::function<void(ConfigReader&)>& more)
    : Layer(config, class_name) {
  ConfigReader args = config_reader(config);
  intermediate_dim_ = args.integer("intermediate_dim");
  num_heads_ = args.integer("num_heads");
  dropout_ = args.number("dropout", 0.0);
  activation_ = args.text("activation", "relu");
  if (activation_.empty()) activation_ = "linear";
  layer_norm_epsilon_ = args.number("layer_norm_epsilon", 1e-5);
  kernel_initializer_ = Initializer::from_argument(args, "kernel_initializer", "glorot_uniform").get_config();
  bias_initializer_ = Initializer::from_argument(args, "bias_initializer", "zeros").get_config();
  normalize_first_ = args.boolean("normalize_first", false);
  if (more) more(args);
  args.finish();
  if (intermediate_dim_ <= 0) args.fail("intermediate_dim must be positive, got " + std::to_string(intermediate_dim_));
  if (num_heads_ <= 0) args.fail("num_heads must be positive, got " + std::to_string(num_heads_));
  if (!(dropout_ >= 0.0 && dropout_ < 1.0)) args.fail("dropout must be in [0, 1), got " + std::to_string(dropout_));
  if (!(layer_norm_epsilon_ > 0.0))
    args.fail("layer_norm_epsilon must be positive, got " + std::to_string(layer_norm_epsilon_));
  ops::check_activation(activation_, describe());
}

Config TransformerBlockLayer::get_config() const {
  Config config = base_config();
  config.set("intermediate_dim", intermediate_dim_);
  config.set("num_heads", num_heads_);
  config.set("dropout", dropout_);
  config.set("activation", activation_);
  config.set("layer_norm_epsilon", layer_norm_epsilon_);
  config.set("kernel_initializer", kernel_initializer_);
  config.set("bias_initializer", bias_initializer_);
  config.set("normalize_first", normalize_first_);
  return config;
}

namespace {
// keras-hub's attribute for a block's sublayer: "_" and its name, except the decoder's attention layers, named
// "self_attention" and "cross_attention" but kept as _self_attention_layer and _cross_attention_layer.
std::string attribute_of(const Layer& child) {
  const std::string& name = child.name();
  const bool attention = name == "self_attention" || name == "cross_attention";
  return "_" + name + (attention ? "_layer" : "");
}
}  // namespace

std::vector<std::string> TransformerBlockLayer::keras_weight_paths() const {
  std::vector<std::string> paths;
  for (const LayerPtr& child : layers())
    for (const std::string& path : child->keras_weight_paths()) paths.push_back(attribute_of(*child) + "/" + path);
  return paths;
}

std::vector<std::pair<std::string, std::string>> TransformerBlockLayer::keras_sublayers() const {
  std::vector<std::pair<std::string, std::string>> sublayers;
  for (const LayerPtr& child : layers()) {
    const std::string attribute = attribute_of(*child);
    sublayers.emplace_back(attribute, child->name());
    for (const auto& [path, name] : child->keras_sublayers()) sublayers.emplace_back(attribute + "/" + path, name);
  }
  return sublayers;
}

std::int64_t TransformerBlockLayer::head_dim(std::int64_t features) const {
  if (features == Shape::unknown || features / num_heads_ < 1)
    throw ShapeError(describe() + ": the features (" + std::to_string(features) + ") divided by num_heads (" +
                     std::to_string(num_heads_) + ") give the head depth, which must be at least 1");
  return features / num_heads_;
}

LayerPtr TransformerBlockLayer::make_attention(const std::string& name, std::int64_t features, bool value_dim) {
  const std::int64_t depth = head_dim(features);
  Config config = {{"name", name},
                   {"num_heads", num_heads_},
                   {"key_dim", depth},
                   {"dropout", dropout_},
                   {"kernel_initializer", kernel_initializer_},
                   {"bias_initializer", bias_initializer_}};
  if (value_dim) config.set("value_dim", depth);
  return track(create_layer("kiln>MultiHeadAttention", config));
}

LayerPtr TransformerBlockLayer::make_norm(const std::string& name) {
  return track(create_layer("kiln>LayerNormalization", {{"name", name}, {"epsilon", layer_norm_epsilon_}}));
}

LayerPtr TransformerBlockLayer::make_dropout(const std::string& name) {
  return track(create_layer("kiln>Dropout", {{"name", name}, {"rate", dropout_}}));
}

LayerPtr TransformerBlockLayer::make_dense(const std::string& name, std::int64_t units, const std::string& activation) {
  return track(create_layer("kiln>Dense", {{"name", name},
                                           {"units", units},
                                           {"activation", activation},
                                           {"kernel_initializer", kernel_initializer_},
                                           {"bias_initializer", bias_initializer_}}));
}

Tensor TransformerBlockLayer::residual(const Tensor& x, const LayerPtr& norm, const LayerPtr& dropout,
                                       const CallArgs& inner, const std::function<Tensor(const Tensor&)>& part) const {
  const Tensor y = (*dropout)(part(normalize_first_ ? (*norm)(x, inner) : x), inner);
  const Tensor sum = x + y;
  return normalize_first_ ? sum : (*norm)(sum, inner);
}

Tensor TransformerBlockLayer::feed_forward(const Tensor& x, const CallArgs& inner) const {
  return (*feedforward_output_dense_)((*feedforward_intermediate_dense_)(x, inner), inner);
}

// keras-hub's masks are 0/1 (cast to int32); both must hold for a key to be attended: their product.
Tensor TransformerBlockLayer::merged_mask(const Tensor* padding, const Tensor* attention, const Tensor& keys) const {
  const auto differ = [](std::int64_t a, std::int64_t b) { return a != b && a != Shape::unknown && b != Shape::unknown; };
  if (padding != nullptr && (padding->rank() != 2 || differ(padding->shape()[1], keys.shape()[1])))
    shape_error("takes a padding mask (batch, steps)", {{"padding mask", padding->shape()}, {"sequence", keys.shape()}});
  if (attention != nullptr && attention->rank() != 3)
    shape_error("takes an attention mask (batch, T, S)", {{"attention mask", attention->shape()}});
  if (padding == nullptr) return attention != nullptr ? *attention : Tensor();
  if (attention == nullptr) return *padding;
  return *attention * ops::expand_dims(*padding, 1);
}

// ---- TransformerEncoder -----------------------------------------------------------------------------------

TransformerEncoderLayer::TransformerEncoderLayer(const Config& config)
    : TransformerBlockLayer(config, "TransformerEncoder") {}

void TransformerEncoderLayer::build(const Shape& input_shape) {
  if (input_shape.rank() != 3 || input_shape[2] == Shape::unknown)
    shape_error("takes inputs (batch, steps, features) with known features", {{"input", input_shape}});
  const std::int64_t features = input_shape[2];
  constexpr std::int64_t any = Shape::unknown;
  const Shape sequence{any, any, features};
  // keras-hub's order of creation, which is the weights' order.
  self_attention_ = make_attention("self_attention_layer", features, false);
  self_attention_norm_ = make_norm("self_attention_layer_norm");
  self_attention_dropout_ = make_dropout("self_attention_dropout");
  feedforward_layer_norm_ = make_norm("feedforward_layer_norm");
  feedforward_intermediate_dense_ = make_dense("feedforward_intermediate_dense", intermediate_dim_, activation_);
  feedforward_output_dense_ = make_dense("feedforward_output_dense", features, "linear");
  feedforward_dropout_ = make_dropout("feedforward_dropout");
  self_attention_->build_for(std::vector<Shape>{sequence, sequence});
  self_attention_norm_->build_for(sequence);
  feedforward_layer_norm_->build_for(sequence);
  feedforward_intermediate_dense_->build_for(sequence);
  feedforward_output_dense_->build_for(Shape{any, any, intermediate_dim_});
}

Tensor TransformerEncoderLayer::call(const Tensor& input, const CallArgs& args) {
  if (input.rank() != 3 || input.shape()[2] != build_shapes().at(0)[2])
    shape_error("was built for other features", {{"built for", build_shapes().at(0)}, {"input", input.shape()}});
  const CallArgs inner = CallArgs().training(args.training());
  CallArgs attention_args = inner;
  const Tensor mask = merged_mask(args.find_tensor("padding_mask"), args.find_tensor("attention_mask"), input);
  if (mask.valid()) attention_args.tensor("attention_mask", mask);
  const Tensor attended = residual(input, self_attention_norm_, self_attention_dropout_, inner, [&](const Tensor& x) {
    return Tensor((*self_attention_)(std::vector<Tensor>{x, x}, attention_args)[0]);
  });
  return residual(attended, feedforward_layer_norm_, feedforward_dropout_, inner,
                  [&](const Tensor& x) { return feed_forward(x, inner); });
}

TransformerEncoder::TransformerEncoder(std::int64_t intermediate_dim, std::int64_t num_heads, const Config& options)
    : LayerHandle(std::make_shared<TransformerEncoderLayer>(
          options.with("intermediate_dim", intermediate_dim).with("num_heads", num_heads))) {}

// ---- TransformerDecoder -----------------------------------------------------------------------------------

TransformerDecoderLayer::TransformerDecoderLayer(const Config& config)
    : TransformerBlockLayer(config, "TransformerDecoder", [](ConfigReader& args) {
        // Read again below, once this layer's members exist.
        for (const char* key : {"decoder_sequence_shape", "encoder_sequence_shape"})
          if (const Config& shape = args.value(key); !shape.is_null()) shape.as_shape(key);
      }) {
  if (const Config* shape = config.find("decoder_sequence_shape")) decoder_sequence_shape_ = *shape;
  if (const Config* shape = config.find("encoder_sequence_shape")) encoder_sequence_shape_ = *shape;
  // keras-hub's config carries the shapes it was built for, and building from them restores the
  // cross-attention decision before any weights load.
  if (!decoder_sequence_shape_.is_null()) {
    std::vector<Shape> shapes = {decoder_sequence_shape_.as_shape("decoder_sequence_shape")};
    if (!encoder_sequence_shape_.is_null()) shapes.push_back(encoder_sequence_shape_.as_shape("encoder_sequence_shape"));
    build_for(shapes);
  }
}

Config TransformerDecoderLayer::get_config() const {
  Config config = TransformerBlockLayer::get_config();
  config.set("decoder_sequence_shape", decoder_sequence_shape_);
  config.set("encoder_sequence_shape", encoder_sequence_shape_);
  return config;
}

void TransformerDecoderLayer::build(const std::vector<Shape>& input_shapes) {
  const Shape& decoder = input_shapes.at(0);
  if (decoder.rank() != 3 || decoder[2] == Shape::unknown)
    shape_error("takes a decoder sequence (batch, steps, features) with known features", {{"decoder", decoder}});
  const bool cross = input_shapes.size() > 1;
  if (cross && (input_shapes[1].rank() != 3 || input_shapes[1][2] == Shape::unknown))
    shape_error("takes an encoder sequence (batch, steps, features) with known features",
                {{"encoder", input_shapes[1]}});
  const std::int64_t features = decoder[2];
  constexpr std::int64_t any = Shape::unknown;
  const Shape sequence{any, any, features};
  decoder_sequence_shape_ = Config::from_shape(decoder);
  encoder_sequence_shape_ = cross ? Config::from_shape(input_shapes[1]) : Config();

  self_attention_ = make_attention("self_attention", features, false);
  self_attention_norm_ = make_norm("self_attention_layer_norm");
  self_attention_dropout_ = make_dropout("self_attention_dropout");
  self_attention_->build_for(std::vector<Shape>{sequence, sequence});
  self_attention_norm_->build_for(sequence);
  if (cross) {
    cross_attention_ = make_attention("cross_attention", features, true);
    cross_attention_norm_ = make_norm("cross_attention_layer_norm");
    cross_attention_dropout_ = make_dropout("cross_attention_dropout");
    cross_attention_->build_for(std::vector<Shape>{sequence, Shape{any, any, input_shapes[1][2]}});
    cross_attention_norm_->build_for(sequence);
  }
  // keras-hub makes the decoder's feed-forward norm after its dense layers (the encoder's before).
  feedforward_intermediate_dense_ = make_dense("feedforward_intermediate_dense", intermediate_dim_, activation_);
  feedforward_output_dense_ = make_dense("feedforward_output_dense", features, "linear");
  feedforward_layer_norm_ = make_norm("feedforward_layer_norm");
  feedforward_dropout_ = make_dropout("feedforward_dropout");
  feedforward_intermediate_dense_->build_for(sequence);
  feedforward_output_dense_->build_for(Shape{any, any, intermediate_dim_});
  feedforward_layer_norm_->build_for(sequence);
}

std::vector<Tensor> TransformerDecoderLayer::call(const std::vector<Tensor>& inputs, const CallArgs& args) {
  const Tensor& decoder = inputs.at(0);
  const Shape& built = build_shapes().at(0);
  if (decoder.rank() != 3 || decoder.shape()[2] != built[2])
    shape_error("was built for other features", {{"built for", built}, {"decoder", decoder.shape()}});
  if (inputs.size() > 1 && !has_cross_attention())
    throw ValueError(describe() + " was built without cross-attention (for a decoder sequence alone) but was given "
                     "an encoder sequence " + inputs[1].shape().to_string());
  if (inputs.size() == 1 && has_cross_attention())
    throw ValueError(describe() + " was built with cross-attention: give it [decoder_sequence, encoder_sequence]");
  const CallArgs inner = CallArgs().training(args.training());
  if (const detail::DecodingStep* step = detail::decoding()) return {decode_step(decoder, *step, inner)};

  CallArgs self_args = inner;
  self_args.option("use_causal_mask", args.flag("use_causal_mask", true));
  const Tensor self_mask =
      merged_mask(args.find_tensor("decoder_padding_mask"), args.find_tensor("decoder_attention_mask"), decoder);
  if (self_mask.valid()) self_args.tensor("attention_mask", self_mask);
  Tensor x = residual(decoder, self_attention_norm_, self_attention_dropout_, inner, [&](const Tensor& query) {
    return Tensor((*self_attention_)(std::vector<Tensor>{query, query}, self_args)[0]);
  });

  if (has_cross_attention()) {
    const Tensor& encoder = inputs[1];
    if (encoder.rank() != 3 || encoder.shape()[2] != build_shapes().at(1)[2])
      shape_error("was built for other encoder features",
                  {{"built for", build_shapes().at(1)}, {"encoder", encoder.shape()}});
    CallArgs cross_args = inner;
    const Tensor cross_mask =
        merged_mask(args.find_tensor("encoder_padding_mask"), args.find_tensor("encoder_attention_mask"), encoder);
    if (cross_mask.valid()) cross_args.tensor("attention_mask", cross_mask);
    x = residual(x, cross_attention_norm_, cross_attention_dropout_, inner, [&](const Tensor& query) {
      return Tensor((*cross_attention_)(std::vector<Tensor>{query, encoder}, cross_args)[0]);
    });
  }
  return {residual(x, feedforward_layer_norm_, feedforward_dropout_, inner,
                   [&](const Tensor& h) { return feed_forward(h, inner); })};
}

// One token (or a prompt's tokens at once) through the block, its self-attention reading and writing the caches
// of the tokens before (keras-hub's call with self_attention_cache and an update index); causal by `visible`.
Tensor TransformerDecoderLayer::decode_step(const Tensor& decoder, const detail::DecodingStep& step,
                                            const CallArgs& inner) {
  if (has_cross_attention())
    throw ValueError(describe() + ": decoding a token at a time is not supported with cross-attention yet");
  if (decoder.shape()[1] == Shape::unknown) shape_error("decodes steps of known tokens", {{"decoder", decoder.shape()}});
  const auto& attention = static_cast<const MultiHeadAttentionLayer&>(*self_attention_);
  const Shape cache_shape{decoder.shape()[0], step.length, attention.num_heads(), attention.key_dim()};
  const Tensor keys = step.cache(describe() + "/key", cache_shape);
  const Tensor values = step.cache(describe() + "/value", cache_shape);
  const Tensor x = residual(decoder, self_attention_norm_, self_attention_dropout_, inner, [&](const Tensor& query) {
    const MultiHeadAttentionLayer::CachedStep cached =
        attention.cached_self_attention(query, keys, values, step.start, step.visible);
    step.update(keys, cached.key_cache);
    step.update(values, cached.value_cache);
    return cached.output;
  });
  return residual(x, feedforward_layer_norm_, feedforward_dropout_, inner,
                  [&](const Tensor& h) { return feed_forward(h, inner); });
}

TransformerDecoder::TransformerDecoder(std::int64_t intermediate_dim, std::int64_t num_heads, const Config& options)
    : LayerHandle(std::make_shared<TransformerDecoderLayer>(
          options.with("intermediate_dim", intermediate_dim).with("num_heads", num_heads))) {}

KILN_REGISTER_LAYER("keras_hub>TransformerEncoder", TransformerEncoderLayer);
KILN_REGISTER_LAYER("keras_hub>TransformerDecoder", TransformerDecoderLayer);

}  // namespace kiln
