#pragma once
// keras-hub's TextClassifier tasks over an encoder backbone (BertTextClassifier, DistilBertTextClassifier,
// RobertaTextClassifier): the backbone's pooled output (BERT) or its first token's vector (DistilBERT: a relu
// Dense of hidden_dim; RoBERTa: dropout and a tanh Dense) through dropout to a Dense of num_classes named
// "logits", as keras-hub builds them; they read and write keras-hub's .keras files (config {"backbone", "preprocessor",
// "num_classes", "activation", "dropout", "hidden_dim"}; weights under layers/<backbone>/ then the head's layers).
//
//   kiln::hub::TextClassifier classifier(kiln::hub::Backbone("BertBackbone", {...}), /*num_classes=*/2);
//   auto batch = kiln::hub::pack_text(tokenizer, texts, /*sequence_length=*/128);   // [CLS] ... [SEP] rows
//   classifier.compile(kiln::Adam(5e-5), kiln::SparseCategoricalCrossentropy(/*from_logits=*/true), {"accuracy"});
//   classifier.fit(batch.inputs(), labels, ...);
//
// Inputs are the backbone's, in Keras's order (BERT: padding_mask, segment_ids, token_ids; DistilBERT and RoBERTa:
// padding_mask, token_ids); the output is (batch, num_classes).
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/hub/backbone.hpp>
#include <kiln/hub/tokenizers/tokenizer.hpp>
#include <kiln/layers/model_base.hpp>
#include <kiln/models/model.hpp>

namespace kiln::hub {

/// keras-hub's TextClassifier arguments beyond the backbone.
struct TextClassifierOptions {
  std::string activation = "linear";  ///< the logits' activation (keras-hub's None: linear)
  double dropout = -1;                ///< < 0: the family's default (BERT 0.1, DistilBERT 0.2, RoBERTa 0.0)
  std::int64_t hidden_dim = 0;        ///< DistilBERT and RoBERTa's pooled Dense; 0: the backbone's hidden_dim
};

/// The task model: a graph over a backbone, registered as keras_hub>BertTextClassifier and the others.
class TextClassifierModel : public ModelBase {
 public:
  explicit TextClassifierModel(const Config& config);
  TextClassifierModel(std::shared_ptr<BackboneModel> backbone, std::int64_t num_classes,
                      const TextClassifierOptions& options = {});
  const std::shared_ptr<BackboneModel>& backbone() const { return backbone_; }
  std::int64_t num_classes() const { return num_classes_; }
  Config get_config() const override;
  std::string keras_module() const override;
  std::string registered_name() const override { return "keras_hub>" + class_name(); }

 private:
  void make();
  std::shared_ptr<BackboneModel> backbone_;
  std::int64_t num_classes_ = 0;
  TextClassifierOptions options_;
};

/// A TextClassifier: TrainableModel's compile / fit / evaluate / predict over TextClassifierModel.
class TextClassifier : public TrainableModel<TextClassifierModel> {
 public:
  TextClassifier(const Backbone& backbone, std::int64_t num_classes, const TextClassifierOptions& options = {});
  TextClassifier(std::shared_ptr<TextClassifierModel> model) : TrainableModel(std::move(model)) {}
  /// The TextClassifier a loaded model is (load_keras_model of a keras-hub TextClassifier file). ValueError otherwise.
  static TextClassifier of(const Model& model);
  Backbone backbone() const { return Backbone(this->layer_->backbone()); }
};

/// Token rows as keras-hub's TextClassifierPreprocessor makes them for an encoder (its MultiSegmentPacker, one
/// segment): each text tokenized, cut to sequence_length - 2 tokens, between the start and end tokens, padded with
/// the pad id; padding_mask marks the tokens, segment_ids are 0.
struct PackedText {
  Array token_ids, segment_ids, padding_mask;  ///< each (texts, sequence_length), float32
  /// The inputs in a BERT backbone's order (padding_mask, segment_ids, token_ids), or without segment_ids for
  /// DistilBERT and RoBERTa.
  std::vector<Array> inputs(bool with_segment_ids = true) const;
};

/// Packs `texts` with `tokenizer` (WordPiece: [CLS], [SEP], [PAD] from its vocabulary; BPE: <s>, </s>, <pad>;
/// or the ids given). ValueError when sequence_length < 2 or a special token is missing from the vocabulary.
PackedText pack_text(const Tokenizer& tokenizer, const std::vector<std::string>& texts, std::int64_t sequence_length,
                     std::int64_t start_id = -1, std::int64_t end_id = -1, std::int64_t pad_id = -1);

}  // namespace kiln::hub
