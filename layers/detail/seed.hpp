#pragma once
// The seed of one call's randomness (dropout masks).
#include <cstdint>
#include <string>

#include "core/tensor.hpp"
#include "layers/config.hpp"

namespace kiln::detail {

// The layer's seed (given in its config, else a stable hash of its name, so adding a layer elsewhere
// changes no mask) mixed with where the call sits in its graph: two calls of one layer draw different
// masks, as Keras's SeedGenerator advances per call, and a graph rebuilt the same way draws the same ones.
std::uint64_t call_seed(const Config& seed, const std::string& layer_name, const Tensor& like);

}  // namespace kiln::detail
