#pragma once
// Models back from files and configs, in the handle users hold: Keras's keras.saving.load_model,
// keras.models.model_from_json and Model.from_config.
//
//   kiln::Model again = kiln::load_model("forecast.kiln");              // compiled, with the optimizer's state
//   kiln::Model keras = kiln::load_keras_model("classifier.keras");     // a model Keras saved
//   kiln::Model fresh = kiln::model_from_json(model.to_json());         // newly initialized weights
//
// The reading is serialize/'s (saving.hpp, keras.hpp: what each accepts and refuses); these give its model
// as a kiln::Model.
#include <string>

#include <kiln/layers/config.hpp>
#include <kiln/models/model.hpp>
#include <kiln/serialize/keras.hpp>
#include <kiln/serialize/quantize.hpp>
#include <kiln/serialize/saving.hpp>

namespace kiln {

/// The model a kiln file (save_model's), a Keras 3 `.keras` file or a legacy Keras `.h5` file holds, with its
/// weights; compiled, with the optimizer's state and the epochs trained, when the file says how and
/// options.compile is set (serialize/saving.hpp's load_model_base).
inline Model load_model(const std::string& path, const LoadOptions& options = {}) {
  return Model(load_model_base(path, options));
}
/// A model Keras saved, `.keras` or legacy `.h5` (serialize/keras.hpp's load_keras_model_base).
inline Model load_keras_model(const std::string& path, const LoadOptions& options = {}) {
  return Model(load_keras_model_base(path, options));
}
/// A new model from model_to_json's text as a Config, with fresh weights (model_base_from_config).
inline Model model_from_config(const Config& config) { return Model(model_base_from_config(config)); }
/// A new model from JSON text, with fresh weights (model_base_from_json).
inline Model model_from_json(const std::string& json) { return Model(model_base_from_json(json)); }
/// Keras's model.quantize(mode) as a new model (serialize/quantize.hpp's quantize_model_base): "int8" (its float
/// Dense and Embedding layers) or "int4" (its Dense layers, by blocks), from `model`'s weights as Keras quantizes
/// them; `model` is left as it was.
inline Model quantize(const Model& model, const std::string& mode, QuantizationReport* report = nullptr) {
  return Model(quantize_model_base(*model.ptr(), mode, report));
}

}  // namespace kiln
