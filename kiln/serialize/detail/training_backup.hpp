#pragma once
// Internal: the file BackupAndRestore keeps (serialize/saving.cpp): a model file whose metadata also holds
// the run's progress, written atomically, so the weights, the optimizer state and the progress they
// belong to are always one consistent whole.
#include <string>

#include <kiln/layers/config.hpp>
#include <kiln/layers/model_base.hpp>

namespace kiln::detail {

/// save_model to `path` (a kiln file), with {"backup": progress} in its metadata. LayerStateError for a
/// model that is not compiled; SerializationError when the file cannot be written (the old one stays).
void save_training_backup(const ModelBase& model, const std::string& path, const Config& progress);

/// Assigns a backup's weights, optimizer state and epochs_trained to `model` (compiled, of the same
/// architecture) and returns its progress. The file is read whole and its weights checked against the model
/// before any is assigned: a damaged file (SerializationError) or one of another model (ValueError,
/// ShapeError) leaves the weights as they were.
Config restore_training_backup(ModelBase& model, const std::string& path);

}  // namespace kiln::detail
