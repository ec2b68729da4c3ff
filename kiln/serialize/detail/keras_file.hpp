#pragma once
// What load_model needs from the Keras readers (serialize/keras.cpp): the file's bytes are read once.
#include <memory>
#include <string>
#include <string_view>

#include <kiln/core/detail/files.hpp>
#include <kiln/layers/config.hpp>
#include <kiln/serialize/saving.hpp>

namespace kiln::detail {

// True when `bytes` start like a Keras file: a zip archive (`.keras`) or an HDF5 file (legacy `.h5`).
bool is_keras_bytes(std::string_view bytes);
// The model's config as the Keras file holds it: a .keras archive's config.json, or a legacy file's
// model_config (with its training_config under "training_config").
Config read_keras_config(const std::string& bytes, const std::string& path);
// load_keras_model on bytes already read from `path`.
std::shared_ptr<ModelBase> load_keras_bytes(const std::string& bytes, const std::string& path, const LoadOptions& options);

// True when the file starts like a Keras file (a zip archive or an HDF5 file); only its first bytes are read.
bool is_keras_source(const ReadOnlyFile& file);
// load_keras_model on a file already open.
std::shared_ptr<ModelBase> load_keras_file(const ReadOnlyFile& file, const LoadOptions& options);
// read_keras_config on a file already open.
Config read_keras_config(const ReadOnlyFile& file);

}  // namespace kiln::detail
