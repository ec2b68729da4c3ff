#pragma once
// Keras's model.quantize(mode) for a kiln model: a new model whose Dense and Embedding layers run quantized, from the
// float model's weights, as Keras's own quantize computes them.
//
//   kiln::Model small = kiln::quantize(model, "int8");   // models/loading.hpp; model itself is left as it was
//   small.save("model_int8.keras");                       // Keras reads it as its own quantized model
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <kiln/layers/model_base.hpp>

namespace kiln {

/// Which layers quantize_model_base quantized, and which it left as they were and why (Keras's "Quantization
/// report").
struct QuantizationReport {
  std::vector<std::string> quantized;                        ///< layer names ("dense_1"), nested ones as "inner/dense"
  std::vector<std::pair<std::string, std::string>> skipped;  ///< (layer name, why)
};

/// A new model: `model`'s config with every float Dense and Embedding layer's dtype policy made Keras's policy of
/// `mode`, then every weight copied, the quantized ones from the float ones as Keras's quantize computes them:
/// - "int8": Dense's kernel along axis 0 (one kernel_scale per unit), Embedding's rows along the last axis (one
///   embeddings_scale per row), ops::abs_max_quantize;
/// - "int4" (Keras's default: "int4/128") or "int4/<block>": Dense only, by blocks of input rows with a scale and a
///   zero point per block and unit, two values a byte (Keras's abs_max_quantize_grouped_with_zero_point, pack_int4);
///   Embedding layers stay float.
/// Layers Keras would quantize and kiln does not (EinsumDense, ReversibleEmbedding; MultiHeadAttention, whose
/// quantized projections Keras 3.16's config does not record, so that Keras cannot load such a model back; the layers
/// inside wrappers) and layers already quantized stay as they are, named in the report and in one warning. The new
/// model is not compiled. ValueError for a mode kiln does not run (Keras's per-channel int4, "float8", "gptq", "awq"
/// and "ternary" are refused by name) or a model with no layer to quantize.
std::shared_ptr<ModelBase> quantize_model_base(const ModelBase& model, const std::string& mode,
                                               QuantizationReport* report = nullptr);

}  // namespace kiln
