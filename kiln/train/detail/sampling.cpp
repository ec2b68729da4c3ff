#include <kiln/train/detail/sampling.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <string>

#include <kiln/core/error.hpp>

namespace kiln::detail {

std::int64_t TokenSampler::operator()(const std::vector<double>& logits) {
  const std::string& kind = options_.sampler;
  if (kind == "greedy")
    return static_cast<std::int64_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  // Buffers kept from token to token: generating allocates once.
  softmax(logits);
  const std::vector<double>& probabilities = probabilities_;
  // The candidates, most likely first (ties by the lower id, as a stable sort leaves them).
  std::vector<std::int64_t>& order = order_;
  order.resize(logits.size());
  std::iota(order.begin(), order.end(), std::int64_t{0});
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) {
    return probabilities[static_cast<std::size_t>(a)] > probabilities[static_cast<std::size_t>(b)];
  });
  std::size_t kept = order.size();
  if (kind == "top_k") kept = std::min<std::size_t>(kept, static_cast<std::size_t>(options_.k));
  if (kind == "top_p") {
    // keras-hub's TopPSampler: a token stays when the mass of the tokens before it is at most p, so the
    // most likely always does.
    double before = 0;
    for (std::size_t i = 0; i < order.size(); ++i) {
      if (i > 0 && before > options_.p) {
        kept = i;
        break;
      }
      before += probabilities[static_cast<std::size_t>(order[i])];
    }
  }
  double total = 0;
  for (std::size_t i = 0; i < kept; ++i) total += probabilities[static_cast<std::size_t>(order[i])];
  double draw = rng_.uniform() * total;
  for (std::size_t i = 0; i < kept; ++i) {
    draw -= probabilities[static_cast<std::size_t>(order[i])];
    if (draw < 0) return order[i];
  }
  return order[kept - 1];
}

void TokenSampler::softmax(const std::vector<double>& logits) {
  const double largest = *std::max_element(logits.begin(), logits.end());
  std::vector<double>& result = probabilities_;
  result.resize(logits.size());
  double total = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    result[i] = std::exp((logits[i] - largest) / options_.temperature);
    total += result[i];
  }
  for (double& value : result) value /= total;
}

void check_generate_options(const GenerateOptions& options) {
  const std::set<std::string> samplers = {"greedy", "random", "top_k", "top_p", "beam"};
  if (samplers.count(options.sampler) == 0)
    throw ConfigError("generate: unknown sampler '" + options.sampler +
                      "'; kiln has greedy, random, top_k, top_p and (for keras-hub's CausalLM) beam");
  if (options.sampler == "beam" && options.num_beams < 1)
    throw ValueError("generate: beam needs num_beams >= 1, got " + std::to_string(options.num_beams));
  if (options.max_new_tokens < 0)
    throw ValueError("generate: max_new_tokens must not be negative, got " + std::to_string(options.max_new_tokens));
  if (!(options.temperature > 0))
    throw ValueError("generate: temperature must be positive, got " + std::to_string(options.temperature));
  if (options.sampler == "top_k" && options.k < 1)
    throw ValueError("generate: top_k needs k >= 1, got " + std::to_string(options.k));
  if (options.sampler == "top_p" && !(options.p > 0 && options.p <= 1))
    throw ValueError("generate: top_p needs p in (0, 1], got " + std::to_string(options.p));
}

}  // namespace kiln::detail
