#include <kiln/hub/tokenizers/sentence_piece_tokenizer.hpp>

#include <dlfcn.h>

#include <cstdlib>
#include <mutex>

#include <kiln/core/error.hpp>
#include <kiln/hub/tokenizers/detail/sentence_piece_backend.hpp>
#include <kiln/hub/tokenizers/detail/text.hpp>

namespace kiln::hub {

namespace detail {

const SentencePieceApi& sentence_piece_api() {
  static const SentencePieceApi* api = nullptr;
  static std::once_flag once;
  static std::string failure;
  static bool missing = false;
  std::call_once(once, [] {
    std::string path;
    if (const char* given = std::getenv("KILN_SENTENCEPIECE_PLUGIN"); given != nullptr && *given != '\0') {
      path = given;
    } else {
      // Beside libkiln, wherever it was installed.
      Dl_info self{};
      if (dladdr(reinterpret_cast<const void*>(&sentence_piece_api), &self) == 0 || self.dli_fname == nullptr) {
        failure = "cannot find where libkiln is, to load libkiln_sentencepiece.so beside it";
        return;
      }
      path = self.dli_fname;
      const std::size_t slash = path.rfind('/');
      path = (slash == std::string::npos ? std::string(".") : path.substr(0, slash)) + "/libkiln_sentencepiece.so";
    }
    int flags = RTLD_NOW | RTLD_LOCAL;
#if !defined(__SANITIZE_ADDRESS__)
    flags |= RTLD_DEEPBIND;  // the plugin's libsentencepiece binds to its own protobuf (ASan refuses DEEPBIND)
#endif
    void* handle = dlopen(path.c_str(), flags);
    if (handle == nullptr) {
      const char* why = dlerror();
      missing = why != nullptr && std::string(why).find("No such file") != std::string::npos;
      failure = path + ": " + (why != nullptr ? why : "cannot be loaded");
      return;
    }
    using Entry = const SentencePieceApi* (*)(int);
    const auto entry = reinterpret_cast<Entry>(dlsym(handle, "kiln_sentence_piece_api"));
    api = entry != nullptr ? entry(kSentencePieceApiVersion) : nullptr;
    if (api == nullptr) failure = path + ": not kiln's SentencePiece plugin of this version";
  });
  if (api == nullptr) {
    const std::string message = "SentencePiece is not available: " + failure +
                                " (kiln's SentencePiece plugin, built with kiln, needs Debian's libsentencepiece0)";
    if (missing) throw FileNotFoundError(message);
    throw SerializationError(message);
  }
  return *api;
}

}  // namespace detail

struct SentencePieceTokenizer::Model {
  const detail::SentencePieceApi* api = nullptr;
  void* handle = nullptr;
  std::string proto;
  SentencePieceOptions options;
  Model() = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
  ~Model() {
    if (handle != nullptr) api->release(handle);
  }
};

SentencePieceTokenizer::SentencePieceTokenizer(std::string proto, const SentencePieceOptions& options) {
  auto model = std::make_shared<Model>();
  model->api = &detail::sentence_piece_api();
  std::string extra;
  if (options.add_bos) extra = "bos";
  if (options.add_eos) extra += extra.empty() ? "eos" : ":eos";
  std::string error;
  model->handle = model->api->load(proto, "", error);
  if (model->handle == nullptr)
    throw ValueError("SentencePieceTokenizer: the model (" + std::to_string(proto.size()) +
                     " bytes) is not a SentencePiece model: " + error);
  if (model->api->piece_size(model->handle) <= 0) throw ValueError("SentencePieceTokenizer: the model has no pieces");
  if (options.add_bos && model->api->bos_id(model->handle) < 0)
    throw ValueError("SentencePieceTokenizer: add_bos, but the model has no beginning-of-sentence piece");
  if (options.add_eos && model->api->eos_id(model->handle) < 0)
    throw ValueError("SentencePieceTokenizer: add_eos, but the model has no end-of-sentence piece");
  if (!extra.empty()) {
    model->api->release(model->handle);
    model->handle = model->api->load(proto, extra, error);
    if (model->handle == nullptr) throw ValueError("SentencePieceTokenizer: " + error);
  }
  model->proto = std::move(proto);
  model->options = options;
  model_ = std::move(model);
}

SentencePieceTokenizer SentencePieceTokenizer::from_file(const std::string& proto_file,
                                                         const SentencePieceOptions& options) {
  std::string proto = detail::read_text_file(proto_file);
  try {
    return SentencePieceTokenizer(std::move(proto), options);
  } catch (const ValueError& error) {
    throw ValueError(proto_file + ": " + error.what());
  }
}

namespace {
void check_utf8(std::string_view text) {
  const std::size_t bad = detail::invalid_utf8(text);
  if (bad != std::string_view::npos)
    throw ValueError("SentencePieceTokenizer: the text is not valid UTF-8 at byte " + std::to_string(bad));
}
}  // namespace

std::vector<std::int64_t> SentencePieceTokenizer::tokenize(std::string_view text) const {
  check_utf8(text);
  std::vector<int> ids;
  std::string error;
  if (!model_->api->encode_ids(model_->handle, text, ids, error)) throw ValueError("SentencePieceTokenizer: " + error);
  return std::vector<std::int64_t>(ids.begin(), ids.end());
}

std::vector<std::string> SentencePieceTokenizer::pieces(std::string_view text) const {
  check_utf8(text);
  std::vector<std::string> result;
  std::string error;
  if (!model_->api->encode_pieces(model_->handle, text, result, error)) throw ValueError("SentencePieceTokenizer: " + error);
  return result;
}

std::string SentencePieceTokenizer::detokenize(const std::vector<std::int64_t>& ids) const {
  std::vector<int> values;
  values.reserve(ids.size());
  for (const std::int64_t id : ids) {
    if (id < 0 || id >= vocabulary_size())
      throw ValueError("SentencePieceTokenizer: id " + std::to_string(id) + " is not in the vocabulary (0.." +
                       std::to_string(vocabulary_size() - 1) + ")");
    values.push_back(static_cast<int>(id));
  }
  std::string text, error;
  if (!model_->api->decode(model_->handle, values, text, error)) throw ValueError("SentencePieceTokenizer: " + error);
  return text;
}

const std::string& SentencePieceTokenizer::proto() const { return model_->proto; }
const SentencePieceOptions& SentencePieceTokenizer::options() const { return model_->options; }

void SentencePieceTokenizer::save_assets(const std::string& folder) const {
  detail::write_text_file(folder + "/vocabulary.spm", model_->proto);
}

std::int64_t SentencePieceTokenizer::vocabulary_size() const { return model_->api->piece_size(model_->handle); }

std::int64_t SentencePieceTokenizer::token_to_id(const std::string& token) const {
  return model_->api->piece_to_id(model_->handle, token);
}

std::string SentencePieceTokenizer::id_to_token(std::int64_t id) const {
  if (id < 0 || id >= vocabulary_size())
    throw ValueError("SentencePieceTokenizer: id " + std::to_string(id) + " is not in the vocabulary (0.." +
                     std::to_string(vocabulary_size() - 1) + ")");
  return model_->api->id_to_piece(model_->handle, static_cast<int>(id));
}

std::string compute_sentence_piece_proto(const std::vector<std::string>& sentences, std::int64_t vocabulary_size,
                                         const std::string& model_type, bool lowercase,
                                         const std::map<std::string, std::string>& trainer_options) {
  if (model_type != "unigram" && model_type != "bpe" && model_type != "word" && model_type != "char")
    throw ValueError("compute_sentence_piece_proto: model_type must be one of unigram, bpe, word or char, got '" +
                     model_type + "'");
  if (vocabulary_size < 4)
    throw ValueError("compute_sentence_piece_proto: vocabulary_size must be at least 4 (pad, unk, bos, eos), got " +
                     std::to_string(vocabulary_size));
  if (sentences.empty()) throw ValueError("compute_sentence_piece_proto: no sentences to train on");
  for (std::size_t i = 0; i < sentences.size(); ++i)
    if (detail::invalid_utf8(sentences[i]) != std::string::npos)
      throw ValueError("compute_sentence_piece_proto: sentence " + std::to_string(i) + " is not valid UTF-8 at byte " +
                       std::to_string(detail::invalid_utf8(sentences[i])));
  std::vector<std::pair<std::string, std::string>> flags = {
      {"vocab_size", std::to_string(vocabulary_size)},
      {"model_type", model_type},
      {"normalization_rule_name", lowercase ? "nmt_nfkc_cf" : "nmt_nfkc"},
      {"pad_id", "0"}, {"unk_id", "1"}, {"bos_id", "2"}, {"eos_id", "3"},
      {"minloglevel", "2"}};
  for (const auto& [flag, value] : trainer_options) {
    bool replaced = false;
    for (auto& [name, given] : flags)
      if (name == flag) given = value, replaced = true;
    if (!replaced) flags.emplace_back(flag, value);
  }
  std::string proto, error;
  if (!detail::sentence_piece_api().train(flags, sentences, proto, error))
    throw ValueError("compute_sentence_piece_proto: " + error);
  return proto;
}

std::int64_t SentencePieceTokenizer::unk_id() const { return model_->api->unk_id(model_->handle); }
std::int64_t SentencePieceTokenizer::bos_id() const { return model_->api->bos_id(model_->handle); }
std::int64_t SentencePieceTokenizer::eos_id() const { return model_->api->eos_id(model_->handle); }

}  // namespace kiln::hub
