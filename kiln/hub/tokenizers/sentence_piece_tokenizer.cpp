#include <kiln/hub/tokenizers/sentence_piece_tokenizer.hpp>

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <unordered_map>

#include <kiln/core/error.hpp>
#include <kiln/hub/tokenizers/detail/text.hpp>

namespace kiln::hub {

struct SentencePieceTokenizer::Model {
  sentencepiece::SentencePieceProcessor processor;
  std::string proto;
  SentencePieceOptions options;
};

SentencePieceTokenizer::SentencePieceTokenizer(std::string proto, const SentencePieceOptions& options) {
  auto model = std::make_shared<Model>();
  const sentencepiece::util::Status status = model->processor.LoadFromSerializedProto(proto);
  if (!status.ok())
    throw ValueError("SentencePieceTokenizer: the model (" + std::to_string(proto.size()) +
                     " bytes) is not a SentencePiece model: " + status.ToString());
  if (model->processor.GetPieceSize() <= 0) throw ValueError("SentencePieceTokenizer: the model has no pieces");
  std::string extra;
  if (options.add_bos) extra = "bos";
  if (options.add_eos) extra += extra.empty() ? "eos" : ":eos";
  if (options.add_bos && model->processor.bos_id() < 0)
    throw ValueError("SentencePieceTokenizer: add_bos, but the model has no beginning-of-sentence piece");
  if (options.add_eos && model->processor.eos_id() < 0)
    throw ValueError("SentencePieceTokenizer: add_eos, but the model has no end-of-sentence piece");
  if (!extra.empty()) {
    const sentencepiece::util::Status set = model->processor.SetEncodeExtraOptions(extra);
    if (!set.ok()) throw ValueError("SentencePieceTokenizer: " + set.ToString());
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
  const sentencepiece::util::Status status = model_->processor.Encode(text, &ids);
  if (!status.ok()) throw ValueError("SentencePieceTokenizer: " + status.ToString());
  return std::vector<std::int64_t>(ids.begin(), ids.end());
}

std::vector<std::string> SentencePieceTokenizer::pieces(std::string_view text) const {
  check_utf8(text);
  std::vector<std::string> result;
  const sentencepiece::util::Status status = model_->processor.Encode(text, &result);
  if (!status.ok()) throw ValueError("SentencePieceTokenizer: " + status.ToString());
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
  std::string text;
  const sentencepiece::util::Status status = model_->processor.Decode(values, &text);
  if (!status.ok()) throw ValueError("SentencePieceTokenizer: " + status.ToString());
  return text;
}

const std::string& SentencePieceTokenizer::proto() const { return model_->proto; }
const SentencePieceOptions& SentencePieceTokenizer::options() const { return model_->options; }

void SentencePieceTokenizer::save_assets(const std::string& folder) const {
  detail::write_text_file(folder + "/vocabulary.spm", model_->proto);
}

std::int64_t SentencePieceTokenizer::vocabulary_size() const { return model_->processor.GetPieceSize(); }

std::int64_t SentencePieceTokenizer::token_to_id(const std::string& token) const {
  return model_->processor.PieceToId(token);
}

std::string SentencePieceTokenizer::id_to_token(std::int64_t id) const {
  if (id < 0 || id >= vocabulary_size())
    throw ValueError("SentencePieceTokenizer: id " + std::to_string(id) + " is not in the vocabulary (0.." +
                     std::to_string(vocabulary_size() - 1) + ")");
  return model_->processor.IdToPiece(static_cast<int>(id));
}

namespace {

class Sentences : public sentencepiece::SentenceIterator {
 public:
  explicit Sentences(const std::vector<std::string>& sentences) : sentences_(sentences) {}
  bool done() const override { return at_ >= sentences_.size(); }
  void Next() override { ++at_; }
  const std::string& value() const override { return sentences_[at_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& sentences_;
  std::size_t at_ = 0;
};

}  // namespace

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
  std::unordered_map<std::string, std::string> flags = {
      {"vocab_size", std::to_string(vocabulary_size)},
      {"model_type", model_type},
      {"normalization_rule_name", lowercase ? "nmt_nfkc_cf" : "nmt_nfkc"},
      {"pad_id", "0"}, {"unk_id", "1"}, {"bos_id", "2"}, {"eos_id", "3"},
      {"minloglevel", "2"}};
  for (const auto& [flag, value] : trainer_options) flags[flag] = value;
  Sentences iterator(sentences);
  std::string proto;
  const sentencepiece::util::Status status = sentencepiece::SentencePieceTrainer::Train(flags, &iterator, &proto);
  if (!status.ok()) throw ValueError("compute_sentence_piece_proto: " + status.ToString());
  return proto;
}

std::int64_t SentencePieceTokenizer::unk_id() const { return model_->processor.unk_id(); }
std::int64_t SentencePieceTokenizer::bos_id() const { return model_->processor.bos_id(); }
std::int64_t SentencePieceTokenizer::eos_id() const { return model_->processor.eos_id(); }

}  // namespace kiln::hub
