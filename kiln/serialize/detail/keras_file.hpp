#pragma once
// What load_model needs from the Keras readers (serialize/keras.cpp): the file's bytes are read once.
#include <string>
#include <string_view>

#include <kiln/serialize/saving.hpp>

namespace kiln::detail {

// True when `bytes` start like a Keras file: a zip archive (`.keras`) or an HDF5 file (legacy `.h5`).
bool is_keras_bytes(std::string_view bytes);
// load_keras_model on bytes already read from `path`.
Model load_keras_bytes(const std::string& bytes, const std::string& path, const LoadOptions& options);

}  // namespace kiln::detail
