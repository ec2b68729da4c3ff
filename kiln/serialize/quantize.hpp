#pragma once
// Keras's model.quantize(mode) for a kiln model: a new model whose layers Keras would quantize run quantized,
// from the float model's weights, as Keras's own quantize computes them.
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

/// A new model: `model`'s config with every float Dense layer's dtype policy made Keras's QuantizedDTypePolicy of
/// `mode` (Keras quantizes Dense, EinsumDense and Embedding; kiln's other layers, and Dense layers already quantized,
/// stay as they are, named in the report and in one warning), then every weight copied, each quantized kernel from
/// the float one as Keras's Dense.quantize does it (ops::abs_max_quantize along axis 0: one kernel_scale per unit).
/// The new model is not compiled. ValueError for a mode kiln does not run ("int8" is the one today; Keras's "int4",
/// "float8", "gptq", "awq" and "ternary" are refused by name) or a model with no layer to quantize.
std::shared_ptr<ModelBase> quantize_model_base(const ModelBase& model, const std::string& mode,
                                               QuantizationReport* report = nullptr);

}  // namespace kiln
