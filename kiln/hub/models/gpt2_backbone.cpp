// keras-hub's GPT2Backbone: token and learned position embeddings, pre-norm TransformerDecoder blocks with
// gelu_approximate, a final LayerNormalization (keras_hub/src/models/gpt2/gpt2_backbone.py).
#include <string>

#include <kiln/hub/backbone.hpp>

namespace kiln::hub {

namespace {

class GPT2BackboneModel final : public BackboneModel {
 public:
  explicit GPT2BackboneModel(const Config& config)
      : BackboneModel(config, "GPT2Backbone", "keras_hub.src.models.gpt2.gpt2_backbone",
                      {{"vocabulary_size", {}},
                       {"num_layers", {}},
                       {"num_heads", {}},
                       {"hidden_dim", {}},
                       {"intermediate_dim", {}},
                       {"dropout", Config(0.1)},
                       {"max_sequence_length", Config(std::int64_t{1024})}}) {
    const std::int64_t hidden = integer("hidden_dim");
    const double dropout = number("dropout");
    const Tensor token_ids = token_input("token_ids"), padding_mask = token_input("padding_mask");
    token_embedding_ = create_layer("kiln>ReversibleEmbedding", {{"name", "token_embedding"},
                                                                 {"input_dim", integer("vocabulary_size")},
                                                                 {"output_dim", hidden},
                                                                 {"embeddings_initializer", random_normal(0.01)}});
    const LayerPtr position_embedding =
        create_layer("keras_hub>PositionEmbedding", {{"name", "position_embedding"},
                                                     {"sequence_length", integer("max_sequence_length")},
                                                     {"initializer", random_normal(0.02)}});
    const Tensor tokens = (*token_embedding_)(token_ids);
    const Tensor positions = (*position_embedding)(tokens);
    Tensor x = (*create_layer("kiln>Add", {{"name", "embeddings_add"}}))(std::vector<Tensor>{tokens, positions})[0];
    x = (*create_layer("kiln>Dropout", {{"name", "embeddings_dropout"}, {"rate", dropout}}))(x);
    for (std::int64_t i = 0; i < integer("num_layers"); ++i) {
      const LayerPtr block = create_layer("keras_hub>TransformerDecoder",
                                          {{"name", "transformer_layer_" + std::to_string(i)},
                                           {"intermediate_dim", integer("intermediate_dim")},
                                           {"num_heads", integer("num_heads")},
                                           {"dropout", dropout},
                                           {"layer_norm_epsilon", 1e-5},
                                           {"activation", "gelu_approximate"},
                                           {"kernel_initializer", random_normal(0.02)},
                                           {"normalize_first", true}});
      x = (*block)(x, CallArgs().tensor("decoder_padding_mask", padding_mask));
    }
    const Tensor output =
        (*create_layer("kiln>LayerNormalization", {{"name", "layer_norm"}, {"epsilon", 1e-5}}))(x);
    finish({padding_mask, token_ids}, {output});
  }
};

KILN_REGISTER_LAYER("keras_hub>GPT2Backbone", GPT2BackboneModel);

}  // namespace

}  // namespace kiln::hub
