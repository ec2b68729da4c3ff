// keras-hub's decoder backbones: LlamaBackbone (and Llama3Backbone, the same class), MistralBackbone,
// QwenBackbone, Qwen3Backbone, Phi3Backbone, GemmaBackbone and FalconBackbone (keras_hub/src/models/llama/,
// llama3/, mistral/, qwen/, qwen3/, phi3/, gemma/, falcon/): a token embedding (a ReversibleEmbedding, tied or
// not), the family's decoder blocks given the padding mask, and a final norm (RMS, Falcon's a
// LayerNormalization). Gemma scales the embeddings by sqrt(hidden_dim) and, with use_sliding_window_attention,
// attends within the window in every other block (0, 2, ...).
#include <cmath>
#include <memory>
#include <string>

#include <kiln/hub/backbone.hpp>
#include <kiln/hub/layers/decoder_blocks.hpp>
#include <kiln/hub/layers/rms_norm.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln::hub {

namespace {

Config reversible_embedding(std::int64_t vocabulary, std::int64_t hidden, bool tied, const Config& initializer) {
  return {{"name", "token_embedding"},
          {"input_dim", vocabulary},
          {"output_dim", hidden},
          {"tie_weights", tied},
          {"embeddings_initializer", initializer}};
}

// What Llama, Mistral and Qwen share: a token embedding (tied or not), num_layers of the family's decoder block,
// each given the padding mask, the arguments every family passes and the family's own (`family`), and the
// family's RMS norm on the sequence output.
class GatedDecoderBackboneModel : public BackboneModel {
 protected:
  using BackboneModel::BackboneModel;

  template <class Block, class Norm>
  void make(bool tied, const Config& family) {
    const Tensor token_ids = token_input("token_ids"), padding_mask = token_input("padding_mask");
    token_embedding_ = create_layer("kiln>ReversibleEmbedding", reversible_embedding(integer("vocabulary_size"),
                                                                                     integer("hidden_dim"), tied,
                                                                                     random_normal(0.01)));
    Tensor x = (*token_embedding_)(token_ids);
    Config common = {{"intermediate_dim", integer("intermediate_dim")},
                     {"num_query_heads", integer("num_query_heads")},
                     {"num_key_value_heads", integer("num_key_value_heads")},
                     {"rope_max_wavelength", number("rope_max_wavelength")},
                     {"layer_norm_epsilon", number("layer_norm_epsilon")},
                     {"activation", "silu"},
                     {"kernel_initializer", random_normal(0.02)},
                     {"dropout", number("dropout")}};
    for (const auto& [key, value] : family.items()) common.set(key, value);
    for (std::int64_t i = 0; i < integer("num_layers"); ++i) {
      const auto block = std::make_shared<Block>(with_dtype(common.with("name", "transformer_layer_" + std::to_string(i))));
      x = (*block)(x, CallArgs().tensor("decoder_padding_mask", padding_mask));
    }
    const Tensor output = (*std::make_shared<Norm>(
        with_dtype(Config{{"name", "sequence_output_layernorm"}, {"epsilon", number("layer_norm_epsilon")}})))(x);
    finish({padding_mask, token_ids}, {output});
  }
};

class LlamaBackboneModel : public GatedDecoderBackboneModel {
 public:
  explicit LlamaBackboneModel(const Config& config) : LlamaBackboneModel(config, "LlamaBackbone", "llama.llama_backbone") {}

 protected:
  LlamaBackboneModel(const Config& config, const std::string& class_name, const std::string& module)
      : GatedDecoderBackboneModel(config, class_name, "keras_hub.src.models." + module,
                      {{"vocabulary_size", {}},
                       {"num_layers", {}},
                       {"num_query_heads", {}},
                       {"hidden_dim", {}},
                       {"intermediate_dim", {}},
                       {"rope_max_wavelength", Config(std::int64_t{10000})},
                       {"rope_position_scaling_factor", Config(1.0)},
                       {"rope_frequency_adjustment_factor", Config()},
                       {"rope_low_freq_factor", Config()},
                       {"rope_high_freq_factor", Config()},
                       {"rope_pretraining_sequence_length", Config()},
                       {"num_key_value_heads", {}},
                       {"layer_norm_epsilon", Config(1e-6)},
                       {"dropout", Config(std::int64_t{0})},
                       {"tie_word_embeddings", Config(false)}}) {
    // keras-hub's LlamaBackbone takes tie_word_embeddings (false) but leaves it out of its config, so keras-hub
    // cannot read its own tied files back; kiln writes it when true (keras-hub reads that), and reads a tied
    // file's weights as tied (serialize/keras.cpp).
    tied_ = flag("tie_word_embeddings");
    make<LlamaTransformerDecoderLayer, LlamaLayerNormLayer>(
        tied_, {{"rope_position_scaling_factor", number("rope_position_scaling_factor")},
                {"rope_frequency_adjustment_factor", arguments().at("rope_frequency_adjustment_factor")},
                {"rope_low_freq_factor", arguments().at("rope_low_freq_factor")},
                {"rope_high_freq_factor", arguments().at("rope_high_freq_factor")},
                {"rope_pretraining_sequence_length", arguments().at("rope_pretraining_sequence_length")}});
  }

 public:
  Config get_config() const override {
    Config config = BackboneModel::get_config();
    if (!tied_) config.erase("tie_word_embeddings");
    return config;
  }

 private:
  bool tied_ = false;
};

class Llama3BackboneModel final : public LlamaBackboneModel {
 public:
  explicit Llama3BackboneModel(const Config& config)
      : LlamaBackboneModel(config, "Llama3Backbone", "llama3.llama3_backbone") {}
};

class MistralBackboneModel final : public GatedDecoderBackboneModel {
 public:
  explicit MistralBackboneModel(const Config& config)
      : GatedDecoderBackboneModel(config, "MistralBackbone", "keras_hub.src.models.mistral.mistral_backbone",
                      {{"vocabulary_size", {}},
                       {"num_layers", {}},
                       {"num_query_heads", {}},
                       {"hidden_dim", {}},
                       {"intermediate_dim", {}},
                       {"rope_max_wavelength", Config(std::int64_t{10000})},
                       {"rope_scaling_factor", Config(1.0)},
                       {"num_key_value_heads", {}},
                       {"sliding_window", Config(std::int64_t{512})},
                       {"head_dim", Config()},
                       {"layer_norm_epsilon", Config(1e-6)},
                       {"dropout", Config(std::int64_t{0})}}) {
    make<MistralTransformerDecoderLayer, MistralLayerNormalizationLayer>(
        false, {{"rope_scaling_factor", number("rope_scaling_factor")},
                {"sliding_window", arguments().at("sliding_window")},
                {"head_dim", arguments().at("head_dim")}});
  }
};

class QwenBackboneModel final : public GatedDecoderBackboneModel {
 public:
  explicit QwenBackboneModel(const Config& config)
      : GatedDecoderBackboneModel(config, "QwenBackbone", "keras_hub.src.models.qwen.qwen_backbone",
                      {{"vocabulary_size", {}},
                       {"num_layers", {}},
                       {"num_query_heads", {}},
                       {"hidden_dim", {}},
                       {"intermediate_dim", {}},
                       {"rope_max_wavelength", Config(std::int64_t{10000})},
                       {"rope_scaling_factor", Config(1.0)},
                       {"num_key_value_heads", {}},
                       {"layer_norm_epsilon", Config(1e-6)},
                       {"dropout", Config(std::int64_t{0})},
                       {"tie_word_embeddings", Config(true)},
                       {"use_sliding_window_attention", Config(false)},
                       {"sliding_window_size", Config(std::int64_t{32768})}}) {
    make<QwenTransformerDecoderLayer, QwenLayerNormLayer>(
        flag("tie_word_embeddings"),
        {{"rope_scaling_factor", number("rope_scaling_factor")},
         {"use_sliding_window_attention", flag("use_sliding_window_attention")},
         {"sliding_window_size", integer("sliding_window_size")}});
  }
};

class Qwen3BackboneModel final : public GatedDecoderBackboneModel {
 public:
  explicit Qwen3BackboneModel(const Config& config)
      : GatedDecoderBackboneModel(config, "Qwen3Backbone", "keras_hub.src.models.qwen3.qwen3_backbone",
                      {{"vocabulary_size", {}},
                       {"num_layers", {}},
                       {"num_query_heads", {}},
                       {"hidden_dim", {}},
                       {"head_dim", {}},
                       {"intermediate_dim", {}},
                       {"rope_max_wavelength", Config(std::int64_t{10000})},
                       {"rope_scaling_factor", Config(1.0)},
                       {"num_key_value_heads", {}},
                       {"layer_norm_epsilon", Config(1e-6)},
                       {"dropout", Config(std::int64_t{0})},
                       {"tie_word_embeddings", Config(true)},
                       {"sliding_window_size", Config(std::int64_t{32768})}}) {
    make<Qwen3TransformerDecoderLayer, Qwen3LayerNormLayer>(
        flag("tie_word_embeddings"), {{"rope_scaling_factor", number("rope_scaling_factor")},
                                      {"head_dim", integer("head_dim")},
                                      {"sliding_window_size", arguments().at("sliding_window_size")}});
  }
};

class Phi3BackboneModel final : public GatedDecoderBackboneModel {
 public:
  explicit Phi3BackboneModel(const Config& config)
      : GatedDecoderBackboneModel(config, "Phi3Backbone", "keras_hub.src.models.phi3.phi3_backbone",
                      {{"vocabulary_size", {}},
                       {"num_layers", {}},
                       {"num_query_heads", {}},
                       {"hidden_dim", {}},
                       {"intermediate_dim", {}},
                       {"num_key_value_heads", {}},
                       {"layer_norm_epsilon", Config(1e-6)},
                       {"dropout", Config(0.0)},
                       {"max_sequence_length", Config(std::int64_t{4096})},
                       {"pretraining_sequence_length", Config(std::int64_t{4096})},
                       {"rope_max_wavelength", Config(std::int64_t{10000})},
                       {"rope_scaling_type", Config()},
                       {"rope_scaling_short_factor", Config()},
                       {"rope_scaling_long_factor", Config()}}) {
    make<Phi3DecoderLayer, Phi3LayerNormLayer>(
        false, {{"hidden_dim", integer("hidden_dim")},
                {"max_sequence_length", integer("max_sequence_length")},
                {"pretraining_sequence_length", integer("pretraining_sequence_length")},
                {"rope_scaling_type", arguments().at("rope_scaling_type")},
                {"rope_scaling_short_factor", arguments().at("rope_scaling_short_factor")},
                {"rope_scaling_long_factor", arguments().at("rope_scaling_long_factor")}});
  }
};

// keras-hub's FalconBackbone: a tied ReversibleEmbedding (uniform), num_layers FalconTransformerDecoders (which
// keras-hub makes with their default epsilon, 1e-5, whatever layer_norm_epsilon says) and a final
// LayerNormalization with layer_norm_epsilon.
class FalconBackboneModel final : public BackboneModel {
 public:
  explicit FalconBackboneModel(const Config& config)
      : BackboneModel(config, "FalconBackbone", "keras_hub.src.models.falcon.falcon_backbone",
                      {{"vocabulary_size", {}},
                       {"num_layers", {}},
                       {"num_attention_heads", {}},
                       {"hidden_dim", {}},
                       {"intermediate_dim", {}},
                       {"attention_dropout_rate", Config(std::int64_t{0})},
                       {"feedforward_dropout_rate", Config(std::int64_t{0})},
                       {"layer_norm_epsilon", Config(1e-5)}}) {
    const Tensor token_ids = token_input("token_ids"), padding_mask = token_input("padding_mask");
    token_embedding_ = create_layer(
        "kiln>ReversibleEmbedding",
        reversible_embedding(integer("vocabulary_size"), integer("hidden_dim"), true,
                             {{"class_name", "RandomUniform"},
                              {"config", {{"minval", -0.05}, {"maxval", 0.05}, {"seed", Config()}}}}));
    Tensor x = (*token_embedding_)(token_ids);
    for (std::int64_t i = 0; i < integer("num_layers"); ++i) {
      const auto block = std::make_shared<FalconTransformerDecoderLayer>(
          with_dtype(Config{{"name", "transformer_layer_" + std::to_string(i)},
                            {"num_attention_heads", integer("num_attention_heads")},
                            {"intermediate_dim", integer("intermediate_dim")},
                            {"attention_dropout_rate", number("attention_dropout_rate")},
                            {"feedforward_dropout_rate", number("feedforward_dropout_rate")}}));
      x = (*block)(x, CallArgs().tensor("decoder_padding_mask", padding_mask));
    }
    const Tensor output = (*create_layer("kiln>LayerNormalization", {{"name", "final_layernorm"},
                                                                      {"epsilon", number("layer_norm_epsilon")}}))(x);
    finish({padding_mask, token_ids}, {output});
  }
};

class GemmaBackboneModel final : public BackboneModel {
 public:
  explicit GemmaBackboneModel(const Config& config)
      : BackboneModel(config, "GemmaBackbone", "keras_hub.src.models.gemma.gemma_backbone",
                      {{"vocabulary_size", {}},
                       {"num_layers", {}},
                       {"num_query_heads", {}},
                       {"num_key_value_heads", {}},
                       {"hidden_dim", {}},
                       {"intermediate_dim", {}},
                       {"head_dim", {}},
                       {"layer_norm_epsilon", Config(1e-6)},
                       {"dropout", Config(std::int64_t{0})},
                       {"query_head_dim_normalize", Config(true)},
                       {"use_post_ffw_norm", Config(false)},
                       {"use_post_attention_norm", Config(false)},
                       {"final_logit_soft_cap", Config()},
                       {"attention_logit_soft_cap", Config()},
                       {"sliding_window_size", Config(std::int64_t{4096})},
                       {"use_sliding_window_attention", Config(false)}}) {
    const std::int64_t hidden = integer("hidden_dim");
    const Tensor token_ids = token_input("token_ids"), padding_mask = token_input("padding_mask");
    Config embedding = reversible_embedding(integer("vocabulary_size"), hidden, true,
                                            {{"class_name", "VarianceScaling"},
                                             {"config",
                                              {{"scale", 1.0},
                                               {"mode", "fan_in"},
                                               {"distribution", "untruncated_normal"},
                                               {"seed", Config()}}}});
    embedding.set("logit_soft_cap", arguments().at("final_logit_soft_cap"));
    token_embedding_ = create_layer("kiln>ReversibleEmbedding", embedding);
    // keras-hub: x * ops.cast(ops.sqrt(hidden_dim), x.dtype), the square root rounded to the dtype.
    Tensor x = (*token_embedding_)(token_ids) * static_cast<double>(static_cast<float>(std::sqrt(static_cast<double>(hidden))));
    for (std::int64_t i = 0; i < integer("num_layers"); ++i) {
      const auto block = std::make_shared<GemmaDecoderBlockLayer>(with_dtype(
          Config{{"name", "decoder_block_" + std::to_string(i)},
                 {"intermediate_dim", integer("intermediate_dim")},
                 {"hidden_dim", hidden},
                 {"num_query_heads", integer("num_query_heads")},
                 {"head_dim", integer("head_dim")},
                 {"num_key_value_heads", integer("num_key_value_heads")},
                 {"query_head_dim_normalize", flag("query_head_dim_normalize")},
                 {"use_post_ffw_norm", flag("use_post_ffw_norm")},
                 {"use_post_attention_norm", flag("use_post_attention_norm")},
                 {"logit_soft_cap", arguments().at("attention_logit_soft_cap")},
                 {"use_sliding_window_attention", flag("use_sliding_window_attention") && i % 2 == 0},
                 {"sliding_window_size", integer("sliding_window_size")},
                 {"dropout", number("dropout")}}));
      x = (*block)(x, CallArgs().tensor("padding_mask", padding_mask));
    }
    const Tensor output = (*std::make_shared<GemmaRMSNormalizationLayer>(
        with_dtype(Config{{"name", "final_normalization"}, {"epsilon", number("layer_norm_epsilon")}})))(x);
    finish({padding_mask, token_ids}, {output});
  }
};

KILN_REGISTER_LAYER("keras_hub>LlamaBackbone", LlamaBackboneModel);
KILN_REGISTER_LAYER("keras_hub>Llama3Backbone", Llama3BackboneModel);
KILN_REGISTER_LAYER("keras_hub>MistralBackbone", MistralBackboneModel);
KILN_REGISTER_LAYER("keras_hub>QwenBackbone", QwenBackboneModel);
KILN_REGISTER_LAYER("keras_hub>Qwen3Backbone", Qwen3BackboneModel);
KILN_REGISTER_LAYER("keras_hub>Phi3Backbone", Phi3BackboneModel);
KILN_REGISTER_LAYER("keras_hub>FalconBackbone", FalconBackboneModel);
KILN_REGISTER_LAYER("keras_hub>GemmaBackbone", GemmaBackboneModel);

}  // namespace

}  // namespace kiln::hub
