#include <kiln/hub/text_classifier.hpp>

#include <algorithm>
#include <utility>

#include <kiln/core/error.hpp>
#include <kiln/core/names.hpp>
#include <kiln/core/warnings.hpp>
#include <kiln/hub/detail/tasks.hpp>
#include <kiln/ops/ops.hpp>
#include <kiln/serialize/detail/keras_export.hpp>
#include <kiln/serialize/json.hpp>

namespace kiln::hub {

namespace {

// keras-hub's TextClassifier families: the backbone class, the task's module and its default dropout.
struct Family {
  std::string name;  // "Bert", "DistilBert", "Roberta"
  std::string module;
  double dropout;
};

Family family_of(const std::string& backbone_class) {
  if (backbone_class == "BertBackbone") return {"Bert", "keras_hub.src.models.bert.bert_text_classifier", 0.1};
  if (backbone_class == "DistilBertBackbone")
    return {"DistilBert", "keras_hub.src.models.distil_bert.distil_bert_text_classifier", 0.2};
  if (backbone_class == "RobertaBackbone")
    return {"Roberta", "keras_hub.src.models.roberta.roberta_text_classifier", 0.0};
  throw ConfigError("keras-hub has no TextClassifier kiln reads for " + backbone_class +
                    "; kiln's are BertTextClassifier, DistilBertTextClassifier and RobertaTextClassifier");
}

std::string task_class(const std::string& backbone_class) { return family_of(backbone_class).name + "TextClassifier"; }

Config truncated_normal(double stddev) {
  return {{"module", "keras.initializers"},
          {"class_name", "TruncatedNormal"},
          {"config", {{"mean", 0.0}, {"stddev", stddev}, {"seed", Config()}}},
          {"registered_name", Config()}};
}

}  // namespace

TextClassifierModel::TextClassifierModel(const Config& config)
    : ModelBase(detail::task_base(config, task_class(detail::backbone_class_of(config, "TextClassifier"))),
                task_class(detail::backbone_class_of(config, "TextClassifier"))) {
  ConfigReader args = config_reader(config);
  backbone_ = backbone_from_config(args.value("backbone"));
  if (const Config& preprocessor = args.value("preprocessor"); !preprocessor.is_null())
    warn(describe() + ": its preprocessor (" + preprocessor.get_string("class_name", "?") +
         ") is not read: kiln's TextClassifier takes token ids (kiln::hub::pack_text makes them)");
  num_classes_ = args.integer("num_classes");
  const Config& activation = args.value("activation");
  if (!activation.is_null() && activation.type() != Config::Type::string)
    throw ConfigError(describe() + ": activation must be an activation's name, got " + to_json(activation, 0));
  options_.activation = activation.is_null() ? "linear" : activation.as_string();
  options_.dropout = args.number("dropout", family_of(backbone_->class_name()).dropout);
  if (family_of(backbone_->class_name()).name != "Bert") options_.hidden_dim = args.integer("hidden_dim", 0);
  args.finish();
  make();
}

TextClassifierModel::TextClassifierModel(std::shared_ptr<BackboneModel> backbone, std::int64_t num_classes,
                                         const TextClassifierOptions& options)
    : ModelBase(Config{{"name", to_snake_case(task_class(backbone->class_name()))}}, task_class(backbone->class_name())),
      backbone_(std::move(backbone)),
      num_classes_(num_classes),
      options_(options) {
  if (options_.dropout < 0) options_.dropout = family_of(backbone_->class_name()).dropout;
  make();
}

void TextClassifierModel::make() {
  const Family family = family_of(backbone_->class_name());
  if (num_classes_ < 1)
    throw ConfigError(describe() + ": num_classes must be positive, got " + std::to_string(num_classes_));
  if (options_.dropout < 0 || options_.dropout >= 1)
    throw ConfigError(describe() + ": dropout must be in [0, 1), got " + std::to_string(options_.dropout));
  if (options_.hidden_dim < 0)
    throw ConfigError(describe() + ": hidden_dim must be positive, got " + std::to_string(options_.hidden_dim));
  if (family.name != "Bert" && options_.hidden_dim == 0) options_.hidden_dim = backbone_->arguments().at("hidden_dim").as_int("hidden_dim");
  std::vector<Tensor> inputs;
  if (family.name == "Bert")
    inputs = {token_input("padding_mask"), token_input("segment_ids"), token_input("token_ids")};
  else
    inputs = {token_input("padding_mask"), token_input("token_ids")};
  const std::vector<Tensor> outputs = (*backbone_)(inputs);
  const Config initializer = truncated_normal(0.02);
  Tensor x;
  if (family.name == "Bert") {
    x = outputs.at(0);  // pooled_output
    x = (*create_layer("kiln>Dropout", {{"name", "classifier_dropout"}, {"rate", options_.dropout}}))(x);
  } else {
    x = ops::get_item(outputs.at(0), {ops::Slice(), 0, ops::Slice()});
    if (family.name == "DistilBert") {
      x = (*create_layer("kiln>Dense", {{"name", "pooled_dense"},
                                        {"units", options_.hidden_dim},
                                        {"activation", "relu"},
                                        {"kernel_initializer", initializer}}))(x);
      x = (*create_layer("kiln>Dropout", {{"name", "output_dropout"}, {"rate", options_.dropout}}))(x);
    } else {
      x = (*create_layer("kiln>Dropout", {{"name", "pooled_dropout"}, {"rate", options_.dropout}}))(x);
      x = (*create_layer("kiln>Dense", {{"name", "pooled_dense"}, {"units", options_.hidden_dim}, {"activation", "tanh"}}))(x);
      x = (*create_layer("kiln>Dropout", {{"name", "output_dropout"}, {"rate", options_.dropout}}))(x);
    }
  }
  const Tensor logits = (*create_layer("kiln>Dense", {{"name", "logits"},
                                                      {"units", num_classes_},
                                                      {"activation", options_.activation},
                                                      {"kernel_initializer", initializer}}))(x);
  record(inputs, {logits});
  build_for(input_shapes());
}

Config TextClassifierModel::get_config() const {
  Config config = {{"backbone", kiln::detail::export_keras_model_config(*backbone_, Config())},
                   {"preprocessor", Config()},
                   {"name", name()},
                   {"num_classes", num_classes_},
                   {"activation", options_.activation}};
  if (family_of(backbone_->class_name()).name != "Bert") config.set("hidden_dim", options_.hidden_dim);
  config.set("dropout", options_.dropout);
  return config;
}

std::string TextClassifierModel::keras_module() const { return family_of(backbone_->class_name()).module; }

TextClassifier::TextClassifier(const Backbone& backbone, std::int64_t num_classes, const TextClassifierOptions& options)
    : TrainableModel(std::make_shared<TextClassifierModel>(backbone.ptr(), num_classes, options)) {}

TextClassifier TextClassifier::of(const Model& model) {
  auto task = std::dynamic_pointer_cast<TextClassifierModel>(model.ptr());
  if (!task) throw ValueError(model->describe() + " is not a keras-hub TextClassifier");
  return TextClassifier(task);
}

std::vector<Array> PackedText::inputs(bool with_segment_ids) const {
  if (with_segment_ids) return {padding_mask, segment_ids, token_ids};
  return {padding_mask, token_ids};
}

namespace {
std::int64_t special(const Tokenizer& tokenizer, std::int64_t given, const std::vector<std::string>& candidates,
                     const char* what) {
  if (given >= 0) return given;
  if (const std::int64_t id = detail::find_special_token(tokenizer, candidates); id >= 0) return id;
  std::string names;
  for (const std::string& token : candidates) names += (names.empty() ? "" : " or ") + token;
  throw ValueError(std::string("pack_text: the tokenizer's vocabulary has no ") + what + " token (" + names +
                   "); pass its id");
}
}  // namespace

PackedText pack_text(const Tokenizer& tokenizer, const std::vector<std::string>& texts, std::int64_t sequence_length,
                     std::int64_t start_id, std::int64_t end_id, std::int64_t pad_id) {
  if (sequence_length < 2)
    throw ValueError("pack_text: sequence_length must be at least 2 (the start and end tokens), got " +
                     std::to_string(sequence_length));
  const std::int64_t start = special(tokenizer, start_id, {"[CLS]", "<s>", "<bos>"}, "start");
  const std::int64_t end = special(tokenizer, end_id, {"[SEP]", "</s>", "<eos>"}, "end");
  const std::int64_t pad = special(tokenizer, pad_id, {"[PAD]", "<pad>"}, "pad");
  const auto rows = static_cast<std::int64_t>(texts.size());
  PackedText packed{Array::full(Shape{rows, sequence_length}, static_cast<double>(pad), DType::float32),
                    Array::full(Shape{rows, sequence_length}, 0.0, DType::float32),
                    Array::full(Shape{rows, sequence_length}, 0.0, DType::float32)};
  for (std::size_t r = 0; r < texts.size(); ++r) {
    std::vector<std::int64_t> ids = tokenizer.tokenize(texts[r]);
    if (static_cast<std::int64_t>(ids.size()) > sequence_length - 2) ids.resize(static_cast<std::size_t>(sequence_length - 2));
    ids.insert(ids.begin(), start);
    ids.push_back(end);
    const std::size_t base = r * static_cast<std::size_t>(sequence_length);
    for (std::size_t i = 0; i < ids.size(); ++i) {
      packed.token_ids.set_flat(base + i, static_cast<double>(ids[i]));
      packed.padding_mask.set_flat(base + i, 1.0);
    }
  }
  return packed;
}

KILN_REGISTER_LAYER("keras_hub>BertTextClassifier", TextClassifierModel);
KILN_REGISTER_LAYER("keras_hub>DistilBertTextClassifier", TextClassifierModel);
KILN_REGISTER_LAYER("keras_hub>RobertaTextClassifier", TextClassifierModel);

}  // namespace kiln::hub
