#pragma once
// Forward declarations of kiln's common types, for headers that only pass them by reference.
#include <cstdint>

namespace kiln {
class Array;
class Attributes;
class Graph;
class OpDef;
class Program;
class Rng;
class Shape;
class Tensor;
struct Node;
struct TensorHistory;
/// A node's index in its Graph, in creation order; -1 for none.
using NodeId = std::int32_t;
}  // namespace kiln
