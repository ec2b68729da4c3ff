#pragma once
// Google's SentencePiece, reached through a plugin (libkiln_sentencepiece.so, plugin/sentence_piece_plugin.cpp)
// that kiln loads with dlopen the first time a SentencePiece model is used, privately (RTLD_LOCAL, and
// RTLD_DEEPBIND outside sanitizer builds). Debian's libsentencepiece carries its own copy of protobuf-lite and
// exports its symbols: linked into libkiln, it put them before a process's own libprotobuf (libtorch's, ONNX
// Runtime's, gRPC's), which then crashed at startup. Loaded privately, neither sees the other's.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kiln::hub::detail {

/// The plugin's functions. Errors come back as false (or null) with the library's message in `error`.
struct SentencePieceApi {
  void* (*load)(const std::string& proto, const std::string& extra_options, std::string& error);
  void (*release)(void* model);
  bool (*encode_ids)(void* model, std::string_view text, std::vector<int>& ids, std::string& error);
  bool (*encode_pieces)(void* model, std::string_view text, std::vector<std::string>& pieces, std::string& error);
  bool (*decode)(void* model, const std::vector<int>& ids, std::string& text, std::string& error);
  int (*piece_size)(void* model);
  std::string (*id_to_piece)(void* model, int id);
  int (*piece_to_id)(void* model, const std::string& piece);
  int (*unk_id)(void* model);
  int (*bos_id)(void* model);
  int (*eos_id)(void* model);
  bool (*train)(const std::vector<std::pair<std::string, std::string>>& flags, const std::vector<std::string>& sentences,
                std::string& proto, std::string& error);
};

/// The version of this table; the plugin's must match.
constexpr int kSentencePieceApiVersion = 1;

/// The plugin's table, loaded once (beside libkiln, or where KILN_SENTENCEPIECE_PLUGIN names). FileNotFoundError
/// naming the file when it is missing, SerializationError when it cannot be loaded or is of another version.
const SentencePieceApi& sentence_piece_api();

}  // namespace kiln::hub::detail
