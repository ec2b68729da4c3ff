#pragma once
// What keras-hub's own files leave out, recovered from the rest of the file.
#include <string>

#include <kiln/layers/config.hpp>
#include <kiln/serialize/detail/hdf5_reader.hpp>

namespace kiln::detail {

// keras-hub's LlamaBackbone (and Llama3Backbone) takes tie_word_embeddings but leaves it out of its config, so the
// file of a tied model (Llama 3.2's) says untied, and keras-hub cannot read it back. The weights tell: a token
// embedding saved without its reverse half is tied. `keras` is the backbone's serialized config; it comes back
// with "tie_word_embeddings": true in that case, unchanged otherwise.
Config with_llama_tying(Config keras, const hdf5::Object& weights_root);
// The same, reading the weights file at `weights_path` (a preset's model.weights.h5).
Config with_llama_tying(Config keras, const std::string& weights_path);

}  // namespace kiln::detail
