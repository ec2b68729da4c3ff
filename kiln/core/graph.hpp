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

/// What a graph node is.
enum class NodeKind {
  placeholder,  ///< data fed to each run (Graph::placeholder)
  variable,     ///< a persistent value that runs read and updates write (Graph::variable)
  constant,     ///< a value the graph holds (Graph::constant)
  op            ///< the output of an op, computed by its kernel (Graph::add_op)
};

/// One node of a Graph, as Tensor::node() shows it. Only Graph makes nodes.
struct Node {
  /// Its index in the graph; its inputs always have smaller ones.
  NodeId id = -1;
  /// What the node is.
  NodeKind kind = NodeKind::op;
  const OpDef* op = nullptr;  ///< set for NodeKind::op
  /// The ids of an op node's inputs, in order.
  std::vector<NodeId> inputs;
  /// An op node's attributes.
  Attributes attributes;
  /// The declared shape: a Shape::unknown dimension is fixed per batch size when a Program plans.
  Shape shape;
  /// The element type; an op node's is its inputs' (float32 for an op without inputs).
  DType dtype = DType::float32;
  std::string name;               ///< unique in the graph, e.g. "dense_1/matmul"
  bool trainable = false;         ///< variables only
  std::int32_t value_index = -1;  ///< variables and constants: index into the graph's value store

  /// "matmul 'dense_1/matmul'" for ops, "placeholder 'x'" otherwise: how messages name a node.
  std::string describe() const;
};

/// After each run of a Program, `variable` takes the value `value` had in that run.
struct Update {
  Tensor variable;  ///< a variable node of the program's graph
  Tensor value;     ///< its new value: a tensor of the same graph, shape and dtype
};

/// An append-only list of nodes in topological order, and the values of its variables and constants.
/// Building a node runs its shape rule at once, so a mismatch throws at the line of model code that caused
/// it. A graph is neither copied nor moved: Tensors and Programs point into it, so it must outlive them.
class Graph {
 public:
  Graph() = default;
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  /// Data fed at run time. Unknown dimensions (Shape::unknown) are the batch size.
  Tensor placeholder(const Shape& shape, DType dtype = DType::float32, const std::string& name = "input");
  /// A persistent, named array that steps read and updates write (weights, optimizer slots). An int8 one (quantized
  /// weights) must not be trainable: DTypeError.
  Tensor variable(const std::string& name, Array initial_value, bool trainable = true);
  /// The variable node of this graph that holds `value`'s storage, if there is one: a layer called twice
  /// in one graph reads the same weights, and a layer called in two graphs shares its weights' bytes.
  Tensor find_variable(const Array& value);
  /// A value the graph holds for every run. The graph keeps `value` itself, not a copy. Throws ValueError
  /// for an empty Array. Like every node name, `name` gets the current scope and is made unique.
  Tensor constant(Array value, const std::string& name = "constant");
  /// A rank-0 constant of `dtype`.
  Tensor scalar(double value, DType dtype, const std::string& name = "scalar");

  /// Creates an op node: checks the op's input count, attribute names and dtypes, then runs its shape
  /// rule. Throws ConfigError (unknown op or attribute, wrong input count), DTypeError or ShapeError, and
  /// Error for an empty input or one of another graph.
  Tensor add_op(const std::string& op_name, const std::vector<Tensor>& inputs, Attributes attributes = {},
                const std::string& name = "");

  /// Node `id`; throws Error when the graph has none of that id.
  const Node& node(NodeId id) const;
  /// How many nodes the graph holds; their ids are 0 to num_nodes() - 1.
  std::size_t num_nodes() const { return nodes_.size(); }
  /// A handle to node `id`, without a producer (`id` is not checked).
  Tensor tensor(NodeId id) { return Tensor(this, id); }

  /// The value of a variable or constant node. Replacing it with an array of another shape or dtype
  /// throws ShapeError or DTypeError.
  const Array& value(const Tensor& tensor) const;
  /// Copies `value` into the variable's storage, so Programs already planned read it at their next run.
  /// Throws ShapeError or DTypeError when `value` differs in shape or dtype, and Error for a node that
  /// holds no value.
  void assign(const Tensor& variable, const Array& value);
  Array& mutable_value(const Tensor& tensor);  ///< for programs and optimizers; keep the shape
  /// Records that each run over this graph also assigns `value` to `variable`, as a BatchNormalization's
  /// moving statistics (recorded by training-mode calls only) and a stateful recurrent layer's states are:
  /// training runs state_updates() with the optimizer's updates, after the step's gradients are computed,
  /// and evaluation and predict run them too. Error for a tensor of another graph or a `variable`
  /// that is not one; ShapeError or DTypeError when `value` differs from it in shape or dtype.
  void add_state_update(const Tensor& variable, const Tensor& value);
  /// The updates add_state_update recorded, in order.
  const std::vector<Update>& state_updates() const { return state_updates_; }
  /// Records a () tensor that training adds to the loss (a layer's activity regularization): the trainer
  /// sums losses() into the loss it minimizes and reports. Error for a tensor of another graph, ShapeError
  /// for one that is not a scalar.
  void add_loss(const Tensor& loss);
  /// The losses add_loss recorded, in order.
  const std::vector<Tensor>& losses() const { return losses_; }
  /// Every variable, in creation order.
  std::vector<Tensor> variables() const;
  /// The variables created with `trainable` true, in creation order.
  std::vector<Tensor> trainable_variables() const;
  /// Every placeholder, in creation order.
  std::vector<Tensor> placeholders() const;

  /// Node names are "<scope>/<base>", made unique with a suffix "_1", "_2", ... like Keras.
  class NameScope {
   public:
    /// Prefixes `name/` to the names of the nodes `graph` makes while this scope is alive; scopes nest.
    NameScope(Graph& graph, const std::string& name);
    ~NameScope();
    NameScope(const NameScope&) = delete;
    NameScope& operator=(const NameScope&) = delete;

   private:
    Graph& graph_;
  };
  /// Whether a name scope is open: a layer's call is adding its ops.
  bool in_name_scope() const { return !scopes_.empty(); }

  /// Sets whether the matrix products added while it is alive round their operands to bfloat16 (the sums stay
  /// float32): a layer whose dtype policy computes in bfloat16 (Keras's "bfloat16", "mixed_bfloat16") opens one
  /// around its call, and a product's backward rule around its gradient's products. Scopes nest; the innermost
  /// wins, so a float32 layer inside a bfloat16 one computes in float32.
  class ProductPrecision {
   public:
    ProductPrecision(Graph& graph, bool bfloat16);
    ~ProductPrecision();
    ProductPrecision(const ProductPrecision&) = delete;
    ProductPrecision& operator=(const ProductPrecision&) = delete;

   private:
    Graph& graph_;
    bool previous_;
  };
  /// Whether products added now round their operands to bfloat16 (see ProductPrecision).
  bool bfloat16_products() const { return bfloat16_products_; }

  /// Marks this graph as one a model is written in (kiln::Input makes them): an op that has a Keras
  /// operation (ops::add, ops::slice, ops::get_item, ...) called on its tensors outside any layer's call is
  /// recorded as a call of an operation layer, as Keras records keras.ops calls in a functional model, so
  /// Model(x, ops::add(a, b)) needs no wrapper layer.
  void set_writes_model(bool value) { writes_model_ = value; }
  /// Whether set_writes_model(true) was called.
  bool writes_model() const { return writes_model_; }

  /// Reserves and returns `base`, or `base_1`, `base_2`, ... when it is taken. The current scope is not
  /// applied. Layers take their names ("dense", "dense_1") from it too.
  std::string unique_name(const std::string& base);

  /// Attaches Keras's mask to `tensor` (what Keras keeps as the tensor's _keras_mask): the tensor's leading
  /// dimensions, usually (batch, steps), in its dtype, 0 at padding steps. Layers set it on their outputs
  /// (Layer::compute_mask) and read it from their inputs. Error for tensors of another graph; ShapeError for
  /// a mask of other dimensions or dtype, or of the tensor's whole rank.
  void set_mask(const Tensor& tensor, const Tensor& mask);
  /// The mask attached to `tensor`, or an empty Tensor.
  Tensor mask_of(const Tensor& tensor);

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
  std::vector<Update> state_updates_;
  std::vector<Tensor> losses_;
  std::map<NodeId, NodeId> masks_;
  bool writes_model_ = false;
  bool bfloat16_products_ = false;
};

}  // namespace kiln
