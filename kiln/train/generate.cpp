#include <kiln/train/generate.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <set>

#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/program.hpp>
#include <kiln/core/rng.hpp>
#include <kiln/layers/detail/decoding.hpp>
#include <kiln/train/detail/sampling.hpp>

namespace kiln {

namespace {

// The layers a one-token step can replay: those that act on each position alone, the position layers
// (which read the step's position), TransformerDecoder (which keeps its key and value caches) and the
// recurrent layers (which keep their states in caches).
void check_decodable(const ModelBase& model) {
  static const std::set<std::string> decodable = {
      "InputLayer", "Dense", "LayerNormalization", "RMSNormalization", "UnitNormalization", "Activation", "ReLU",
      "LeakyReLU", "ELU", "Softmax", "PReLU", "Dropout", "Rescaling", "Add", "Subtract", "Multiply", "Average",
      "Maximum", "Minimum", "Embedding", "ReversibleEmbedding", "PositionEmbedding", "TokenAndPositionEmbedding",
      "SinePositionEncoding", "RotaryEmbedding", "TransformerDecoder", "SimpleRNN", "LSTM", "GRU",
      // keras-hub's decoder families (kiln/hub/layers), and the keras.ops call Gemma scales its embeddings with.
      "LlamaTransformerDecoder", "MistralTransformerDecoder", "QwenTransformerDecoder", "Qwen3TransformerDecoder",
      "Phi3Decoder", "GemmaDecoderBlock", "FalconTransformerDecoder", "LlamaLayerNorm", "MistralLayerNormalization",
      "QwenLayerNorm", "Qwen3LayerNorm", "Phi3LayerNorm"};
  for (const ModelBase::Node& node : model.nodes()) {
    if (const auto* nested = dynamic_cast<const ModelBase*>(node.layer.get())) {
      check_decodable(*nested);
      continue;
    }
    if (decodable.count(node.layer->class_name()) == 0)
      throw ValueError("generate: " + node.layer->describe() +
                       " cannot decode a token at a time with a cache; generate with use_cache = false");
  }
}

// ---- the two ways to run the model -------------------------------------------------------------------------

// Row `row` of logits (..., vocabulary) into `into`, whose storage is kept from token to token.
void copy_row(const Array& logits, std::size_t row, std::vector<double>& into) {
  const auto vocabulary = static_cast<std::size_t>(logits.shape().dim(-1));
  into.resize(vocabulary);
  for (std::size_t j = 0; j < vocabulary; ++j) into[j] = logits.flat(row * vocabulary + j);
}

// The whole window (1, context) in one pass; the logits of the last real token. A causal model's output at
// a position reads nothing after it, so the window's tail is padding that changes nothing.
class WindowRunner {
 public:
  WindowRunner(ModelBase& model, std::int64_t context, DType dtype) : context_(context), window_(Shape{1, context}, dtype) {
    input_ = graph_.placeholder(Shape{1, context}, dtype, "ids");
    logits_ = model.apply({input_}, /*training=*/false).at(0);
    program_ = std::make_unique<Program>(graph_, std::vector<Tensor>{logits_});
  }

  void next_logits(const std::vector<std::int64_t>& tokens, std::vector<double>& row) {
    const std::size_t length = std::min(tokens.size(), static_cast<std::size_t>(context_));
    const std::size_t first = tokens.size() - length;
    for (std::size_t i = 0; i < static_cast<std::size_t>(context_); ++i)
      window_.set_flat(i, i < length ? static_cast<double>(tokens[first + i]) : 0.0);
    program_->feed(input_, window_);
    program_->run();
    copy_row(program_->view(logits_), length - 1, row);
  }

 private:
  std::int64_t context_;
  Graph graph_;
  Tensor input_, logits_;
  Array window_;
  std::unique_ptr<Program> program_;
};

// A token at a time (batch 1): the step graph the model's layers build under a DecodingScope, its
// caches variables of this graph that every step updates.
class StepRunner {
 public:
  StepRunner(ModelBase& model, std::int64_t context, DType dtype)
      : context_(context),
        token_(Shape{1, 1}, dtype),
        position_(Shape{1, 1}, dtype),
        visible_(Shape{1, context}, dtype) {
    detail::DecodingStep step;
    step.positions = step.start = position_input_ = graph_.placeholder(Shape{1, 1}, dtype, "position");
    step.visible = visible_input_ = graph_.placeholder(Shape{1, context}, dtype, "visible");
    step.length = context;
    step.cache = [&](const std::string& name, const Shape& shape) {
      return graph_.variable(name, Array::full(shape, 0.0, dtype), /*trainable=*/false);
    };
    step.update = [&](const Tensor& cache, const Tensor& next) { updates_.push_back({cache, next}); };
    token_input_ = graph_.placeholder(Shape{1, 1}, dtype, "ids");
    {
      const detail::DecodingScope scope(step);
      logits_ = model.apply({token_input_}, /*training=*/false).at(0);
    }
    program_ = std::make_unique<Program>(graph_, std::vector<Tensor>{logits_}, updates_);
  }

  // Runs the token at `position` (< context) through the model; the logits of the next one. Slots after
  // `position` hold stale entries that `visible` hides.
  void step(std::int64_t token, std::int64_t position, std::vector<double>& row) {
    token_.set_flat(0, static_cast<double>(token));
    position_.set_flat(0, static_cast<double>(position));
    for (std::int64_t s = 0; s < context_; ++s) visible_.set_flat(static_cast<std::size_t>(s), s <= position ? 1.0 : 0.0);
    program_->feed(token_input_, token_);
    program_->feed(position_input_, position_);
    program_->feed(visible_input_, visible_);
    program_->run();
    copy_row(program_->view(logits_), 0, row);
  }

 private:
  std::int64_t context_;
  Graph graph_;
  Tensor token_input_, position_input_, visible_input_, logits_;
  std::vector<Update> updates_;
  Array token_, position_, visible_;
  std::unique_ptr<Program> program_;
};

}  // namespace

std::vector<std::int64_t> generate(ModelBase& model, const std::vector<std::int64_t>& prompt,
                                   const GenerateOptions& options) {
  detail::check_generate_options(options);
  if (options.sampler == "beam")
    throw ConfigError("generate: the beam sampler is keras-hub CausalLM's (kiln::hub::CausalLM::generate), whose rows "
                      "hold every beam; this generate draws one sequence");
  const std::vector<Shape> inputs = model.input_shapes(), outputs = model.model_output_shapes();
  if (inputs.size() != 1 || outputs.size() != 1 || inputs[0].rank() != 2 || inputs[0][1] == Shape::unknown ||
      outputs[0].rank() != 3 || outputs[0][1] != inputs[0][1] || outputs[0][2] == Shape::unknown)
    throw ShapeError(model.describe() + ": generate needs a model of token ids (batch, context) to logits (batch, "
                     "context, vocabulary), got " +
                     (inputs.empty() ? std::string("no input") : inputs[0].to_string()) + " -> " +
                     (outputs.empty() ? std::string("no output") : outputs[0].to_string()));
  const std::int64_t context = inputs[0][1], vocabulary = outputs[0][2];
  if (prompt.empty()) throw ValueError("generate: the prompt is empty; give at least one token");
  for (std::size_t i = 0; i < prompt.size(); ++i)
    if (prompt[i] < 0 || prompt[i] >= vocabulary)
      throw ValueError("generate: prompt token " + std::to_string(i) + " is " + std::to_string(prompt[i]) +
                       ", outside the vocabulary [0, " + std::to_string(vocabulary) + ") of " + model.describe());
  const ModelBase::Use use = model.use_for_inference("generate");
  const DType dtype = model.input_dtypes().at(0);
  detail::TokenSampler sample(options);
  std::vector<std::int64_t> tokens = prompt;
  if (options.max_new_tokens == 0) return tokens;
  tokens.reserve(prompt.size() + static_cast<std::size_t>(options.max_new_tokens));

  std::vector<double> logits;
  std::unique_ptr<WindowRunner> window;
  auto window_logits = [&] {
    if (!window) window = std::make_unique<WindowRunner>(model, context, dtype);
    window->next_logits(tokens, logits);
  };
  std::unique_ptr<StepRunner> steps;
  // The cache serves while the whole sequence fits the context: positions are absolute.
  if (options.use_cache && static_cast<std::int64_t>(prompt.size()) < context) {
    check_decodable(model);
    steps = std::make_unique<StepRunner>(model, context, dtype);
    for (std::size_t i = 0; i < prompt.size(); ++i) steps->step(prompt[i], static_cast<std::int64_t>(i), logits);
  } else {
    window_logits();
  }
  for (std::int64_t n = 0; n < options.max_new_tokens; ++n) {
    tokens.push_back(sample(logits));
    if (n + 1 == options.max_new_tokens) break;
    const auto length = static_cast<std::int64_t>(tokens.size());
    if (steps && length <= context)
      steps->step(tokens.back(), length - 1, logits);
    else
      window_logits();
  }
  return tokens;
}

}  // namespace kiln
