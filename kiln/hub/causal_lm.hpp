#pragma once
// keras-hub's CausalLM tasks over a backbone (GPT2CausalLM, LlamaCausalLM, Llama3CausalLM, MistralCausalLM,
// QwenCausalLM, Qwen3CausalLM, Phi3CausalLM, GemmaCausalLM, FalconCausalLM): the backbone's sequence output mapped
// to next-token logits by its token embedding in reverse (tied or not), and keras-hub's generate.
//
//   kiln::hub::CausalLM lm(kiln::hub::Backbone::of(kiln::load_keras_model("llama.keras")));
//   kiln::GenerateOptions greedy;                                  // keras-hub's samplers: greedy, top_k, ...
//   std::vector<std::int64_t> text = lm.generate({12, 7, 40}, /*max_length=*/32, greedy);
//
// Inputs as the backbone's ("padding_mask", then "token_ids"); the output is (batch, steps, vocabulary) logits.
// It trains with fit on token ids and next-token targets (SparseCategoricalCrossentropy from logits), and saves as
// keras-hub saves a task: its config holds the backbone's ({"backbone": ..., "preprocessor": null}), its weights
// are the backbone's under layers/<backbone>/.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/hub/backbone.hpp>
#include <kiln/layers/model_base.hpp>
#include <kiln/models/model.hpp>
#include <kiln/train/generate.hpp>

namespace kiln::hub {

/// The model behind a CausalLM.
class CausalLMModel : public ModelBase {
 public:
  /// keras-hub's task config: "backbone" (a serialized backbone, as keras-hub writes it), "preprocessor" (read
  /// as null: kiln generates from token ids; a preprocessor in the file is skipped with a warning), "name".
  explicit CausalLMModel(const Config& config);
  /// The task over `backbone`, named as keras-hub names it ("gpt2_causal_lm").
  explicit CausalLMModel(std::shared_ptr<BackboneModel> backbone);
  const std::shared_ptr<BackboneModel>& backbone() const { return backbone_; }
  Config get_config() const override;
  std::string keras_module() const override;
  /// "keras_hub>GPT2CausalLM", ...: one C++ class serves every family's task.
  std::string registered_name() const override { return "keras_hub>" + class_name(); }

 private:
  void make();
  std::shared_ptr<BackboneModel> backbone_;
};

/// What generate() returns: keras-hub's {"token_ids", "padding_mask"}.
struct Generated {
  Array token_ids;     ///< (batch, max_length): each row's prompt, then its generated tokens
  Array padding_mask;  ///< (batch, max_length): 1 up to each row's first stop token (all 1 without stop tokens)
};

/// A keras-hub CausalLM: kiln::Model's API (compile, fit, predict, save) and keras-hub's generate.
class CausalLM : public TrainableModel<CausalLMModel> {
 public:
  /// The task keras-hub makes for `backbone`'s family (GPT2Backbone gives GPT2CausalLM). ConfigError for a
  /// backbone that is not a decoder (BERT's).
  explicit CausalLM(const Backbone& backbone);
  /// A handle to an existing task.
  CausalLM(std::shared_ptr<CausalLMModel> model) : TrainableModel(std::move(model)) {}
  /// The task a model handle holds (a loaded task file's); ValueError when it is not one.
  static CausalLM of(const Model& model);
  Backbone backbone() const { return Backbone(this->layer_->backbone()); }

  /// keras-hub's CausalLM.generate on token ids, without a preprocessor: each row of `token_ids` (batch,
  /// max_length) holds a prompt where `padding_mask` is 1 (left-aligned); from the shortest prompt's end every
  /// position of a row outside its prompt gets a token drawn from the logits of the position before, until the
  /// row is full, or (with stop tokens) until every row has drawn one. `options` picks the sampler (its
  /// max_new_tokens is not used: the rows' length is max_length); "beam" keeps options.num_beams sequences a row
  /// (keras-hub's BeamSampler, each position reading the whole window) and returns each row's best. With use_cache (the default) the prompts'
  /// common part but its last token goes through the backbone in one pass that fills key/value caches (the prefill,
  /// no head: its scores would not be read), then each position
  /// costs one token's step through them; without, the whole window is read again each time.
  /// Both give the same tokens. ValueError for shapes that disagree, an empty prompt or a token outside the
  /// vocabulary.
  Generated generate(const Array& token_ids, const Array& padding_mask, const GenerateOptions& options = {},
                     const std::vector<std::int64_t>& stop_token_ids = {}) const;
  /// One prompt, generated to `max_length` tokens in all (prompt included), or to the first stop token (kept).
  std::vector<std::int64_t> generate(const std::vector<std::int64_t>& prompt, std::int64_t max_length,
                                     const GenerateOptions& options = {},
                                     const std::vector<std::int64_t>& stop_token_ids = {}) const;
};

}  // namespace kiln::hub
