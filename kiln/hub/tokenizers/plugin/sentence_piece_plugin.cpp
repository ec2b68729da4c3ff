// libkiln_sentencepiece.so: Google's SentencePiece (Debian's libsentencepiece) behind the table of
// detail/sentence_piece_backend.hpp, for kiln to load privately with dlopen (see that header for why).
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <unordered_map>

#include <kiln/hub/tokenizers/detail/sentence_piece_backend.hpp>

namespace {

using kiln::hub::detail::SentencePieceApi;
using Processor = sentencepiece::SentencePieceProcessor;

Processor& processor(void* model) { return *static_cast<Processor*>(model); }

bool ok(const sentencepiece::util::Status& status, std::string& error) {
  if (status.ok()) return true;
  error = status.ToString();
  return false;
}

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

const SentencePieceApi api = {
    [](const std::string& proto, const std::string& extra_options, std::string& error) -> void* {
      auto* model = new Processor();
      if (!ok(model->LoadFromSerializedProto(proto), error) ||
          (!extra_options.empty() && !ok(model->SetEncodeExtraOptions(extra_options), error))) {
        delete model;
        return nullptr;
      }
      return model;
    },
    [](void* model) { delete static_cast<Processor*>(model); },
    [](void* model, std::string_view text, std::vector<int>& ids, std::string& error) {
      return ok(processor(model).Encode(text, &ids), error);
    },
    [](void* model, std::string_view text, std::vector<std::string>& pieces, std::string& error) {
      return ok(processor(model).Encode(text, &pieces), error);
    },
    [](void* model, const std::vector<int>& ids, std::string& text, std::string& error) {
      return ok(processor(model).Decode(ids, &text), error);
    },
    [](void* model) { return processor(model).GetPieceSize(); },
    [](void* model, int id) { return processor(model).IdToPiece(id); },
    [](void* model, const std::string& piece) { return processor(model).PieceToId(piece); },
    [](void* model) { return processor(model).unk_id(); },
    [](void* model) { return processor(model).bos_id(); },
    [](void* model) { return processor(model).eos_id(); },
    [](const std::vector<std::pair<std::string, std::string>>& flags, const std::vector<std::string>& sentences,
       std::string& proto, std::string& error) {
      const std::unordered_map<std::string, std::string> arguments(flags.begin(), flags.end());
      Sentences iterator(sentences);
      return ok(sentencepiece::SentencePieceTrainer::Train(arguments, &iterator, &proto), error);
    },
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const SentencePieceApi* kiln_sentence_piece_api(int version) {
  return version == kiln::hub::detail::kSentencePieceApiVersion ? &api : nullptr;
}
