#include <kiln/layers/core/embedding.hpp>

#include <string>
#include <vector>

#include <kiln/layers/detail/quantization.hpp>

#include <kiln/ops/ops.hpp>

namespace kiln {

EmbeddingLayer::EmbeddingLayer(const Config& config) : EmbeddingLayer(config, "Embedding", {}) {}

EmbeddingLayer::EmbeddingLayer(const Config& config, const std::string& class_name,
                               const std::function<void(ConfigReader&)>& more)
    : Layer(config, class_name,
            class_name == "Embedding" || class_name == "ReversibleEmbedding" ? std::vector<std::string>{"int8", "int4"}
                                                                             : std::vector<std::string>{}) {
  ConfigReader args = config_reader(config);
  input_dim_ = args.integer("input_dim");
  output_dim_ = args.integer("output_dim");
  embeddings_initializer_ = Initializer::from_argument(args, "embeddings_initializer", "uniform");
  mask_zero_ = args.boolean("mask_zero", false);
  embeddings_regularization_ = WeightRegularization::from_arguments(args, "embeddings");
  for (const char* key : {"weights", "lora_rank", "lora_alpha"}) args.unsupported(key);
  given_quantization_config_ = args.value("quantization_config");
  if (!policy_map_pending()) read_quantization_config(args);  // (else once the map gives the mode)
  // Keras 3 still accepts the Keras 2 argument input_length and ignores it; so do we, to load old configs.
  args.value("input_length");
  if (more) more(args);
  args.finish();
  if (input_dim_ <= 0) args.fail("input_dim must be positive, got " + std::to_string(input_dim_));
  if (output_dim_ <= 0) args.fail("output_dim must be positive, got " + std::to_string(output_dim_));
}

// Keras writes an Int8QuantizationConfig for an int8 Embedding too; its activation quantizer is not used for ids,
// only by a ReversibleEmbedding in reverse (Keras's default AbsMaxQuantizer, or none: float inputs).
void EmbeddingLayer::read_quantization_config(ConfigReader& args) {
  const Config& quantization = args.value("quantization_config");
  int4_block_size_ = 0;
  if (quantization_mode().rfind("int4", 0) == 0) {  // Keras's Int4QuantizationConfig: by blocks of columns, or per row
    // (a plain Embedding never quantizes its ids: its activation quantizer is not read, as Keras ignores it)
    const detail::Int4Setting setting =
        detail::read_int4_config(args, quantization, quantization_mode(), class_name() == "ReversibleEmbedding");
    int4_block_size_ = setting.block_size;
    quantization_config_ = setting.written;
    quantize_inputs_ = setting.quantize_inputs;
    if (class_name() == "ReversibleEmbedding" && quantization.is_null()) {
      // Keras's ReversibleEmbedding._int4_build without a config (a keras-hub backbone's, by its DTypePolicyMap)
      // quantizes its inputs in reverse with the default AbsMaxQuantizer; a config (what quantize() leaves, and a
      // saved layer's) names its own, none by default. Written back as it came: null.
      quantize_inputs_ = true;
      quantization_config_ = Config();
    }
    return;
  }
  const Config activation =
      detail::int8_activation_quantizer(args, quantization, !quantization_mode().empty(), dtype_name(dtype()));
  quantization_config_ = Config();
  quantize_inputs_ = true;
  if (quantization_mode().empty()) return;
  // (an Embedding's ids are never quantized: only a ReversibleEmbedding in reverse runs the quantizer)
  if (class_name() == "ReversibleEmbedding" && !activation.is_null() && !detail::is_default_abs_max(activation))
    args.fail("kiln quantizes int8 activations as Keras's AbsMaxQuantizer() does (value_range [-127, 127], epsilon "
              "1e-07, the last axis); got activation_quantizer " + activation.to_string());
  quantize_inputs_ = !activation.is_null();
  quantization_config_ = quantization.is_null() ? detail::default_int8_quantization_config() : quantization;
}

void EmbeddingLayer::quantization_resolved() {
  ConfigReader args(Config{{"quantization_config", given_quantization_config_}}, describe());
  read_quantization_config(args);
}

Config EmbeddingLayer::get_config() const {
  Config config = base_config();
  config.set("input_dim", input_dim_);
  config.set("output_dim", output_dim_);
  config.set("embeddings_initializer", embeddings_initializer_.get_config());
  embeddings_regularization_.write(config, "embeddings");
  config = with_activity_regularizer(config);
  config.set("mask_zero", mask_zero_);
  config.set("quantization_config", quantization_config_);
  return config;
}

void EmbeddingLayer::build(const Shape&) {
  if (quantization_mode() == "int8") {
    // As Keras's _int8_build: int8 rows and one scale per row (the output_dim axis reduced), neither trained.
    embeddings_ = add_int8_weight("embeddings", {input_dim_, output_dim_});
    embeddings_scale_ = add_weight("embeddings_scale", {input_dim_}, Initializer::get("ones"), false);
    return;
  }
  if (int4_block_size_ != 0) {
    // As Keras's _int4_build: two int4 values a byte along each row; per row one scale, or by blocks of
    // block_size columns a scale and a zero point each, with g_idx (each column's block, as Keras fills it).
    embeddings_ = add_int8_weight("embeddings", {input_dim_, (output_dim_ + 1) / 2});
    if (int4_block_size_ < 0) {
      embeddings_scale_ = add_weight("embeddings_scale", {input_dim_}, Initializer::get("ones"), false);
      return;
    }
    const std::int64_t block = int4_block_size_, groups = (output_dim_ - 1) / block + 1;
    embeddings_scale_ = add_weight("embeddings_scale", {input_dim_, groups}, Initializer::get("ones"), false);
    embeddings_zero_ = add_int8_weight("embeddings_zero", {input_dim_, groups});
    g_idx_ = add_weight("g_idx", {output_dim_}, [block](const Shape& shape, DType dtype, Rng&) {
      return detail::block_indices(shape, dtype, block);
    }, false);
    return;
  }
  embeddings_ = add_weight("embeddings", {input_dim_, output_dim_}, embeddings_initializer_);
  regularize(embeddings_, embeddings_regularization_);
}

Tensor EmbeddingLayer::call(const Tensor& input, const CallArgs&) {
  if (quantization_mode() == "int8")
    return ops::quantized_gather(variable(embeddings_, input), variable(embeddings_scale_, input), input);
  if (int4_block_size_ < 0)
    return ops::quantized_gather_int4(variable(embeddings_, input), variable(embeddings_scale_, input), input,
                                      output_dim_);
  if (int4_block_size_ > 0)
    return ops::quantized_gather_int4(variable(embeddings_, input), variable(embeddings_scale_, input), input,
                                      output_dim_, variable(embeddings_zero_, input), variable(g_idx_, input));
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

}  // namespace kiln
