#pragma once
// Embedding: maps each index to a learned vector, a row of `embeddings` (Keras's layers.Embedding).
// Indices come as a float tensor of whole numbers (kiln tensors are float32 or float64) of any shape;
// the output has shape indices.shape + (output_dim,).
#include <cstdint>
#include <functional>
#include <string>

#include <kiln/layers/layer.hpp>

namespace kiln {

/// The layer behind kiln::Embedding: one weight, "embeddings" (input_dim, output_dim), whose row i is the
/// vector of index i.
class EmbeddingLayer : public Layer {
 public:
  /// Arguments (Keras names and defaults): input_dim (required; the vocabulary size), output_dim (required),
  /// embeddings_initializer = uniform (RandomUniform(-0.05, 0.05)), mask_zero = false (true: index 0 is
  /// padding, and the output carries a mask, 0 where the index is 0, to the layers after it).
  /// Regularizers, constraints and LoRA are not supported.
  /// Keras 2's input_length is accepted and ignored, so old configs load. Throws ConfigError when a dimension
  /// is missing or not positive, when an unsupported argument is set, or on an unknown key.
  explicit EmbeddingLayer(const Config& config);
  /// For layers that extend Embedding's arguments: `more` reads their own keys before the reader finishes.
  EmbeddingLayer(const Config& config, const std::string& class_name, const std::function<void(ConfigReader&)>& more);
  std::int64_t input_dim() const { return input_dim_; }    ///< the vocabulary size: indices are 0 .. input_dim-1
  std::int64_t output_dim() const { return output_dim_; }  ///< the length of each embedding vector
  Config get_config() const override;
  bool mask_zero() const { return mask_zero_; }  ///< whether index 0 is padding, masked downstream
  bool supports_masking() const override { return mask_zero_; }
  /// With mask_zero, the input's nonzero indices as a mask (1 kept, 0 padding).
  std::vector<Tensor> compute_mask(const std::vector<Tensor>& inputs, const Tensor& mask) const override;

 protected:
  /// Creates the embeddings matrix; its shape does not depend on the input's.
  void build(const Shape& input_shape) override;
  /// The rows of the embeddings that `input` indexes, shaped input.shape + (output_dim,). Running the graph
  /// throws ValueError on an index that is not a whole number in [0, input_dim).
  Tensor call(const Tensor& input, const CallArgs& args) override;

  WeightId embeddings_id() const { return embeddings_; }  ///< for layers that extend it
  /// The embeddings' initializer, which a ReversibleEmbedding's untied reverse map shares.
  const Initializer& embeddings_initializer() const { return embeddings_initializer_; }

 private:
  std::int64_t input_dim_ = 0;
  std::int64_t output_dim_ = 0;
  bool mask_zero_ = false;
  Initializer embeddings_initializer_;
  WeightRegularization embeddings_regularization_;
  WeightId embeddings_ = 0;
};

/// Turns indices (token ids, as whole numbers in a float tensor) into learned dense vectors: Keras's
/// layers.Embedding.
///
///   kiln::Tensor ids = kiln::Input({kiln::Shape::unknown, 10});
///   kiln::Tensor vectors = kiln::Embedding(1000, 64)(ids);  // (None, 10, 64)
class Embedding : public LayerHandle<EmbeddingLayer> {
 public:
  /// A vocabulary of `input_dim` indices, each mapped to a vector of `output_dim` values. `options` holds
  /// further config keys: embeddings_initializer, name, trainable, dtype.
  explicit Embedding(std::int64_t input_dim, std::int64_t output_dim, const Config& options = {});
  /// From a whole config, with the keys of EmbeddingLayer(const Config&).
  explicit Embedding(const Config& config) : LayerHandle(std::make_shared<EmbeddingLayer>(config)) {}
};

/// The layer behind kiln::ReversibleEmbedding: an Embedding that also maps vectors back to scores over the
/// vocabulary (the call option "reverse": x · embeddingsᵀ), for a language model's output head tied to its
/// input embedding. Untied (tie_weights = false), the reverse map is its own weight, "reverse_embeddings"
/// (output_dim, input_dim).
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
  WeightId reverse_embeddings_ = 0;
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
