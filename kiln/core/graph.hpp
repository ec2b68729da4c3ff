#pragma once
// Graph: an append-only list of nodes in topological order (a node's inputs always come before it).
// Building a node runs its shape rule at once, so a mismatch throws at the line of model code that
// caused it. Programs (core/program.hpp) plan and run any part of a graph; the graph keeps the
// persistent data: variables and constants.
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/attributes.hpp>
#include <kiln/core/dtype.hpp>
#include <kiln/core/fwd.hpp>
#include <kiln/core/shape.hpp>
#include <kiln/core/tensor.hpp>

namespace kiln {

enum class NodeKind { placeholder, variable, constant, op };

struct Node {
  NodeId id = -1;
  NodeKind kind = NodeKind::op;
  const OpDef* op = nullptr;  ///< set for NodeKind::op
  std::vector<NodeId> inputs;
  Attributes attributes;
  Shape shape;
  DType dtype = DType::float32;
  std::string name;               ///< unique in the graph, e.g. "dense_1/matmul"
  bool trainable = false;         ///< variables only
  std::int32_t value_index = -1;  ///< variables and constants: index into the graph's value store

  /// "matmul 'dense_1/matmul'" for ops, "placeholder 'x'" otherwise: how messages name a node.
  std::string describe() const;
};

class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  /// Data fed at run time. Unknown dimensions (Shape::unknown) are the batch size.
  Tensor placeholder(const Shape& shape, DType dtype = DType::float32, const std::string& name = "input");
  /// A persistent, named array that steps read and updates write (weights, optimizer slots).
  Tensor variable(const std::string& name, Array initial_value, bool trainable = true);
  /// The variable node of this graph that holds `value`'s storage, if there is one: a layer called twice
  /// in one graph reads the same weights, and a layer called in two graphs shares its weights' bytes.
  Tensor find_variable(const Array& value);
  Tensor constant(Array value, const std::string& name = "constant");
  Tensor scalar(double value, DType dtype, const std::string& name = "scalar");

  /// Creates an op node: checks the op's input count, attribute names and dtypes, then runs its shape
  /// rule. Throws ConfigError (unknown op or attribute), DTypeError or ShapeError.
  Tensor add_op(const std::string& op_name, const std::vector<Tensor>& inputs, Attributes attributes = {},
                const std::string& name = "");

  const Node& node(NodeId id) const;
  std::size_t num_nodes() const { return nodes_.size(); }
  Tensor tensor(NodeId id) { return Tensor(this, id); }

  /// The value of a variable or constant node. Replacing it with an array of another shape or dtype
  /// throws ShapeError or DTypeError.
  const Array& value(const Tensor& tensor) const;
  void assign(const Tensor& variable, const Array& value);
  Array& mutable_value(const Tensor& tensor);  ///< for programs and optimizers; keep the shape
  std::vector<Tensor> variables() const;
  std::vector<Tensor> trainable_variables() const;
  std::vector<Tensor> placeholders() const;

  /// Node names are "<scope>/<base>", made unique with a suffix "_1", "_2", ... like Keras.
  class NameScope {
   public:
    NameScope(Graph& graph, const std::string& name);
    ~NameScope();
    NameScope(const NameScope&) = delete;
    NameScope& operator=(const NameScope&) = delete;

   private:
    Graph& graph_;
  };
  std::string unique_name(const std::string& base);

  /// How many times `key` was counted in this graph before this call (0, 1, 2, ...). Layers count their
  /// calls with it, so the k-th call of a layer draws the same randomness in any graph built the same
  /// way, whatever else the graph holds.
  std::uint64_t count(const std::string& key);

 private:
  Tensor push(Node node);
  std::string scoped(const std::string& base) const;

  std::deque<Node> nodes_;  ///< a deque: references to nodes stay valid while the graph grows
  std::vector<Array> values_;
  std::vector<std::string> scopes_;
  std::set<std::string> used_names_;
  std::map<std::string, int> next_suffix_;
  std::map<std::string, std::uint64_t> counts_;
  std::map<const void*, NodeId> variable_by_storage_;
};

}  // namespace kiln
