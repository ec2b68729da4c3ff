#pragma once
// The consumer's own layers/layer.hpp.
namespace consumer {
struct Layer {
  const char* name = "consumer layer";
};
}  // namespace consumer
