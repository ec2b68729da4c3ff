#pragma once
// Text generation from a causal language model: a model of token ids (batch, context) to next-token
// logits (batch, context, vocabulary), such as a stack of TransformerDecoder blocks.
//
//   kiln::GenerateOptions options;
//   options.sampler = "top_k";          // keras-hub's samplers: greedy, random, top_k, top_p
//   options.max_new_tokens = 500;
//   std::vector<std::int64_t> text = kiln::generate(model, prompt_ids, options);
//
// With use_cache (the default) the model runs a token at a time: each TransformerDecoder keeps the keys
// and values of the tokens before it (keras-hub's cached decoding), and each recurrent layer its states,
// so N new tokens cost N one-token steps, not N passes over the whole window. Without it, every token re-reads the window, as nanoGPT's
// generate does. Both give the same tokens. A sequence longer than the context keeps its last `context`
// tokens (nanoGPT's crop); positions then shift, so from there each token re-reads the window.
#include <cstdint>
#include <string>
#include <vector>

#include <kiln/layers/model_base.hpp>

namespace kiln {

/// How generate() picks tokens; keras-hub's sampler names, arguments and defaults.
struct GenerateOptions {
  std::int64_t max_new_tokens = 32;  ///< tokens appended to the prompt
  /// "greedy" (the most likely), "random" (from softmax(logits / temperature)), "top_k" (from the k most
  /// likely), "top_p" (from the most likely whose probabilities, in order, reach p before them); "beam"
  /// (the num_beams most likely sequences, the best returned) in keras-hub's CausalLM.generate.
  std::string sampler = "greedy";
  double temperature = 1.0;  ///< logits are divided by it before softmax; positive
  std::int64_t k = 5;        ///< top_k's candidates
  double p = 0.1;            ///< top_p's probability mass, in (0, 1]
  std::uint64_t seed = 0;    ///< the same seed draws the same tokens
  /// "beam" (keras-hub's BeamSampler, in kiln::hub::CausalLM::generate only): the beams kept per row.
  std::int64_t num_beams = 5;
  bool use_cache = true;     ///< decode a token at a time with key/value caches (see the file comment)
};

/// `prompt` followed by `options.max_new_tokens` tokens drawn from `model`. ValueError for an empty
/// prompt, a token outside the vocabulary, or bad options (ConfigError for an unknown sampler); ShapeError
/// for a model that does not map (batch, context) ids to (batch, context, vocabulary) logits. With the
/// cache, a model holding a layer that cannot decode a token at a time (Bidirectional, a recurrent layer
/// with go_backwards, attention outside TransformerDecoder, a convolution) throws ValueError naming it:
/// generate with use_cache = false.
std::vector<std::int64_t> generate(ModelBase& model, const std::vector<std::int64_t>& prompt,
                                   const GenerateOptions& options = {});

}  // namespace kiln
