#pragma once
// keras-hub's samplers over one row of next-token logits: what kiln::generate and keras-hub's CausalLM
// (kiln/hub/causal_lm) draw tokens with.
#include <cstdint>
#include <vector>

#include <kiln/core/rng.hpp>
#include <kiln/train/generate.hpp>

namespace kiln::detail {

/// ConfigError for an unknown sampler, ValueError for options out of range, naming "generate".
void check_generate_options(const GenerateOptions& options);

/// Picks the next token from a row of logits as options.sampler says; its random draws follow options.seed.
/// Buffers are kept from call to call, so sampling allocates once.
class TokenSampler {
 public:
  explicit TokenSampler(const GenerateOptions& options) : options_(options), rng_(options.seed) {}
  std::int64_t operator()(const std::vector<double>& logits);

 private:
  void softmax(const std::vector<double>& logits);  ///< softmax(logits / temperature) into probabilities_
  GenerateOptions options_;
  Rng rng_;
  std::vector<double> probabilities_;
  std::vector<std::int64_t> order_;
};

}  // namespace kiln::detail
