#pragma once
// Incremental decoding: a causal language model run a step of tokens at a time (one, or a prompt's at once),
// each attention layer keeping the keys and values of the tokens before in a cache (kiln::generate and
// CausalLM.generate build the step graphs). While a DecodingScope is open on a thread, the layers replayed there
// build that step instead of a whole sequence: positions come from `positions`, and self-attention writes slots
// [start, start + tokens) of its caches and attends the `visible` slots. Layers that cannot take part refuse
// with ValueError.
#include <cstdint>
#include <functional>
#include <string>

#include <kiln/core/shape.hpp>
#include <kiln/core/tensor.hpp>

namespace kiln::detail {

struct DecodingStep {
  Tensor positions;         ///< (batch, tokens): the positions of the tokens decoded, as floats
  Tensor start;             ///< (1, 1): the first cache slot this step writes, the first position, as a float
  /// (batch, length) for one token, or (batch, tokens, length): 1 at the slots each token sees (its own and those
  /// before)
  Tensor visible;
  std::int64_t length = 0;  ///< the cache's slots: the longest sequence decoded
  /// A cache that lives across steps, zero at first: a variable of the step's graph. `name` is unique per
  /// layer and part ("decoder 'transformer_decoder'/key").
  std::function<Tensor(const std::string& name, const Shape& shape)> cache;
  /// The value `cache` (one of cache()'s) takes after the step.
  std::function<void(const Tensor& cache, const Tensor& next)> update;
};

/// The step being built on this thread, or nullptr outside a DecodingScope.
const DecodingStep* decoding();

/// Makes `step` the one decoding() returns on this thread until destroyed.
class DecodingScope {
 public:
  explicit DecodingScope(const DecodingStep& step);
  ~DecodingScope();
  DecodingScope(const DecodingScope&) = delete;
  DecodingScope& operator=(const DecodingScope&) = delete;

 private:
  const DecodingStep* previous_;
};

}  // namespace kiln::detail
