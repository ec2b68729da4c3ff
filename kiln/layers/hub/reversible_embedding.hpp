#pragma once
// ReversibleEmbedding: an Embedding that also maps vectors back to vocabulary scores, for a language model's
// tied output head (keras-hub's layers.ReversibleEmbedding).
#include <cstdint>

#include <kiln/layers/core/embedding.hpp>

namespace kiln {

/// The layer behind kiln::ReversibleEmbedding: an Embedding that also maps vectors back to scores over the
/// vocabulary (the call option "reverse": x · embeddingsᵀ), for a language model's output head tied to its
/// input embedding. Untied (tie_weights = false), the reverse map is its own weight, "reverse_embeddings"
/// (output_dim, input_dim). In int8 (Keras's quantize("int8")) the embeddings are int8 with a scale per row, as
/// Embedding's, and the reverse map multiplies the inputs, quantized per row, by them (tied) or by an int8
/// "reverse_embeddings" with "reverse_embeddings_scale" per vocabulary entry (untied), as Keras's _int8_call.
class ReversibleEmbeddingLayer : public EmbeddingLayer {
 public:
  /// Embedding's arguments, plus Keras's tie_weights = true, reverse_dtype = null (kiln computes in the
  /// layer's dtype: only null is accepted) and logit_soft_cap = null (a positive c: scores become
  /// c·tanh(scores / c)).
  explicit ReversibleEmbeddingLayer(const Config& config);
  bool tie_weights() const { return tie_weights_; }  ///< whether the reverse map is the embeddings transposed
  Config get_config() const override;

 protected:
  void build(const Shape& input_shape) override;
  /// Indices to vectors as Embedding does; with the option "reverse" = true, vectors (..., output_dim) to
  /// scores (..., input_dim).
  Tensor call(const Tensor& input, const CallArgs& args) override;
  std::vector<std::string> call_argument_names() const override { return {"reverse"}; }

 private:
  bool tie_weights_ = true;
  Config logit_soft_cap_;
  WeightId reverse_embeddings_ = 0, reverse_embeddings_scale_ = 0, reverse_embeddings_zero_ = 0;
};

/// An embedding that can also run in reverse, from vectors to vocabulary scores: Keras's
/// layers.ReversibleEmbedding (keras-hub's, for tied language-model heads).
///
///   kiln::ReversibleEmbedding embed(vocabulary, 128);
///   kiln::Tensor h = embed(ids);                                                // (None, T, 128)
///   kiln::Tensor logits = embed(h, kiln::CallArgs().option("reverse", true));   // (None, T, vocabulary)
class ReversibleEmbedding : public LayerHandle<ReversibleEmbeddingLayer> {
 public:
  /// `input_dim` indices of `output_dim` values; further config keys in `options` (tie_weights, ...).
  explicit ReversibleEmbedding(std::int64_t input_dim, std::int64_t output_dim, const Config& options = {});
  /// From a whole config, with the keys of ReversibleEmbeddingLayer(const Config&).
  explicit ReversibleEmbedding(const Config& config)
      : LayerHandle(std::make_shared<ReversibleEmbeddingLayer>(config)) {}
};

}  // namespace kiln
