#include <kiln/serialize/detail/keras_hub_files.hpp>

#include <memory>
#include <optional>

#include <kiln/core/detail/files.hpp>
#include <kiln/serialize/detail/byte_source.hpp>
#include <kiln/serialize/json.hpp>

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
  if (weights_path.size() > 5 && weights_path.compare(weights_path.size() - 5, 5, ".json") == 0) {
    // Sharded: the embedding's variables in the shards the index names for its group.
    const Config* registered = keras.find("registered_name");
    if (registered == nullptr || registered->type() != Config::Type::string ||
        (registered->as_string() != "keras_hub>LlamaBackbone" && registered->as_string() != "keras_hub>Llama3Backbone") ||
        !keras.contains("config") || !keras.at("config").is_map() || keras.at("config").contains("tie_word_embeddings"))
      return keras;
    const Config index = parse_json(read_whole_file(weights_path), weights_path);
    const Config* map = index.is_map() ? index.find("weight_map") : nullptr;
    const Config* files = map != nullptr && map->is_map() ? map->find("/layers/reversible_embedding/vars") : nullptr;
    if (files == nullptr) return keras;
    const std::size_t slash = weights_path.rfind('/');
    const std::string folder = slash == std::string::npos ? std::string() : weights_path.substr(0, slash + 1);
    std::size_t variables = 0;
    for (const Config& name : files->is_list() ? files->as_list() : std::vector<Config>{*files}) {
      const std::string& shard = name.as_string("weight_map entry");
      if (shard.find('/') != std::string::npos || shard.find("..") != std::string::npos) return keras;
      const ReadOnlyFile file(folder + shard);
      const hdf5::File weights(file_source(file, 0, file.size()), folder + shard);
      if (const auto group = weights.root().find_path("layers/reversible_embedding/vars"))
        variables += group->member_names().size();
    }
    if (variables == 1) keras.set("config", keras.at("config").with("tie_word_embeddings", true));
    return keras;
  }
  const ReadOnlyFile file(weights_path);
  const hdf5::File weights(file_source(file, 0, file.size()), weights_path);
  return with_llama_tying(std::move(keras), weights.root());
}

}  // namespace kiln::detail
