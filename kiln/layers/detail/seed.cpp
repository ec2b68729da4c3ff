#include <kiln/layers/detail/seed.hpp>

#include <kiln/core/graph.hpp>
#include <kiln/core/rng.hpp>

namespace kiln::detail {

std::uint64_t call_seed(const Config& seed, const std::string& layer_name, const Tensor& like) {
  const std::uint64_t base = seed.is_null() ? stable_hash(layer_name) : static_cast<std::uint64_t>(seed.as_int("seed"));
  return mix64(base ^ mix64(like.graph().count("call_seed:" + layer_name)));
}

}  // namespace kiln::detail
