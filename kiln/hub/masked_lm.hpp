#pragma once
// keras-hub's MaskedLM tasks over an encoder backbone (BertMaskedLM, DistilBertMaskedLM, RobertaMaskedLM): the
// backbone's sequence output through a MaskedLMHead ("mlm_head": gelu Dense, LayerNormalization, the token embedding
// in reverse plus a bias) at the masked positions, as keras-hub builds them; they read and write keras-hub's .keras
// files (config {"backbone", "preprocessor", "name"}; weights under layers/<backbone>/ and layers/masked_lm_head/).
//
//   kiln::hub::MaskedLM mlm(kiln::hub::Backbone("BertBackbone", {...}));
//   auto batch = kiln::hub::mask_text(tokenizer, texts, /*sequence_length=*/128, {}, /*seed=*/1);
//   mlm.compile(kiln::Adam(5e-5), kiln::SparseCategoricalCrossentropy(/*from_logits=*/true));
//   mlm.fit(batch.inputs(), {batch.mask_ids}, kiln::FitOptions().sample_weight(batch.mask_weights));
//
// Inputs in Keras's order (sorted by name): mask_positions, padding_mask, segment_ids (BERT only), token_ids; the
// output is (batch, picks, vocabulary_size), the scores of the tokens at mask_positions.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/hub/backbone.hpp>
#include <kiln/hub/text_classifier.hpp>
#include <kiln/hub/tokenizers/tokenizer.hpp>
#include <kiln/layers/model_base.hpp>
#include <kiln/models/model.hpp>

namespace kiln::hub {

/// The task model: a graph over a backbone, registered as keras_hub>BertMaskedLM and the others.
class MaskedLMModel : public ModelBase {
 public:
  explicit MaskedLMModel(const Config& config);
  explicit MaskedLMModel(std::shared_ptr<BackboneModel> backbone);
  const std::shared_ptr<BackboneModel>& backbone() const { return backbone_; }
  Config get_config() const override;
  std::string keras_module() const override;
  std::string registered_name() const override { return "keras_hub>" + class_name(); }

 private:
  void make();
  std::shared_ptr<BackboneModel> backbone_;
};

/// A MaskedLM: TrainableModel's compile / fit / evaluate / predict over MaskedLMModel.
class MaskedLM : public TrainableModel<MaskedLMModel> {
 public:
  explicit MaskedLM(const Backbone& backbone);
  MaskedLM(std::shared_ptr<MaskedLMModel> model) : TrainableModel(std::move(model)) {}
  /// The MaskedLM a loaded model is (load_keras_model of a keras-hub MaskedLM file). ValueError otherwise.
  static MaskedLM of(const Model& model);
  Backbone backbone() const { return Backbone(this->layer_->backbone()); }
};

/// keras-hub's MaskedLMMaskGenerator arguments, with the defaults of its MaskedLMPreprocessors.
struct MaskOptions {
  double mask_selection_rate = 0.15;        ///< each selectable token's chance to be picked
  std::int64_t mask_selection_length = 96;  ///< picks per row, the rest padding (weight 0); more are cut at random
  double mask_token_rate = 0.8;             ///< a pick becomes the mask token ...
  double random_token_rate = 0.1;           ///< ... or a random token; otherwise it stays
  /// Never picked, besides padding (mask_text adds the tokenizer's start, end, pad and mask tokens when empty).
  std::vector<std::int64_t> unselectable_token_ids;
};

/// A masked batch as keras-hub's MaskedLMPreprocessor makes it: the model's inputs and the targets at the picks.
struct MaskedText {
  Array token_ids, segment_ids, padding_mask;  ///< (texts, sequence_length): token_ids with the picks replaced
  Array mask_positions;                        ///< (texts, mask_selection_length): the picks' positions, 0 after
  Array mask_ids;                              ///< the picks' original tokens (the targets), 0 after
  Array mask_weights;                          ///< 1 at a pick, 0 at padding: the sample weights
  /// The inputs in a BERT MaskedLM's order (mask_positions, padding_mask, segment_ids, token_ids), or without
  /// segment_ids for DistilBERT and RoBERTa.
  std::vector<Array> inputs(bool with_segment_ids = true) const;
};

/// Masks packed rows as keras-hub's MaskedLMMaskGenerator does, drawing from `seed`: each token not in
/// options.unselectable_token_ids nor padding (padding_mask 0) is picked with probability mask_selection_rate (at most mask_selection_length
/// per row, a random subset kept in order), then replaced by mask_token_id (mask_token_rate), a random id below
/// vocabulary_size (random_token_rate) or left. ValueError for rates outside [0, 1] or summing above 1, a mask id
/// outside the vocabulary, or mask_selection_length < 1.
MaskedText mask_tokens(const PackedText& packed, std::int64_t vocabulary_size, std::int64_t mask_token_id,
                       const MaskOptions& options, std::uint64_t seed);

/// pack_text, then mask_tokens with the tokenizer's [MASK] or <mask> token, the start, end, pad and mask tokens
/// unselectable unless options say otherwise. ValueError when the vocabulary has no mask token.
MaskedText mask_text(const Tokenizer& tokenizer, const std::vector<std::string>& texts, std::int64_t sequence_length,
                     const MaskOptions& options, std::uint64_t seed);

}  // namespace kiln::hub
