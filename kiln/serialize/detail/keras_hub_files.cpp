#include <kiln/serialize/detail/keras_hub_files.hpp>

#include <memory>
#include <optional>

#include <kiln/core/detail/files.hpp>
#include <kiln/serialize/detail/byte_source.hpp>

namespace kiln::detail {

Config with_llama_tying(Config keras, const hdf5::Object& weights_root) {
  const Config* registered = keras.find("registered_name");
  const bool llama = registered != nullptr && registered->type() == Config::Type::string &&
                     (registered->as_string() == "keras_hub>LlamaBackbone" ||
                      registered->as_string() == "keras_hub>Llama3Backbone");
  if (!llama || !keras.contains("config") || !keras.at("config").is_map() ||
      keras.at("config").contains("tie_word_embeddings"))
    return keras;
  const std::optional<hdf5::Object> embedding = weights_root.find_path("layers/reversible_embedding/vars");
  if (!embedding || embedding->member_names().size() != 1) return keras;
  keras.set("config", keras.at("config").with("tie_word_embeddings", true));
  return keras;
}

Config with_llama_tying(Config keras, const std::string& weights_path) {
  const ReadOnlyFile file(weights_path);
  const hdf5::File weights(file_source(file, 0, file.size()), weights_path);
  return with_llama_tying(std::move(keras), weights.root());
}

}  // namespace kiln::detail
