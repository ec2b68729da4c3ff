// keras-hub's encoder backbones: BertBackbone (token, position and segment embeddings, post-norm
// TransformerEncoder blocks with gelu_approximate, a tanh pooler on the first token), RobertaBackbone and
// DistilBertBackbone (TokenAndPositionEmbedding, exact gelu, no pooler) (keras_hub/src/models/bert/,
// roberta/, distil_bert/).
#include <string>

#include <kiln/hub/backbone.hpp>
#include <kiln/ops/ops.hpp>

namespace kiln::hub {

namespace {

std::vector<BackboneArgument> encoder_arguments(std::int64_t max_sequence_length) {
  return {{"vocabulary_size", {}},
          {"num_layers", {}},
          {"num_heads", {}},
          {"hidden_dim", {}},
          {"intermediate_dim", {}},
          {"dropout", Config(0.1)},
          {"max_sequence_length", Config(max_sequence_length)}};
}

// The encoder blocks "transformer_layer_<i>" over `x`, each given the padding mask.
Tensor encoder_blocks(Tensor x, const Tensor& padding_mask, std::int64_t layers, const Config& block) {
  for (std::int64_t i = 0; i < layers; ++i) {
    const LayerPtr encoder =
        create_layer("keras_hub>TransformerEncoder", block.with("name", "transformer_layer_" + std::to_string(i)));
    x = (*encoder)(x, CallArgs().tensor("padding_mask", padding_mask));
  }
  return x;
}

class BertBackboneModel final : public BackboneModel {
 public:
  explicit BertBackboneModel(const Config& config)
      : BackboneModel(config, "BertBackbone", "keras_hub.src.models.bert.bert_backbone", [] {
          std::vector<BackboneArgument> arguments = encoder_arguments(512);
          arguments.push_back({"num_segments", Config(std::int64_t{2})});
          return arguments;
        }()) {
    const std::int64_t hidden = integer("hidden_dim");
    const double dropout = number("dropout");
    const Config initializer = truncated_normal(0.02);
    const Tensor token_ids = token_input("token_ids"), segment_ids = token_input("segment_ids"),
                 padding_mask = token_input("padding_mask");
    token_embedding_ = create_layer("kiln>ReversibleEmbedding", {{"name", "token_embedding"},
                                                                 {"input_dim", integer("vocabulary_size")},
                                                                 {"output_dim", hidden},
                                                                 {"embeddings_initializer", initializer}});
    const LayerPtr position_embedding =
        create_layer("keras_hub>PositionEmbedding", {{"name", "position_embedding"},
                                                     {"sequence_length", integer("max_sequence_length")},
                                                     {"initializer", initializer}});
    const LayerPtr segment_embedding = create_layer("kiln>Embedding", {{"name", "segment_embedding"},
                                                                       {"input_dim", integer("num_segments")},
                                                                       {"output_dim", hidden},
                                                                       {"embeddings_initializer", initializer}});
    const Tensor tokens = (*token_embedding_)(token_ids);
    const Tensor positions = (*position_embedding)(tokens);
    const Tensor segments = (*segment_embedding)(segment_ids);
    Tensor x = (*create_layer("kiln>Add", {{"name", "embeddings_add"}}))(std::vector<Tensor>{tokens, positions, segments})[0];
    x = (*create_layer("kiln>LayerNormalization", {{"name", "embeddings_layer_norm"}, {"epsilon", 1e-12}}))(x);
    x = (*create_layer("kiln>Dropout", {{"name", "embeddings_dropout"}, {"rate", dropout}}))(x);
    const Tensor sequence = encoder_blocks(x, padding_mask, integer("num_layers"), with_dtype(Config{{"num_heads", integer("num_heads")},
                                            {"intermediate_dim", integer("intermediate_dim")},
                                            {"activation", "gelu_approximate"},
                                            {"dropout", dropout},
                                            {"layer_norm_epsilon", 1e-12},
                                            {"kernel_initializer", initializer}}));
    // x[:, 0, :], the first ([CLS]) token, through the pooler.
    const Tensor first = ops::get_item(sequence, {ops::Slice(), 0, ops::Slice()});
    const Tensor pooled = (*create_layer("kiln>Dense", {{"name", "pooled_dense"},
                                                        {"units", hidden},
                                                        {"activation", "tanh"},
                                                        {"kernel_initializer", initializer}}))(first);
    // Keras flattens the output dictionary by key: pooled_output, then sequence_output.
    finish({padding_mask, segment_ids, token_ids}, {pooled, sequence});
  }
};

// RoBERTa and DistilBERT: the same shape under different names and epsilons.
class TokenAndPositionEncoderModel : public BackboneModel {
 protected:
  TokenAndPositionEncoderModel(const Config& config, const std::string& class_name, const std::string& module,
                               const std::string& embedding_name, double epsilon)
      : BackboneModel(config, class_name, module, encoder_arguments(512)) {
    const double dropout = number("dropout");
    const Config initializer = truncated_normal(0.02);
    const Tensor token_ids = token_input("token_ids"), padding_mask = token_input("padding_mask");
    const LayerPtr embeddings = create_layer("keras_hub>TokenAndPositionEmbedding",
                                             {{"name", embedding_name},
                                              {"vocabulary_size", integer("vocabulary_size")},
                                              {"sequence_length", integer("max_sequence_length")},
                                              {"embedding_dim", integer("hidden_dim")},
                                              {"embeddings_initializer", initializer}});
    Tensor x = (*embeddings)(token_ids);
    token_embedding_ = embeddings->layers().at(0);
    x = (*create_layer("kiln>LayerNormalization", {{"name", "embeddings_layer_norm"}, {"epsilon", epsilon}}))(x);
    x = (*create_layer("kiln>Dropout", {{"name", "embeddings_dropout"}, {"rate", dropout}}))(x);
    const Tensor sequence = encoder_blocks(x, padding_mask, integer("num_layers"), with_dtype(Config{{"num_heads", integer("num_heads")},
                                            {"intermediate_dim", integer("intermediate_dim")},
                                            {"activation", "gelu"},
                                            {"dropout", dropout},
                                            {"layer_norm_epsilon", epsilon},
                                            {"kernel_initializer", initializer}}));
    finish({padding_mask, token_ids}, {sequence});
  }
};

class RobertaBackboneModel final : public TokenAndPositionEncoderModel {
 public:
  explicit RobertaBackboneModel(const Config& config)
      : TokenAndPositionEncoderModel(config, "RobertaBackbone", "keras_hub.src.models.roberta.roberta_backbone",
                                     "embeddings", 1e-5) {}
};

class DistilBertBackboneModel final : public TokenAndPositionEncoderModel {
 public:
  explicit DistilBertBackboneModel(const Config& config)
      : TokenAndPositionEncoderModel(config, "DistilBertBackbone",
                                     "keras_hub.src.models.distil_bert.distil_bert_backbone",
                                     "token_and_position_embedding", 1e-12) {}
};

KILN_REGISTER_LAYER("keras_hub>BertBackbone", BertBackboneModel);
KILN_REGISTER_LAYER("keras_hub>RobertaBackbone", RobertaBackboneModel);
KILN_REGISTER_LAYER("keras_hub>DistilBertBackbone", DistilBertBackboneModel);

}  // namespace

}  // namespace kiln::hub
