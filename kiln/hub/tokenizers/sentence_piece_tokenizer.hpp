#pragma once
// SentencePiece, the tokenizer of Llama 2, Mistral and Gemma (keras-hub's SentencePieceTokenizer, LlamaTokenizer,
// MistralTokenizer, GemmaTokenizer): a trained model (keras-hub's assets/tokenizer/vocabulary.spm, SentencePiece's
// serialized ModelProto) run by Google's SentencePiece library (Debian's libsentencepiece-dev), as keras-hub runs
// it through tf_text or the sentencepiece package.
//
//   auto llama = kiln::hub::SentencePieceTokenizer::from_file("vocabulary.spm");
//   std::vector<std::int64_t> ids = llama.tokenize("The quick brown fox");
//   std::string text = llama.detokenize(ids);   // "The quick brown fox"
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <kiln/hub/tokenizers/tokenizer.hpp>

namespace kiln::hub {

/// keras-hub's SentencePieceTokenizer arguments.
struct SentencePieceOptions {
  bool add_bos = false;  ///< the model's bos id before each text's ids
  bool add_eos = false;  ///< the model's eos id after them
};

/// A SentencePiece tokenizer. Copies share the (immutable) model; every method may run on any thread.
class SentencePieceTokenizer : public Tokenizer {
 public:
  /// From a serialized model (the bytes of a .spm / .model file). ValueError when it does not parse.
  explicit SentencePieceTokenizer(std::string proto, const SentencePieceOptions& options = {});
  /// From keras-hub's vocabulary.spm. SerializationError when the file cannot be read; ValueError naming it when it
  /// is not a SentencePiece model.
  static SentencePieceTokenizer from_file(const std::string& proto_file, const SentencePieceOptions& options = {});

  std::vector<std::int64_t> tokenize(std::string_view text) const override;
  std::string detokenize(const std::vector<std::int64_t>& ids) const override;
  /// The pieces of `text` ("▁The", "▁quick", ...).
  std::vector<std::string> pieces(std::string_view text) const;

  /// The serialized model, as vocabulary.spm holds it.
  const std::string& proto() const;
  const SentencePieceOptions& options() const;
  /// vocabulary.spm, into `folder`.
  void save_assets(const std::string& folder) const override;
  std::int64_t vocabulary_size() const override;
  /// As keras-hub: a piece the model does not have is the unknown piece's id.
  std::int64_t token_to_id(const std::string& token) const override;
  std::string id_to_token(std::int64_t id) const override;
  /// The model's unknown, beginning- and end-of-sentence ids (-1 when it has none).
  std::int64_t unk_id() const;
  std::int64_t bos_id() const;
  std::int64_t eos_id() const;

 private:
  struct Model;
  std::shared_ptr<const Model> model_;
};

/// keras-hub's compute_sentence_piece_proto: a SentencePiece model trained on `sentences`, serialized (what
/// vocabulary.spm holds), with keras-hub's special ids (pad 0, unk 1, bos 2, eos 3) and normalization (nmt_nfkc,
/// or nmt_nfkc_cf with `lowercase`). `model_type` is "unigram", "bpe", "word" or "char"; `trainer_options` adds
/// or overrides SentencePiece's trainer flags (e.g. {"byte_fallback", "true"}). ValueError for a bad argument or
/// when SentencePiece cannot train (a vocabulary larger than the text allows, say).
std::string compute_sentence_piece_proto(const std::vector<std::string>& sentences, std::int64_t vocabulary_size,
                                         const std::string& model_type = "unigram", bool lowercase = false,
                                         const std::map<std::string, std::string>& trainer_options = {});

}  // namespace kiln::hub
