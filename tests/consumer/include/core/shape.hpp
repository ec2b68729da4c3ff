#pragma once
// The consumer's own core/shape.hpp, first on its include path: kiln's headers must never pick it up.
namespace consumer {
struct Shape {
  int rows = 0, columns = 0;
};
}  // namespace consumer
