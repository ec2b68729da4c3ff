#pragma once
// Keras's own files: models trained in Python, brought into kiln to predict, summarize, save and keep
// training.
//
//   kiln::Model model = kiln::load_keras_model("classifier.keras");  // Keras 3
//   kiln::Model old = kiln::load_keras_model("model.h5");             // Keras 2, tf.keras, Keras 3 legacy
//   kiln::Model any = kiln::load_model("classifier.keras");           // load_model reads either kind too
//   model.fit(x, y);                                                  // compiled as Keras compiled it
//
// A `.keras` file is a zip archive of config.json (the model's architecture and compile config),
// metadata.json and model.weights.h5 (the weights, and the optimizer's state when it was compiled). A
// legacy `.h5` file is one HDF5 file: the model_config and training_config attributes, the weights under
// model_weights/, the optimizer's under optimizer_weights/. Both are read by kiln's own readers, which
// trust nothing in the file: docs/keras.md lists what they accept and refuse.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <kiln/layers/model_base.hpp>
#include <kiln/serialize/saving.hpp>

namespace kiln {

/// Reads a model Keras saved: a Keras 3 `.keras` archive, or a legacy HDF5 `.h5` file written by Keras 2,
/// tf.keras or Keras 3 (the format is told by the bytes, not the name). The model has the file's
/// architecture and weights; with options.compile and a compile config in the file (Keras 3's
/// compile_config, legacy training_config), it comes back compiled with Keras's optimizer, loss and metrics.
/// Every failure is a SerializationError naming the file. A layer, argument or feature kiln does not support
/// is a FileConfigError (a SerializationError that is a ConfigError too) naming the layer, its class and where
/// it is; a Lambda layer is refused as Keras's safe_mode refuses it. A compile config without an optimizer
/// compiles with Keras's default (RMSprop); one without a loss leaves the model uncompiled, with a warning.
/// Users call kiln::load_keras_model (models/loading.hpp), which gives this model in a kiln::Model handle.
std::shared_ptr<ModelBase> load_keras_model_base(const std::string& path, const LoadOptions& options = {});

/// Assigns the weights of a Keras weights file to a built model whose architecture matches the one that
/// saved them: a Keras 3 `.weights.h5` (model.save_weights), a `.keras` archive, or a legacy `.h5` (full
/// model or weights only). Matched as Keras matches them: by Keras's layer paths for Keras 3 files, by layer
/// name and weight order for legacy ones. Every shape is checked before anything is assigned: on a
/// mismatch the model is unchanged (ValueError or ShapeError, inside a SerializationError naming the file).
/// A path ending in ".json" is Keras's sharded weights index (model.weights.json: its weight_map names the
/// .weights.h5 shards beside it, as save_weights(max_shard_size=...) and keras-hub's large presets write them).
void load_keras_weights(ModelBase& model, const std::string& path);
/// The same, leaving out `objects_to_skip` (layers of `model`, and their weights) as Keras's
/// load_weights(objects_to_skip=...) does: keras-hub reads a task's task.weights.h5 so, without its backbone.
void load_keras_weights(ModelBase& model, const std::string& path, const std::vector<const Layer*>& objects_to_skip);

/// Writes the weights of `model` as Keras 3's model.save_weights("x.weights.h5") does: the groups and datasets of
/// a .keras archive's model.weights.h5, without the optimizer's state. Atomic. LayerStateError when the model is
/// not built, SerializationError when the file cannot be written.
void save_keras_weights(const ModelBase& model, const std::string& path);
/// The same without `objects_to_skip` (Keras's save_weights(objects_to_skip=...)), with the input layers that
/// belong to them: keras-hub's task.weights.h5 is a task's weights without its backbone's.
void save_keras_weights(const ModelBase& model, const std::string& path, const std::vector<const Layer*>& objects_to_skip);

/// Writes the weights of `model` as Keras 3's model.save_weights("model.weights.json", max_shard_size=...) does
/// (ShardedH5IOStore): the datasets in shards beside the index, model_00000.weights.h5, model_00001.weights.h5,
/// ..., each at most `max_shard_size` GB (1024^3 bytes, Keras's unit), a new shard begun when the next dataset
/// would pass it; the index, `path`, maps each variables group to the shard or shards holding it. A path not
/// ending in ".json" is renamed to one that does, with a warning, as Keras renames it. keras-hub's presets over
/// 10 GB are written so (hub::save_preset). Every file is written beside its target first and none replaces its
/// target until all are written; the shards are renamed into place before the index. ValueError for
/// max_shard_size <= 0 or a weight larger than max_shard_size by itself; other errors as save_keras_weights's.
void save_keras_weights_sharded(const ModelBase& model, const std::string& path, double max_shard_size,
                                const std::vector<const Layer*>& objects_to_skip = {});

/// Writes `model` as a Keras 3 `.keras` file that keras.saving.load_model reads and predicts with identically:
/// config.json as Keras 3 serializes the same model (module, class_name, config, registered_name,
/// build_config, and compile_config when compiled), metadata.json, and model.weights.h5 with every weight
/// (and, when compiled, the optimizer's state) under the path Keras's saving_lib uses. Atomic, as
/// save_model is. Built-in layers are written as Keras's own classes; a kiln-only or user layer keeps its
/// registered "Package>Name", which Python then needs registered too (keras.saving.register_keras_serializable).
/// LayerStateError when the model is not built, ConfigError for a model that is neither Sequential nor
/// functional, SerializationError when the file cannot be written.
void save_keras_model(const ModelBase& model, const std::string& path);

/// Writes `model` in Keras's legacy HDF5 format, as Keras 3 writes `model.save("m.h5")`: the model_config and
/// training_config attributes, the weights under model_weights/ (layer_names, each layer's weight_names) and,
/// when compiled, the optimizer's variables under optimizer_weights/. Keras's keras.saving.load_model reads it,
/// as does load_keras_model. Atomic; errors as save_keras_model's.
void save_keras_h5(const ModelBase& model, const std::string& path);

/// What verify_keras_file found in a Keras file that passed every check.
struct KerasFileInfo {
  std::string format;                ///< "Keras 3 .keras archive" or "legacy Keras HDF5"
  std::string keras_version;         ///< as the file states it ("3.16.0", "2.3.1"), or ""
  std::uint64_t size = 0;            ///< of the file, in bytes
  std::vector<std::string> entries;  ///< a .keras archive's entries: "config.json (1792 bytes)"
  std::vector<std::string> weights;  ///< every weight dataset: "layers/dense/vars/0 (8, 16)"
};
/// Checks a Keras file without keeping the model: every zip entry's CRC, the config, every weight dataset
/// read whole, and the model built and given its weights. SerializationError on the first problem.
KerasFileInfo verify_keras_file(const std::string& path);

/// True when the file at `path` starts like a Keras file (a zip archive or an HDF5 file) rather than a kiln
/// file. SerializationError when it cannot be read.
bool is_keras_file(const std::string& path);

}  // namespace kiln
