#include <kiln/hub/masked_lm.hpp>

#include <algorithm>
#include <cmath>
#include <utility>

#include <kiln/core/error.hpp>
#include <kiln/core/names.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/core/warnings.hpp>
#include <kiln/hub/detail/tasks.hpp>
#include <kiln/hub/layers/masked_lm_head.hpp>
#include <kiln/serialize/detail/keras_export.hpp>

namespace kiln::hub {

namespace {

// keras-hub's MaskedLM families: the backbone class and the task's module.
struct Family {
  std::string name;  // "Bert", "DistilBert", "Roberta"
  std::string module;
};

Family family_of(const std::string& backbone_class) {
  if (backbone_class == "BertBackbone") return {"Bert", "keras_hub.src.models.bert.bert_masked_lm"};
  if (backbone_class == "DistilBertBackbone")
    return {"DistilBert", "keras_hub.src.models.distil_bert.distil_bert_masked_lm"};
  if (backbone_class == "RobertaBackbone") return {"Roberta", "keras_hub.src.models.roberta.roberta_masked_lm"};
  throw ConfigError("keras-hub has no MaskedLM kiln reads for " + backbone_class +
                    "; kiln's are BertMaskedLM, DistilBertMaskedLM and RobertaMaskedLM");
}

std::string task_class(const std::string& backbone_class) { return family_of(backbone_class).name + "MaskedLM"; }

}  // namespace

MaskedLMModel::MaskedLMModel(const Config& config)
    : ModelBase(detail::task_base(config, task_class(detail::backbone_class_of(config, "MaskedLM"))),
                task_class(detail::backbone_class_of(config, "MaskedLM"))) {
  ConfigReader args = config_reader(config);
  backbone_ = backbone_from_config(args.value("backbone"));
  if (const Config& preprocessor = args.value("preprocessor"); !preprocessor.is_null())
    warn(describe() + ": its preprocessor (" + preprocessor.get_string("class_name", "?") +
         ") is not read: kiln's MaskedLM takes token ids (kiln::hub::mask_text makes them)");
  args.finish();
  make();
}

MaskedLMModel::MaskedLMModel(std::shared_ptr<BackboneModel> backbone)
    : ModelBase(Config{{"name", to_snake_case(task_class(backbone->class_name()))}}, task_class(backbone->class_name())),
      backbone_(std::move(backbone)) {
  make();
}

void MaskedLMModel::make() {
  const Family family = family_of(backbone_->class_name());
  const Tensor mask_positions = token_input("mask_positions");
  std::vector<Tensor> inputs;
  if (family.name == "Bert")
    inputs = {token_input("padding_mask"), token_input("segment_ids"), token_input("token_ids")};
  else
    inputs = {token_input("padding_mask"), token_input("token_ids")};
  const std::vector<Tensor> outputs = (*backbone_)(inputs);
  // BERT's outputs are flattened by key, pooled_output then sequence_output; the others give the sequence.
  const Tensor sequence = family.name == "Bert" ? outputs.at(1) : outputs.at(0);
  // keras-hub's heads: gelu, its family's TruncatedNormal(0.02) kernels, tied to the backbone's token embedding.
  const Config head_config = {
      {"name", "mlm_head"},
      {"intermediate_activation", "gelu"},
      {"kernel_initializer", Config{{"class_name", "TruncatedNormal"}, {"config", Config{{"mean", 0.0}, {"stddev", 0.02}}}}}};
  const auto head = std::make_shared<MaskedLMHeadLayer>(head_config, backbone_->token_embedding());
  const Tensor scores = (*head)(std::vector<Tensor>{sequence, mask_positions})[0];
  inputs.insert(inputs.begin(), mask_positions);
  record(inputs, {scores});
  build_for(input_shapes());
}

Config MaskedLMModel::get_config() const {
  return {{"backbone", kiln::detail::export_keras_model_config(*backbone_, Config())},
          {"preprocessor", Config()},
          {"name", name()}};
}

std::string MaskedLMModel::keras_module() const { return family_of(backbone_->class_name()).module; }

MaskedLM::MaskedLM(const Backbone& backbone) : TrainableModel(std::make_shared<MaskedLMModel>(backbone.ptr())) {}

MaskedLM MaskedLM::of(const Model& model) {
  auto task = std::dynamic_pointer_cast<MaskedLMModel>(model.ptr());
  if (!task) throw ValueError(model->describe() + " is not a keras-hub MaskedLM");
  return MaskedLM(task);
}

std::vector<Array> MaskedText::inputs(bool with_segment_ids) const {
  if (with_segment_ids) return {mask_positions, padding_mask, segment_ids, token_ids};
  return {mask_positions, padding_mask, token_ids};
}

MaskedText mask_tokens(const PackedText& packed, std::int64_t vocabulary_size, std::int64_t mask_token_id,
                       const MaskOptions& options, std::uint64_t seed) {
  auto rate = [](double value, const char* name) {
    if (!(value >= 0.0 && value <= 1.0))
      throw ValueError(std::string("mask_tokens: ") + name + " must be in [0, 1], got " + std::to_string(value));
  };
  rate(options.mask_selection_rate, "mask_selection_rate");
  rate(options.mask_token_rate, "mask_token_rate");
  rate(options.random_token_rate, "random_token_rate");
  if (options.mask_token_rate + options.random_token_rate > 1.0)
    throw ValueError("mask_tokens: mask_token_rate + random_token_rate must be at most 1, got " +
                     std::to_string(options.mask_token_rate + options.random_token_rate));
  if (vocabulary_size < 1 || mask_token_id < 0 || mask_token_id >= vocabulary_size)
    throw ValueError("mask_tokens: mask_token_id must be in [0, vocabulary_size - 1] (" +
                     std::to_string(vocabulary_size - 1) + "), got " + std::to_string(mask_token_id));
  if (options.mask_selection_length < 1)
    throw ValueError("mask_tokens: mask_selection_length must be positive, got " +
                     std::to_string(options.mask_selection_length));
  const Shape& shape = packed.token_ids.shape();
  if (shape.rank() != 2 || packed.padding_mask.shape() != shape)
    throw ShapeError("mask_tokens: token_ids and padding_mask must be (texts, sequence_length), got " +
                     shape.to_string() + " and " + packed.padding_mask.shape().to_string());
  if (packed.segment_ids.size() != 0 && packed.segment_ids.shape() != shape)
    throw ShapeError("mask_tokens: segment_ids must have token_ids' shape " + shape.to_string() + ", got " +
                     packed.segment_ids.shape().to_string());
  for (std::size_t i = 0; i < packed.token_ids.size(); ++i) {
    const double id = packed.token_ids.flat(i);
    if (!(id >= 0 && id < static_cast<double>(vocabulary_size)) || id != std::floor(id))
      throw ValueError("mask_tokens: token " + std::to_string(id) + " at row " + std::to_string(i / static_cast<std::size_t>(shape[1])) +
                       ", position " + std::to_string(i % static_cast<std::size_t>(shape[1])) +
                       " is not an id of the vocabulary [0, " + std::to_string(vocabulary_size) + ")");
  }
  const std::int64_t rows = shape[0], length = shape[1], picks = options.mask_selection_length;
  MaskedText out{packed.token_ids.copy(),
                 packed.segment_ids.size() == 0 ? Array::full(shape, 0.0, DType::float32) : packed.segment_ids.copy(),
                 packed.padding_mask.copy(),
                 Array::full(Shape{rows, picks}, 0.0, DType::float32),
                 Array::full(Shape{rows, picks}, 0.0, DType::float32),
                 Array::full(Shape{rows, picks}, 0.0, DType::float32)};
  Rng rng(seed);
  std::vector<std::int64_t> selected;
  for (std::int64_t r = 0; r < rows; ++r) {
    const auto base = static_cast<std::size_t>(r * length);
    selected.clear();
    for (std::int64_t i = 0; i < length; ++i) {
      const auto id = static_cast<std::int64_t>(out.token_ids.flat(base + static_cast<std::size_t>(i)));
      const bool padding = out.padding_mask.flat(base + static_cast<std::size_t>(i)) == 0.0;
      const bool unselectable = padding || std::find(options.unselectable_token_ids.begin(), options.unselectable_token_ids.end(),
                                          id) != options.unselectable_token_ids.end();
      if (!unselectable && rng.uniform() < options.mask_selection_rate) selected.push_back(i);
    }
    if (static_cast<std::int64_t>(selected.size()) > picks) {
      // A random subset of mask_selection_length, back in order (Fisher-Yates on the first picks).
      for (std::size_t i = 0; i < static_cast<std::size_t>(picks); ++i)
        std::swap(selected[i], selected[i + rng.below(selected.size() - i)]);
      selected.resize(static_cast<std::size_t>(picks));
      std::sort(selected.begin(), selected.end());
    }
    for (std::size_t m = 0; m < selected.size(); ++m) {
      const std::size_t at = base + static_cast<std::size_t>(selected[m]);
      const std::size_t pick = static_cast<std::size_t>(r * picks) + m;
      out.mask_positions.set_flat(pick, static_cast<double>(selected[m]));
      out.mask_ids.set_flat(pick, out.token_ids.flat(at));
      out.mask_weights.set_flat(pick, 1.0);
      const double draw = rng.uniform();
      if (draw < options.mask_token_rate)
        out.token_ids.set_flat(at, static_cast<double>(mask_token_id));
      else if (draw < options.mask_token_rate + options.random_token_rate)
        out.token_ids.set_flat(at, static_cast<double>(rng.below(static_cast<std::uint64_t>(vocabulary_size))));
    }
  }
  return out;
}

MaskedText mask_text(const Tokenizer& tokenizer, const std::vector<std::string>& texts, std::int64_t sequence_length,
                     const MaskOptions& options, std::uint64_t seed) {
  auto find = [&](const std::vector<std::string>& candidates) {
    return detail::find_special_token(tokenizer, candidates);
  };
  const std::int64_t mask = find({"[MASK]", "<mask>"});
  if (mask < 0) throw ValueError("mask_text: the tokenizer's vocabulary has no mask token ([MASK] or <mask>)");
  const PackedText packed = pack_text(tokenizer, texts, sequence_length);
  MaskOptions with_specials = options;
  if (with_specials.unselectable_token_ids.empty())
    for (std::int64_t id :
         {find({"[CLS]", "<s>", "<bos>"}), find({"[SEP]", "</s>", "<eos>"}), find({"[PAD]", "<pad>"}), mask})
      if (id >= 0) with_specials.unselectable_token_ids.push_back(id);
  return mask_tokens(packed, tokenizer.vocabulary_size(), mask, with_specials, seed);
}

KILN_REGISTER_LAYER("keras_hub>BertMaskedLM", MaskedLMModel);
KILN_REGISTER_LAYER("keras_hub>DistilBertMaskedLM", MaskedLMModel);
KILN_REGISTER_LAYER("keras_hub>RobertaMaskedLM", MaskedLMModel);

}  // namespace kiln::hub
