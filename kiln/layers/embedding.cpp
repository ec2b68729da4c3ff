#include <kiln/layers/embedding.hpp>

#include <string>

#include <kiln/ops/ops.hpp>

namespace kiln {

EmbeddingLayer::EmbeddingLayer(const Config& config) : EmbeddingLayer(config, "Embedding", {}) {}

EmbeddingLayer::EmbeddingLayer(const Config& config, const std::string& class_name,
                               const std::function<void(ConfigReader&)>& more)
    : Layer(config, class_name) {
  ConfigReader args = config_reader(config);
  input_dim_ = args.integer("input_dim");
  output_dim_ = args.integer("output_dim");
  embeddings_initializer_ = Initializer::from_argument(args, "embeddings_initializer", "uniform");
  mask_zero_ = args.boolean("mask_zero", false);
  embeddings_regularization_ = WeightRegularization::from_arguments(args, "embeddings");
  for (const char* key : {"weights", "lora_rank", "lora_alpha", "quantization_config"}) args.unsupported(key);
  // Keras 3 still accepts the Keras 2 argument input_length and ignores it; so do we, to load old configs.
  args.value("input_length");
  if (more) more(args);
  args.finish();
  if (input_dim_ <= 0) args.fail("input_dim must be positive, got " + std::to_string(input_dim_));
  if (output_dim_ <= 0) args.fail("output_dim must be positive, got " + std::to_string(output_dim_));
}

Config EmbeddingLayer::get_config() const {
  Config config = base_config();
  config.set("input_dim", input_dim_);
  config.set("output_dim", output_dim_);
  config.set("embeddings_initializer", embeddings_initializer_.get_config());
  embeddings_regularization_.write(config, "embeddings");
  config = with_activity_regularizer(config);
  config.set("mask_zero", mask_zero_);
  config.set("quantization_config", Config());
  return config;
}

void EmbeddingLayer::build(const Shape&) {
  embeddings_ = add_weight("embeddings", {input_dim_, output_dim_}, embeddings_initializer_);
  regularize(embeddings_, embeddings_regularization_);
}

Tensor EmbeddingLayer::call(const Tensor& input, const CallArgs&) {
  return ops::gather(variable(embeddings_, input), input);
}

// Keras's: the steps whose index is 0 are padding.
std::vector<Tensor> EmbeddingLayer::compute_mask(const std::vector<Tensor>& inputs, const Tensor&) const {
  const Tensor& ids = inputs.at(0);
  return {ops::scalar_like(ids, 1.0) - ops::equal(ids, ops::scalar_like(ids, 0.0))};
}

Embedding::Embedding(std::int64_t input_dim, std::int64_t output_dim, const Config& options)
    : LayerHandle(
          std::make_shared<EmbeddingLayer>(options.with("input_dim", input_dim).with("output_dim", output_dim))) {}

KILN_REGISTER_LAYER("kiln>Embedding", EmbeddingLayer);

// The base reads the keys (and refuses unknown ones) before this layer's members exist: they are read
// again, checked, in the body.
ReversibleEmbeddingLayer::ReversibleEmbeddingLayer(const Config& config)
    : EmbeddingLayer(config, "ReversibleEmbedding", [](ConfigReader& args) {
        args.boolean("tie_weights", true);
        if (const Config& dtype = args.value("reverse_dtype"); !dtype.is_null())
          args.fail("reverse_dtype is not supported (the reverse map computes in the layer's dtype), got " +
                    dtype.to_string());
        const Config& cap = args.value("logit_soft_cap");
        if (!cap.is_null() && !(cap.as_double("logit_soft_cap") > 0))
          args.fail("logit_soft_cap must be positive or null, got " + cap.to_string());
      }) {
  tie_weights_ = config.get_bool("tie_weights", true);
  if (const Config* cap = config.find("logit_soft_cap")) logit_soft_cap_ = *cap;
}

Config ReversibleEmbeddingLayer::get_config() const {
  Config config = EmbeddingLayer::get_config();
  config.set("tie_weights", tie_weights_);
  config.set("reverse_dtype", Config());
  config.set("logit_soft_cap", logit_soft_cap_);
  return config;
}

void ReversibleEmbeddingLayer::build(const Shape& input_shape) {
  EmbeddingLayer::build(input_shape);
  // Keras draws the untied reverse map from the embeddings' initializer.
  if (!tie_weights_)
    reverse_embeddings_ = add_weight("reverse_embeddings", {output_dim(), input_dim()},
                                     embeddings_initializer());
}

Tensor ReversibleEmbeddingLayer::call(const Tensor& input, const CallArgs& args) {
  if (!args.flag("reverse", false)) return EmbeddingLayer::call(input, args);
  if (input.rank() < 1 || input.shape().dim(-1) != output_dim())
    shape_error("in reverse maps vectors of output_dim " + std::to_string(output_dim()) + " to scores",
                {{"input", input.shape()}});
  Tensor logits = tie_weights_ ? ops::matmul(input, variable(embeddings_id(), input), false, true)
                               : ops::matmul(input, variable(reverse_embeddings_, input));
  if (!logit_soft_cap_.is_null()) {
    const double cap = logit_soft_cap_.as_double();
    logits = ops::scale(ops::tanh(ops::scale(logits, 1.0 / cap)), cap);
  }
  return logits;
}

ReversibleEmbedding::ReversibleEmbedding(std::int64_t input_dim, std::int64_t output_dim, const Config& options)
    : LayerHandle(std::make_shared<ReversibleEmbeddingLayer>(
          options.with("input_dim", input_dim).with("output_dim", output_dim))) {}

KILN_REGISTER_LAYER("kiln>ReversibleEmbedding", ReversibleEmbeddingLayer);

}  // namespace kiln
