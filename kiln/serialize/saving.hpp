#pragma once
// Saving and loading models, as Keras's model.save / keras.saving.load_model do, in one checked file:
// the model's config (JSON, Keras-shaped), its weights by name, the optimizer's state and the training
// progress, each section with its length and CRC32 (serialize/detail/container.hpp has the layout).
//
//   model.save("forecast.kiln");                           // atomic: a failure leaves the old file whole
//   kiln::Model again = kiln::load_model("forecast.kiln");  // compiled, with the optimizer's state
//   again.fit(x, y, kiln::FitOptions().initial_epoch(again.epochs_trained()).epochs(20));
//
//   model.save_weights("forecast.weights.kiln");           // weights only, matched by name on loading
//   model.load_weights("forecast.weights.kiln");
//
//   std::string json = model.to_json();                     // the architecture alone
//   kiln::Model fresh = kiln::model_from_json(json);        // newly initialized weights
//
// A damaged, truncated or foreign file is refused with kiln::SerializationError naming the file, the
// section and what is wrong; nothing in it is trusted before its checksum matches.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <kiln/layers/config.hpp>
#include <kiln/layers/model_base.hpp>

namespace kiln {

/// How load_model rebuilds a model.
struct LoadOptions {
  /// Compile the model as it was saved (optimizer with its state, losses, metrics) when the file says how.
  /// A model compiled with a loss made from a C++ function is reloaded uncompiled: compile it again.
  bool compile = true;
};

/// Saves the whole model to `path`, atomically: its config and weights and, when it is compiled, its
/// compile_config, the optimizer's state and the epochs trained. A path ending in ".keras" is written as a
/// Keras 3 file, one ending in ".h5" in Keras's legacy HDF5 format (save_keras_model and save_keras_h5 in
/// serialize/keras.hpp), any other as a kiln file. LayerStateError when the model is
/// not built, ValueError when two weights share a path, ConfigError when a layer's or the optimizer's class is not
/// registered, SerializationError when the file cannot be written (the previous file then stays whole).
void save_model(const ModelBase& model, const std::string& path);
/// Rebuilds a model that save_model wrote, with its weights; compiled, with the optimizer's state and the
/// epochs trained, when the file says how and options.compile is set, so that fit() resumes where it
/// stopped. SerializationError naming the file and the section for anything wrong with the file: damage,
/// truncation, a foreign format, a config that is no model, weights that do not fit it. Users call
/// kiln::load_model (models/loading.hpp), which gives this model in a kiln::Model handle.
std::shared_ptr<ModelBase> load_model_base(const std::string& path, const LoadOptions& options = {});

/// Weights only. Loading matches them by path ("dense/kernel") and checks every shape before assigning
/// any, so on a mismatch (ShapeError naming the weight and both shapes) the model is left unchanged.
/// Saving is atomic, as save_model's; LayerStateError when the model is not built.
void save_weights(const ModelBase& model, const std::string& path);
/// Assigns the weights a file holds (one written by save_weights or save_model) to a built model, each
/// converted to its weight's dtype. ValueError for a weight the file lacks or one the model lacks, ShapeError
/// for a shape that differs; then nothing is assigned. LayerStateError when the model is not built,
/// SerializationError for a damaged or foreign file.
void load_weights(ModelBase& model, const std::string& path);

/// The model's architecture as Keras writes it: {"class_name", "config", "registered_name", "build_config"}.
Config model_config(const ModelBase& model);
/// model_config as JSON text: `indent` spaces per level (0: one line, at most 16, else ValueError).
std::string model_to_json(const ModelBase& model, int indent = 2);
/// A new model from model_to_json's text (or a Config of that shape): every layer built at once from its
/// build_config, with fresh weights. ConfigError naming an unknown class and the registered names nearest it.
/// kiln::model_from_config (models/loading.hpp) gives it in a kiln::Model handle.
std::shared_ptr<ModelBase> model_base_from_config(const Config& config);
/// model_base_from_config of JSON text; SerializationError for malformed JSON.
std::shared_ptr<ModelBase> model_base_from_json(const std::string& json);

/// What `kiln verify` reports: the frame of a kiln file, every checksum checked.
struct FileSection {
  std::string tag;           ///< "CONF"
  std::string name;          ///< "config"
  std::uint64_t offset = 0;  ///< of the payload, in bytes from the start of the file
  std::uint64_t length = 0;  ///< of the payload, in bytes
  std::uint32_t crc32 = 0;   ///< as stored, and matched: of the tag, the length and the payload
};
/// What verify_file found in a kiln file that passed every check.
struct FileInfo {
  std::uint64_t size = 0;             ///< of the file, in bytes
  std::uint32_t format_version = 0;   ///< of the file's frame (serialize/detail/container.hpp)
  std::vector<FileSection> sections;  ///< in file order
  std::vector<std::string> weights;   ///< "dense/kernel (4, 8) float32"
  Config metadata;                    ///< kiln version, save date, epochs trained
};
/// Checks the whole file (frame, checksums, the config's JSON, every weight record) without building the
/// model. SerializationError on the first problem.
FileInfo verify_file(const std::string& path);
/// The file's config section: the model's architecture plus "compile_config" when it was compiled. For a Keras
/// file, its config.json, or a legacy file's model_config (and "training_config").
Config read_model_config(const std::string& path);

}  // namespace kiln
