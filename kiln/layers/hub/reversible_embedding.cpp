#include <kiln/layers/hub/reversible_embedding.hpp>

#include <string>

#include <kiln/layers/detail/quantization.hpp>
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
  if (tie_weights_) return;
  if (quantization_mode() == "int8") {  // Keras's _int8_build: the reverse map in int8, one scale per entry
    reverse_embeddings_ = add_int8_weight("reverse_embeddings", {output_dim(), input_dim()});
    reverse_embeddings_scale_ = add_weight("reverse_embeddings_scale", {input_dim()}, Initializer::get("ones"), false);
    return;
  }
  if (int4_block_size() != 0) {
    // Keras's _int4_build: the reverse map packed along its rows (ceil(output_dim / 2), input_dim); one scale per
    // entry, or by blocks of rows a scale and a zero point (a float32 one, as Keras makes it) per block and entry.
    reverse_embeddings_ = add_int8_weight("reverse_embeddings", {(output_dim() + 1) / 2, input_dim()});
    if (int4_block_size() < 0) {
      reverse_embeddings_scale_ = add_weight("reverse_embeddings_scale", {input_dim()}, Initializer::get("ones"), false);
      return;
    }
    const std::int64_t groups = (output_dim() - 1) / int4_block_size() + 1;
    reverse_embeddings_scale_ = add_weight("reverse_embeddings_scale", {groups, input_dim()}, Initializer::get("ones"), false);
    reverse_embeddings_zero_ = add_weight("reverse_embeddings_zero", {groups, input_dim()}, Initializer::get("zeros"), false);
    return;
  }
  // Keras draws the untied reverse map from the embeddings' initializer.
  reverse_embeddings_ = add_weight("reverse_embeddings", {output_dim(), input_dim()}, embeddings_initializer());
}

Tensor ReversibleEmbeddingLayer::call(const Tensor& input, const CallArgs& args) {
  if (!args.flag("reverse", false)) return EmbeddingLayer::call(input, args);
  if (input.rank() < 1 || input.shape().dim(-1) != output_dim())
    shape_error("in reverse maps vectors of output_dim " + std::to_string(output_dim()) + " to scores",
                {{"input", input.shape()}});
  Tensor logits;
  if (quantization_mode() == "int8") {
    // Keras's _int8_call in reverse: the inputs quantized per row, times the int8 rows (tied: the table read
    // transposed, each entry's row scale), divided by both scales.
    logits = tie_weights_ ? ops::quantized_matmul(input, variable(embeddings_id(), input),
                                                  variable(embeddings_scale_id(), input), quantize_inputs(), 1, true)
                          : ops::quantized_matmul(input, variable(reverse_embeddings_, input),
                                                  variable(reverse_embeddings_scale_, input), quantize_inputs());
  } else if (int4_block_size() < 0) {
    // Keras's _int4_call in reverse, per row: the inputs (quantized per row, by default) times the unpacked values
    // (tied: the table read transposed), divided by both scales.
    logits = tie_weights_ ? ops::quantized_matmul(input, variable(embeddings_id(), input),
                                                  variable(embeddings_scale_id(), input), quantize_inputs(), 1, true,
                                                  output_dim())
                          : ops::quantized_matmul(input, variable(reverse_embeddings_, input),
                                                  variable(reverse_embeddings_scale_, input), quantize_inputs(), 1,
                                                  false, output_dim(), true);
  } else if (int4_block_size() > 0) {
    // By blocks of features: the float map (value - zero) · scale, times the inputs (quantized per row, then
    // divided by their scale). The tied table's zero points are int8: as floats here.
    if (tie_weights_) {
      const Tensor float_zero = detail::int8_as_floats(variable(embeddings_zero_id(), input), input);
      logits = ops::quantized_matmul_int4_groups(input, variable(embeddings_id(), input),
                                                 variable(embeddings_scale_id(), input), float_zero,
                                                 variable(g_idx_id(), input), output_dim(), false, 1, quantize_inputs(),
                                                 true);
    } else {
      logits = ops::quantized_matmul_int4_groups(input, variable(reverse_embeddings_, input),
                                                 variable(reverse_embeddings_scale_, input),
                                                 variable(reverse_embeddings_zero_, input), variable(g_idx_id(), input),
                                                 output_dim(), true, 0, quantize_inputs(), false);
    }
  } else {
    logits = tie_weights_ ? ops::matmul(input, variable(embeddings_id(), input), false, true)
                          : ops::matmul(input, variable(reverse_embeddings_, input));
  }
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
