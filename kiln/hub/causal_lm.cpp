#include <kiln/hub/causal_lm.hpp>

#include <algorithm>
#include <map>
#include <cstdint>
#include <memory>
#include <utility>

#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/names.hpp>
#include <kiln/core/program.hpp>
#include <kiln/core/warnings.hpp>
#include <kiln/hub/detail/tasks.hpp>
#include <kiln/layers/detail/decoding.hpp>
#include <kiln/ops/ops.hpp>
#include <kiln/serialize/detail/keras_export.hpp>
#include <kiln/train/detail/sampling.hpp>

namespace kiln::hub {

namespace {

const char* const kBackbone = "Backbone";

// GPT2Backbone -> GPT2CausalLM; ConfigError for a backbone keras-hub has no CausalLM for.
std::string task_class(const std::string& backbone_class) {
  const std::size_t at = backbone_class.rfind(kBackbone);
  const std::string family = at == std::string::npos ? backbone_class : backbone_class.substr(0, at);
  if (family != "GPT2" && family != "Llama" && family != "Llama3" && family != "Mistral" && family != "Qwen" &&
      family != "Qwen3" && family != "Phi3" && family != "Gemma" && family != "Falcon")
    throw ConfigError("keras-hub has no CausalLM for " + backbone_class +
                      "; kiln's are GPT2, Llama, Llama3, Mistral, Qwen, Qwen3, Phi3, Gemma and Falcon");
  return family + "CausalLM";
}

}  // namespace

CausalLMModel::CausalLMModel(const Config& config)
    : ModelBase(detail::task_base(config, task_class(detail::backbone_class_of(config, "CausalLM"))),
                task_class(detail::backbone_class_of(config, "CausalLM"))) {
  ConfigReader args = config_reader(config);
  backbone_ = backbone_from_config(args.value("backbone"));
  if (const Config& preprocessor = args.value("preprocessor"); !preprocessor.is_null())
    warn(describe() + ": its preprocessor (" + preprocessor.get_string("class_name", "?") +
         ") is not read: kiln's CausalLM takes token ids");
  args.finish();
  make();
}

CausalLMModel::CausalLMModel(std::shared_ptr<BackboneModel> backbone)
    : ModelBase(Config{{"name", to_snake_case(task_class(backbone->class_name()))}}, task_class(backbone->class_name())),
      backbone_(std::move(backbone)) {
  make();
}

void CausalLMModel::make() {
  if (backbone_->num_inputs() != 2)
    throw ConfigError(describe() + ": its backbone " + backbone_->describe() + " takes " +
                      std::to_string(backbone_->num_inputs()) + " inputs, not a decoder's padding_mask and token_ids");
  const Tensor padding_mask = token_input("padding_mask"), token_ids = token_input("token_ids");
  const Tensor hidden = (*backbone_)(std::vector<Tensor>{padding_mask, token_ids})[0];
  const Tensor logits = (*backbone_->token_embedding())(hidden, CallArgs().option("reverse", true));
  record({padding_mask, token_ids}, {logits});
  build_for(input_shapes());
}

Config CausalLMModel::get_config() const {
  // keras-hub's Task.get_config: the backbone as Keras serializes it, the preprocessor and the name (no trainable
  // or dtype).
  return {{"backbone", kiln::detail::export_keras_model_config(*backbone_, Config())},
          {"preprocessor", Config()},
          {"name", name()}};
}

std::string CausalLMModel::keras_module() const {
  std::string module = backbone_->keras_module();
  const std::string suffix = "_backbone";
  if (module.size() > suffix.size() && module.compare(module.size() - suffix.size(), suffix.size(), suffix) == 0)
    module = module.substr(0, module.size() - suffix.size());
  return module + "_causal_lm";
}

// ---- CausalLM ---------------------------------------------------------------------------------------------------

CausalLM::CausalLM(const Backbone& backbone) : TrainableModel(std::make_shared<CausalLMModel>(backbone.ptr())) {}

CausalLM CausalLM::of(const Model& model) {
  auto task = std::dynamic_pointer_cast<CausalLMModel>(model.ptr());
  if (!task) throw ValueError(model->describe() + " is not a keras-hub CausalLM");
  return CausalLM(task);
}

namespace {

// Runs the model on a whole (batch, length) window: the logits of every position.
class WindowRunner {
 public:
  WindowRunner(ModelBase& model, std::int64_t batch, std::int64_t length, DType dtype)
      : ones_(Array::full(Shape{batch, length}, 1.0, dtype)) {
    mask_ = graph_.placeholder(Shape{batch, length}, dtype, "padding_mask");
    ids_ = graph_.placeholder(Shape{batch, length}, dtype, "token_ids");
    logits_ = model.apply({mask_, ids_}, /*training=*/false).at(0);
    program_ = std::make_unique<Program>(graph_, std::vector<Tensor>{logits_});
  }
  // The logits at `position` of every row, into rows[r].
  void run(const Array& tokens, std::int64_t position, std::vector<std::vector<double>>& rows) {
    program_->feed(mask_, ones_);
    program_->feed(ids_, tokens);
    program_->run();
    const Array& logits = program_->view(logits_);
    const std::int64_t length = logits.shape()[1], vocabulary = logits.shape()[2];
    for (std::size_t r = 0; r < rows.size(); ++r) {
      rows[r].resize(static_cast<std::size_t>(vocabulary));
      const std::size_t base = (r * static_cast<std::size_t>(length) + static_cast<std::size_t>(position)) *
                               static_cast<std::size_t>(vocabulary);
      for (std::size_t j = 0; j < rows[r].size(); ++j) rows[r][j] = logits.flat(base + j);
    }
  }

 private:
  Array ones_;
  Graph graph_;
  Tensor mask_, ids_, logits_;
  std::unique_ptr<Program> program_;
};

// One position of every row at a time through key/value caches: the model's layers build a one-token step under a
// DecodingScope, whose caches are variables of this graph that each step updates.
// `tokens` positions a run through key/value caches: one token a step, or a prompt's tokens at once (the
// prefill). Runners of one generate share their caches (`caches`, by name): a prefill fills what the steps read.
class StepRunner {
 public:
  StepRunner(CausalLMModel& model, std::int64_t batch, std::int64_t length, DType dtype, std::int64_t tokens,
             std::map<std::string, Array>& caches)
      : length_(length),
        tokens_(tokens),
        token_(Shape{batch, tokens}, dtype),
        position_(Shape{batch, tokens}, dtype),
        start_(Shape{1, 1}, dtype),
        visible_(Shape{batch, tokens, length}, dtype),
        ones_(Array::full(Shape{batch, tokens}, 1.0, dtype)) {
    kiln::detail::DecodingStep step;
    step.positions = position_input_ = graph_.placeholder(Shape{batch, tokens}, dtype, "positions");
    step.start = start_input_ = graph_.placeholder(Shape{1, 1}, dtype, "start");
    step.visible = visible_input_ = graph_.placeholder(Shape{batch, tokens, length}, dtype, "visible");
    step.length = length;
    step.cache = [&](const std::string& name, const Shape& shape) {
      Array& cache = caches[name];
      if (cache.size() == 0) cache = Array::full(shape, 0.0, dtype);
      return graph_.variable(name, cache, /*trainable=*/false);
    };
    step.update = [&](const Tensor& cache, const Tensor& next) { updates_.push_back({cache, next}); };
    mask_input_ = graph_.placeholder(Shape{batch, tokens}, dtype, "padding_mask");
    token_input_ = graph_.placeholder(Shape{batch, tokens}, dtype, "token_ids");
    {
      const kiln::detail::DecodingScope scope(step);
      if (tokens == 1) {
        logits_ = model.apply({mask_input_, token_input_}, /*training=*/false).at(0);
      } else {
        // A prefill only fills the caches: the backbone over the prompt's tokens, no head at all, since the first
        // step after it scores the prompt's last token. Its output is the last position's vector, never read.
        const Tensor hidden = model.backbone()->apply({mask_input_, token_input_}, /*training=*/false).at(0);
        logits_ = ops::get_item(hidden, {ops::Slice(), ops::Slice(tokens - 1, tokens), ops::Slice()});
      }
    }
    program_ = std::make_unique<Program>(graph_, std::vector<Tensor>{logits_}, updates_);
  }

  // Positions [position, position + tokens) of `tokens` through the model, filling the caches; a one-token step
  // gives `rows` each row's logits (a prefill leaves them).
  void run(const Array& tokens, std::int64_t position, std::vector<std::vector<double>>& rows) {
    const std::size_t batch = rows.size();
    for (std::size_t r = 0; r < batch; ++r)
      for (std::int64_t t = 0; t < tokens_; ++t) {
        const std::size_t at = r * static_cast<std::size_t>(tokens_) + static_cast<std::size_t>(t);
        token_.set_flat(at, tokens.flat(r * static_cast<std::size_t>(length_) + static_cast<std::size_t>(position + t)));
        position_.set_flat(at, static_cast<double>(position + t));
        for (std::int64_t s = 0; s < length_; ++s)
          visible_.set_flat(at * static_cast<std::size_t>(length_) + static_cast<std::size_t>(s),
                            s <= position + t ? 1.0 : 0.0);
      }
    start_.set_flat(0, static_cast<double>(position));
    program_->feed(token_input_, token_);
    program_->feed(mask_input_, ones_);
    program_->feed(position_input_, position_);
    program_->feed(start_input_, start_);
    program_->feed(visible_input_, visible_);
    program_->run();
    if (tokens_ > 1) return;
    const Array& logits = program_->view(logits_);
    const std::size_t vocabulary = static_cast<std::size_t>(logits.shape()[2]);
    for (std::size_t r = 0; r < batch; ++r) {
      rows[r].resize(vocabulary);
      const std::size_t base = r * vocabulary;
      for (std::size_t j = 0; j < vocabulary; ++j) rows[r][j] = logits.flat(base + j);
    }
  }

 private:
  std::int64_t length_, tokens_;
  Graph graph_;
  Tensor mask_input_, token_input_, position_input_, start_input_, visible_input_, logits_;
  std::vector<Update> updates_;
  Array token_, position_, start_, visible_, ones_;
  std::unique_ptr<Program> program_;
};

// keras-hub's BeamSampler: every row kept as num_beams sequences (the first alive, the others at -1e9 so the first
// step draws from it alone); at each position, each row's num_beams best continuations over every beam and token
// by summed log-probabilities (log softmax(logits / temperature)), a prompt position keeping its token; at the
// end each row's best beam. Each position reads the whole window of every beam (no cache: beams swap histories).
Array beam_search(ModelBase& model, const Array& tokens, const Array& padding_mask, std::int64_t index,
                  const GenerateOptions& options, const std::vector<std::int64_t>& stop_token_ids) {
  const std::int64_t batch = tokens.shape()[0], length = tokens.shape()[1], beams = options.num_beams;
  const std::int64_t rows = batch * beams;
  Array sequences(Shape{rows, length}, tokens.dtype()), next(Shape{rows, length}, tokens.dtype());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t s = 0; s < length; ++s)
      sequences.set_flat(static_cast<std::size_t>(r * length + s), tokens.flat(static_cast<std::size_t>((r / beams) * length + s)));
  std::vector<double> scores(static_cast<std::size_t>(rows), -1e9);
  for (std::int64_t b = 0; b < batch; ++b) scores[static_cast<std::size_t>(b * beams)] = 0.0;
  WindowRunner window(model, rows, length, tokens.dtype());
  std::vector<std::vector<double>> logits(static_cast<std::size_t>(rows));
  std::vector<std::pair<double, std::int64_t>> candidates;  // (score, beam * vocabulary + token)
  auto stopped = [&] {
    if (stop_token_ids.empty()) return false;
    for (std::int64_t r = 0; r < rows; ++r) {
      bool found = false;
      for (std::int64_t s = 0; s < length && !found; ++s)
        found = padding_mask.flat(static_cast<std::size_t>((r / beams) * length + s)) == 0 &&
                std::find(stop_token_ids.begin(), stop_token_ids.end(),
                          static_cast<std::int64_t>(sequences.flat(static_cast<std::size_t>(r * length + s)))) !=
                    stop_token_ids.end();
      if (!found) return false;
    }
    return true;
  };
  for (std::int64_t position = index; position < length && !stopped(); ++position) {
    window.run(sequences, position - 1, logits);
    const auto vocabulary = static_cast<std::int64_t>(logits[0].size());
    std::vector<double> next_scores(scores.size());
    for (std::int64_t b = 0; b < batch; ++b) {
      candidates.clear();
      for (std::int64_t k = 0; k < beams; ++k) {
        const std::vector<double>& row = logits[static_cast<std::size_t>(b * beams + k)];
        double largest = -1e300, total = 0;
        for (const double value : row) largest = std::max(largest, value / options.temperature);
        for (const double value : row) total += std::exp(value / options.temperature - largest);
        const double log_total = largest + std::log(total);
        for (std::int64_t v = 0; v < vocabulary; ++v)
          candidates.emplace_back(row[static_cast<std::size_t>(v)] / options.temperature - log_total +
                                      scores[static_cast<std::size_t>(b * beams + k)],
                                  k * vocabulary + v);
      }
      std::partial_sort(candidates.begin(), candidates.begin() + beams, candidates.end(),
                        [](const auto& x, const auto& y) { return x.first > y.first || (x.first == y.first && x.second < y.second); });
      for (std::int64_t j = 0; j < beams; ++j) {
        const auto [score, code] = candidates[static_cast<std::size_t>(j)];
        const std::int64_t source = b * beams + code / vocabulary, target = b * beams + j;
        for (std::int64_t s = 0; s < length; ++s)
          next.set_flat(static_cast<std::size_t>(target * length + s), sequences.flat(static_cast<std::size_t>(source * length + s)));
        if (padding_mask.flat(static_cast<std::size_t>(b * length + position)) == 0)
          next.set_flat(static_cast<std::size_t>(target * length + position), static_cast<double>(code % vocabulary));
        next_scores[static_cast<std::size_t>(target)] = score;
      }
    }
    std::swap(sequences, next);
    scores = next_scores;
  }
  Array best(Shape{batch, length}, tokens.dtype());
  for (std::int64_t b = 0; b < batch; ++b) {
    std::int64_t top = b * beams;
    for (std::int64_t k = 1; k < beams; ++k)
      if (scores[static_cast<std::size_t>(b * beams + k)] > scores[static_cast<std::size_t>(top)]) top = b * beams + k;
    for (std::int64_t s = 0; s < length; ++s)
      best.set_flat(static_cast<std::size_t>(b * length + s), sequences.flat(static_cast<std::size_t>(top * length + s)));
  }
  return best;
}

}  // namespace

Generated CausalLM::generate(const Array& token_ids, const Array& padding_mask, const GenerateOptions& options,
                             const std::vector<std::int64_t>& stop_token_ids) const {
  kiln::detail::check_generate_options(options);
  CausalLMModel& model = *this->layer_;
  const std::string who = model.describe() + ": generate";
  if (token_ids.shape().rank() != 2 || padding_mask.shape() != token_ids.shape())
    throw ValueError(who + " takes token_ids and a padding_mask of one shape (batch, max_length), got " +
                     token_ids.shape().to_string() + " and " + padding_mask.shape().to_string());
  const std::int64_t batch = token_ids.shape()[0], length = token_ids.shape()[1];
  const std::int64_t vocabulary = model.backbone()->arguments().at("vocabulary_size").as_int();
  if (batch < 1 || length < 1) throw ValueError(who + ": no rows to generate, got " + token_ids.shape().to_string());
  // Each row's prompt: its first tokens, where the mask is 1 (keras-hub's prompts are left-aligned).
  std::vector<std::int64_t> lengths(static_cast<std::size_t>(batch), 0);
  auto at = [&](std::int64_t r, std::int64_t s) { return static_cast<std::size_t>(r * length + s); };
  for (std::int64_t r = 0; r < batch; ++r)
    for (std::int64_t s = 0; s < length; ++s) {
      const bool in_prompt = padding_mask.flat(at(r, s)) != 0;
      if (in_prompt && s != lengths[static_cast<std::size_t>(r)])
        throw ValueError(who + ": row " + std::to_string(r) + "'s prompt is not at its start (padding_mask has a 1 at " +
                         std::to_string(s) + " after a 0); keras-hub's prompts are left-aligned");
      if (!in_prompt) continue;
      ++lengths[static_cast<std::size_t>(r)];
      const double token = token_ids.flat(at(r, s));
      if (token < 0 || token >= static_cast<double>(vocabulary) || token != static_cast<double>(static_cast<std::int64_t>(token)))
        throw ValueError(who + ": token " + std::to_string(token) + " at row " + std::to_string(r) + ", position " +
                         std::to_string(s) + " is not an id of the vocabulary [0, " + std::to_string(vocabulary) + ")");
    }
  const std::int64_t index = *std::min_element(lengths.begin(), lengths.end());
  if (index < 1) throw ValueError(who + ": every row needs a prompt of at least one token (padding_mask[:, 0] = 1)");
  const ModelBase::Use use = model.use_for_inference("generate");
  const DType dtype = model.input_dtypes().at(1);
  Array tokens = token_ids.astype(dtype);
  Generated result;
  kiln::detail::TokenSampler sample(options);
  std::vector<std::vector<double>> rows(static_cast<std::size_t>(batch));
  auto is_stop = [&](double token) {
    return std::find(stop_token_ids.begin(), stop_token_ids.end(), static_cast<std::int64_t>(token)) !=
           stop_token_ids.end();
  };
  // keras-hub's loop condition: go on while some row has no stop token outside its prompt yet.
  auto all_stopped = [&] {
    if (stop_token_ids.empty()) return false;
    for (std::int64_t r = 0; r < batch; ++r) {
      bool stopped = false;
      for (std::int64_t s = lengths[static_cast<std::size_t>(r)]; s < length && !stopped; ++s)
        stopped = is_stop(tokens.flat(at(r, s)));
      if (!stopped) return false;
    }
    return true;
  };
  if (options.sampler == "beam") {
    tokens = beam_search(model, tokens, padding_mask, index, options, stop_token_ids);
  } else {
    std::unique_ptr<StepRunner> steps;
    std::unique_ptr<WindowRunner> window;
    std::map<std::string, Array> caches;
    if (options.use_cache) {
      // The prompts' common part in one pass (the prefill), then a token a step.
      if (index > 1) StepRunner(model, batch, length, dtype, index - 1, caches).run(tokens, 0, rows);  // no scores
      steps = std::make_unique<StepRunner>(model, batch, length, dtype, 1, caches);
    } else {
      window = std::make_unique<WindowRunner>(model, batch, length, dtype);
    }
    for (std::int64_t position = index; position < length && !all_stopped(); ++position) {
      if (steps)
        steps->run(tokens, position - 1, rows);
      else
        window->run(tokens, position - 1, rows);
      for (std::int64_t r = 0; r < batch; ++r)
        if (padding_mask.flat(at(r, position)) == 0)
          tokens.set_flat(at(r, position), static_cast<double>(sample(rows[static_cast<std::size_t>(r)])));
    }
  }
  // keras-hub's padding mask of the result: everything up to each row's first stop token after its prompt.
  result.padding_mask = Array::full(token_ids.shape(), 1.0, token_ids.dtype());
  if (!stop_token_ids.empty())
    for (std::int64_t r = 0; r < batch; ++r) {
      bool ended = false;
      for (std::int64_t s = lengths[static_cast<std::size_t>(r)]; s < length; ++s) {
        if (ended) result.padding_mask.set_flat(at(r, s), 0.0);
        ended = ended || is_stop(tokens.flat(at(r, s)));
      }
    }
  result.token_ids = tokens.astype(token_ids.dtype());
  return result;
}

std::vector<std::int64_t> CausalLM::generate(const std::vector<std::int64_t>& prompt, std::int64_t max_length,
                                             const GenerateOptions& options,
                                             const std::vector<std::int64_t>& stop_token_ids) const {
  const auto prompt_length = static_cast<std::int64_t>(prompt.size());
  if (prompt.empty()) throw ValueError(this->layer_->describe() + ": generate: the prompt is empty");
  if (max_length < prompt_length)
    throw ValueError(this->layer_->describe() + ": generate: max_length " + std::to_string(max_length) +
                     " is shorter than the prompt (" + std::to_string(prompt_length) + " tokens)");
  Array ids = Array::full(Shape{1, max_length}, 0.0, DType::float32), mask = ids.copy();
  for (std::int64_t i = 0; i < prompt_length; ++i) {
    ids.set_flat(static_cast<std::size_t>(i), static_cast<double>(prompt[static_cast<std::size_t>(i)]));
    mask.set_flat(static_cast<std::size_t>(i), 1.0);
  }
  const Generated generated = generate(ids, mask, options, stop_token_ids);
  std::vector<std::int64_t> tokens;
  for (std::int64_t i = 0; i < max_length; ++i) {
    if (generated.padding_mask.flat(static_cast<std::size_t>(i)) == 0) break;
    tokens.push_back(static_cast<std::int64_t>(generated.token_ids.flat(static_cast<std::size_t>(i))));
  }
  return tokens;
}

// keras-hub's task classes, each over its family's backbones.
KILN_REGISTER_LAYER("keras_hub>GPT2CausalLM", CausalLMModel);
KILN_REGISTER_LAYER("keras_hub>LlamaCausalLM", CausalLMModel);
KILN_REGISTER_LAYER("keras_hub>Llama3CausalLM", CausalLMModel);
KILN_REGISTER_LAYER("keras_hub>MistralCausalLM", CausalLMModel);
KILN_REGISTER_LAYER("keras_hub>QwenCausalLM", CausalLMModel);
KILN_REGISTER_LAYER("keras_hub>Qwen3CausalLM", CausalLMModel);
KILN_REGISTER_LAYER("keras_hub>Phi3CausalLM", CausalLMModel);
KILN_REGISTER_LAYER("keras_hub>FalconCausalLM", CausalLMModel);
KILN_REGISTER_LAYER("keras_hub>GemmaCausalLM", CausalLMModel);

}  // namespace kiln::hub
