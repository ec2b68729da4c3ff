#pragma once
// Tensor: a symbolic handle to one node of a Graph. Cheap to copy, holds no data; the bytes live in
// the arena of whichever Program runs the graph.
#include <memory>
#include <string>

#include <kiln/core/dtype.hpp>
#include <kiln/core/fwd.hpp>

namespace kiln {

class Tensor {
 public:
  Tensor() = default;
  Tensor(Graph* graph, NodeId id) : graph_(graph), id_(id) {}

  bool valid() const { return graph_ != nullptr; }
  explicit operator bool() const { return valid(); }

  Graph& graph() const;  ///< throws Error on an empty handle
  NodeId id() const { return id_; }
  const Node& node() const;
  const Shape& shape() const;
  DType dtype() const;
  const std::string& name() const;
  int rank() const;

  /// The layer call that produced this tensor, if a layer did (Keras's "keras history"): functional
  /// models follow it back from their outputs to their inputs. Ops return tensors without one.
  const std::shared_ptr<const LayerCall>& producer() const { return producer_; }
  int producer_output() const { return producer_output_; }
  Tensor with_producer(std::shared_ptr<const LayerCall> call, int output_index) const {
    Tensor result(graph_, id_);
    result.producer_ = std::move(call);
    result.producer_output_ = output_index;
    return result;
  }

  /// Identity is the node; the history does not take part.
  bool operator==(const Tensor& other) const { return graph_ == other.graph_ && id_ == other.id_; }
  bool operator!=(const Tensor& other) const { return !(*this == other); }

 private:
  Graph* graph_ = nullptr;
  NodeId id_ = -1;
  std::shared_ptr<const LayerCall> producer_;
  int producer_output_ = 0;
};

}  // namespace kiln
