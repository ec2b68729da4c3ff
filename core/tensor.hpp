#pragma once
// Tensor: a symbolic handle to one node of a Graph. Cheap to copy, holds no data; the bytes live in
// the arena of whichever Program runs the graph.
#include <string>

#include "core/dtype.hpp"
#include "core/fwd.hpp"

namespace kiln {

class Tensor {
 public:
  Tensor() = default;
  Tensor(Graph* graph, NodeId id) : graph_(graph), id_(id) {}

  bool valid() const { return graph_ != nullptr; }
  explicit operator bool() const { return valid(); }

  Graph& graph() const;  // throws Error on an empty handle
  NodeId id() const { return id_; }
  const Node& node() const;
  const Shape& shape() const;
  DType dtype() const;
  const std::string& name() const;
  int rank() const;

  bool operator==(const Tensor& other) const { return graph_ == other.graph_ && id_ == other.id_; }
  bool operator!=(const Tensor& other) const { return !(*this == other); }

 private:
  Graph* graph_ = nullptr;
  NodeId id_ = -1;
};

}  // namespace kiln
