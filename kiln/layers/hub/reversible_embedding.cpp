#include <kiln/layers/hub/reversible_embedding.hpp>

#include <string>

#include <kiln/ops/ops.hpp>

namespace kiln {

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
