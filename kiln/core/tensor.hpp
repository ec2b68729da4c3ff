#pragma once
// Tensor: a symbolic handle to one node of a Graph. Cheap to copy, holds no data; the bytes live in
// the arena of whichever Program runs the graph.
#include <memory>
#include <string>

#include <kiln/core/dtype.hpp>
#include <kiln/core/fwd.hpp>

namespace kiln {

/// What a room above records as a tensor's origin (layers/: the layer call that made it). Core keeps it
/// with the tensor and never looks inside.
struct TensorHistory {
  virtual ~TensorHistory() = default;
};

/// A symbolic handle to one node of a Graph: cheap to copy, it holds no data (a Program run computes the
/// values). A default-constructed Tensor is an empty handle: graph(), node() and the node's properties
/// throw Error on it.
class Tensor {
 public:
  Tensor() = default;
  /// A handle to node `id` of `graph`, without a producer. Graph makes these; neither argument is checked.
  Tensor(Graph* graph, NodeId id) : graph_(graph), id_(id) {}

  /// False for an empty handle.
  bool valid() const { return graph_ != nullptr; }
  /// The same as valid().
  explicit operator bool() const { return valid(); }

  Graph& graph() const;  ///< throws Error on an empty handle
  /// The node's id in its graph; -1 for an empty handle (which does not throw).
  NodeId id() const { return id_; }
  /// The node this handle names.
  const Node& node() const;
  /// The node's declared shape, with Shape::unknown where the size comes from the fed data.
  const Shape& shape() const;
  /// The node's dtype.
  DType dtype() const;
  /// The node's unique name in its graph, e.g. "dense_1/matmul".
  const std::string& name() const;
  /// The rank of shape().
  int rank() const;

  /// What produced this tensor, when a room above recorded it (Keras's "keras history": layers/' LayerCall,
  /// read back with layers/layer.hpp's layer_call_of): functional models follow it back from their outputs
  /// to their inputs. Ops return tensors without one.
  const std::shared_ptr<const TensorHistory>& producer() const { return producer_; }
  /// Which output of producer() this tensor is (0 when there is no producer).
  int producer_output() const { return producer_output_; }
  /// The same node, with output `output_index` of `call` as its history: a layer marks its outputs so.
  Tensor with_producer(std::shared_ptr<const TensorHistory> call, int output_index) const {
    Tensor result(graph_, id_);
    result.producer_ = std::move(call);
    result.producer_output_ = output_index;
    return result;
  }

  /// Identity is the node; the history does not take part.
  bool operator==(const Tensor& other) const { return graph_ == other.graph_ && id_ == other.id_; }
  /// Not the same node.
  bool operator!=(const Tensor& other) const { return !(*this == other); }

 private:
  Graph* graph_ = nullptr;
  NodeId id_ = -1;
  std::shared_ptr<const TensorHistory> producer_;
  int producer_output_ = 0;
};

}  // namespace kiln
