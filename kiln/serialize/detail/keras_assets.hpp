#pragma once
// A model's attached assets (StringLookup and IntegerLookup vocabularies, tokenizers: Model::assets) in a
// Keras 3 `.keras` archive. Keras has no place for what is attached to a model rather than built into it, so
// they go where Keras ignores them and kiln finds them: metadata.json's "kiln_assets" holds each asset's
// config, and a lookup's vocabulary is the archive's assets/kiln_assets/<name>/vocabulary.txt, written as
// Keras's own lookups write theirs (IndexLookup.save_assets: every token by index, special tokens first, one
// per line).
#include <string>
#include <utility>
#include <vector>

#include <kiln/layers/config.hpp>
#include <kiln/layers/model_base.hpp>
#include <kiln/serialize/detail/zip_archive.hpp>

namespace kiln::detail {

struct KerasAssets {
  Config metadata;                                          // null when the model has none
  std::vector<std::pair<std::string, std::string>> files;  // archive path, contents
};

// What `model`'s assets add to a .keras archive.
KerasAssets export_keras_assets(const ModelBase& model);

// Attaches the assets that `metadata` ("kiln_assets") and the archive's files describe to `model`.
// SerializationError naming `where` for a vocabulary file that is missing, too large, or does not start
// with the special tokens its config declares.
void import_keras_assets(ModelBase& model, const Config& metadata, const ZipReader& archive, const std::string& where);

}  // namespace kiln::detail
