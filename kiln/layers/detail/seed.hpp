#pragma once
// The seed of one call's randomness (dropout masks).
#include <cstdint>
#include <string>

#include <kiln/core/tensor.hpp>
#include <kiln/layers/config.hpp>

namespace kiln::detail {

// The layer's seed (given in its config, else a stable hash of its name) mixed with how many times the
// layer was called in this graph before: two calls of one layer draw different masks, as Keras's
// SeedGenerator advances per call; a graph rebuilt the same way draws the same ones; and adding or
// changing other layers changes no mask.
std::uint64_t call_seed(const Config& seed, const std::string& layer_name, const Tensor& like);

}  // namespace kiln::detail
