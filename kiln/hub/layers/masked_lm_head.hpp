#pragma once
// keras-hub's MaskedLMHead ("keras_hub>MaskedLMHead"): the vocabulary scores of a masked language model at the
// masked positions only. Called on [sequence (batch, steps, hidden), mask_positions (batch, picks)]: the vectors at
// the positions (take_along_axis), a Dense of the embedding width with intermediate_activation
// ("_intermediate_dense"), a LayerNormalization ("_intermediate_layer_norm"), then the token embedding run in
// reverse (tied to the backbone's, as keras-hub's BERT, DistilBERT and RoBERTa tasks make it) or its own
// "output_kernel" (hidden, vocabulary_size), plus "output_bias" (vocabulary_size,), then `activation`: (batch, picks,
// vocabulary_size).
//
// A tied head shares the embedding layer with its backbone: the embedding's weights are the backbone's, listed and
// saved once, as Keras's saving skips an object already written.
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <kiln/layers/layer.hpp>

namespace kiln::hub {

class MaskedLMHeadLayer final : public Layer {
 public:
  /// keras-hub's arguments: vocabulary_size (null with a token_embedding), token_embedding (null, or a serialized
  /// embedding layer the head then owns), intermediate_activation = "relu", activation = null, layer_norm_epsilon =
  /// 1e-5, kernel_initializer = glorot_uniform, bias_initializer = zeros. One of vocabulary_size and
  /// token_embedding is required; both must agree. ConfigError otherwise.
  explicit MaskedLMHeadLayer(const Config& config);
  /// A head tied to `token_embedding` (an Embedding, not owned: its weights stay its model's); `config` has the
  /// other arguments.
  MaskedLMHeadLayer(const Config& config, LayerPtr token_embedding);

  std::int64_t vocabulary_size() const { return vocabulary_size_; }
  const LayerPtr& token_embedding() const { return token_embedding_; }
  Config get_config() const override;
  /// "_intermediate_dense/vars/0", ..., and "vars/0" for output_bias (output_kernel first when untied).
  std::vector<std::string> keras_weight_paths() const override;
  std::vector<std::pair<std::string, std::string>> keras_sublayers() const override;

 protected:
  void build(const std::vector<Shape>& input_shapes) override;
  std::vector<Tensor> call(const std::vector<Tensor>& inputs, const CallArgs& args) override;
  std::pair<std::size_t, std::size_t> input_count() const override { return {2, 2}; }

 private:
  void read(const Config& config, bool tied);
  /// keras-hub's attribute holding `child`: "_intermediate_dense", "_intermediate_layer_norm", "token_embedding".
  std::string attribute_of(const LayerPtr& child) const;
  std::int64_t vocabulary_size_ = 0;
  LayerPtr token_embedding_;
  bool owns_embedding_ = false;
  std::string intermediate_activation_ = "relu";
  std::string activation_ = "linear";
  double layer_norm_epsilon_ = 1e-5;
  Config kernel_initializer_, bias_initializer_;
  LayerPtr dense_, norm_;
  WeightId kernel_ = 0, bias_ = 0;
};

}  // namespace kiln::hub
