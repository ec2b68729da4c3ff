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
  /// Regularizers, constraints and LoRA are not supported. A QuantizedDTypePolicy of mode "int8" (Keras's
  /// Embedding after quantize("int8")) keeps int8 rows "embeddings" and a float "embeddings_scale" per row
  /// (ops::quantized_gather); so does ReversibleEmbedding. An Embedding of Keras's int4 policy ("int4/<block>",
  /// "int4/-1") keeps its rows packed two values a byte, "embeddings" (input_dim, ceil(output_dim / 2)) int8, and
  /// per row a float "embeddings_scale" (input_dim,), or by blocks of columns "embeddings_scale" and int8
  /// "embeddings_zero" (input_dim, blocks) and "g_idx" (output_dim,) (ops::quantized_gather_int4).
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

  /// A DTypePolicyMap set the policy: the quantization config is read again for the mode.
  void quantization_resolved() override;
  WeightId embeddings_id() const { return embeddings_; }  ///< for layers that extend it
  WeightId embeddings_scale_id() const { return embeddings_scale_; }  ///< int8: one scale per row
  WeightId embeddings_zero_id() const { return embeddings_zero_; }    ///< int4 by blocks: the zero points
  WeightId g_idx_id() const { return g_idx_; }                        ///< int4 by blocks: each column's block
  /// int4: the columns a block of scales covers, or -1 (one scale per row); 0 unless int4.
  std::int64_t int4_block_size() const { return int4_block_size_; }
  /// int8: whether the quantization config's activation quantizer quantizes float inputs (Keras's default; what
  /// a ReversibleEmbedding in reverse multiplies).
  bool quantize_inputs() const { return quantize_inputs_; }
  /// The embeddings' initializer, which a ReversibleEmbedding's untied reverse map shares.
  const Initializer& embeddings_initializer() const { return embeddings_initializer_; }

 private:
  std::int64_t input_dim_ = 0;
  std::int64_t output_dim_ = 0;
  bool mask_zero_ = false;
  Initializer embeddings_initializer_;
  WeightRegularization embeddings_regularization_;
  WeightId embeddings_ = 0, embeddings_scale_ = 0, embeddings_zero_ = 0, g_idx_ = 0;
  std::int64_t int4_block_size_ = 0;  // int4: columns a block of scales and zero points covers; -1 per row
  Config quantization_config_;  // as Keras writes it for an int8 Embedding; null for a float one
  Config given_quantization_config_;
  bool quantize_inputs_ = true;
  void read_quantization_config(ConfigReader& args);
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

}  // namespace kiln
