#include <kiln/core/graph.hpp>

#include <cstring>

#include <kiln/core/error.hpp>
#include <kiln/core/op.hpp>

namespace kiln {

std::string Node::describe() const {
  switch (kind) {
    case NodeKind::placeholder:
      return "placeholder '" + name + "'";
    case NodeKind::variable:
      return "variable '" + name + "'";
    case NodeKind::constant:
      return "constant '" + name + "'";
    case NodeKind::op:
      break;
  }
  return op->short_name() + " '" + name + "'";
}

// ---- Tensor (declared in core/tensor.hpp; defined here, where Graph is complete) -------------------

Graph& Tensor::graph() const {
  if (graph_ == nullptr) throw Error("an empty Tensor handle was used (a default-constructed Tensor)");
  return *graph_;
}
const Node& Tensor::node() const { return graph().node(id_); }
const Shape& Tensor::shape() const { return node().shape; }
DType Tensor::dtype() const { return node().dtype; }
const std::string& Tensor::name() const { return node().name; }
int Tensor::rank() const { return shape().rank(); }

// ---- names -------------------------------------------------------------------------------------------

Graph::NameScope::NameScope(Graph& graph, const std::string& name) : graph_(graph) { graph_.scopes_.push_back(name); }
Graph::NameScope::~NameScope() { graph_.scopes_.pop_back(); }

Graph::ProductPrecision::ProductPrecision(Graph& graph, bool bfloat16)
    : graph_(graph), previous_(graph.bfloat16_products_) {
  graph_.bfloat16_products_ = bfloat16;
}
Graph::ProductPrecision::~ProductPrecision() { graph_.bfloat16_products_ = previous_; }

std::string Graph::scoped(const std::string& base) const {
  std::string result;
  for (const std::string& scope : scopes_) result += scope + "/";
  return result + base;
}

std::string Graph::unique_name(const std::string& base) {
  std::string name = base;
  while (used_names_.count(name) != 0) name = base + "_" + std::to_string(++next_suffix_[base]);
  used_names_.insert(name);
  return name;
}

std::uint64_t Graph::count(const std::string& key) { return counts_[key]++; }

// ---- nodes -------------------------------------------------------------------------------------------

const Node& Graph::node(NodeId id) const {
  if (id < 0 || static_cast<std::size_t>(id) >= nodes_.size())
    throw Error("node id " + std::to_string(id) + " is not in this graph");
  return nodes_[static_cast<std::size_t>(id)];
}

Tensor Graph::push(Node node) {
  if (node.shape.rank() > Shape::max_rank)
    throw ShapeError(node.describe() + ": rank " + std::to_string(node.shape.rank()) + " exceeds kiln's maximum of " +
                     std::to_string(Shape::max_rank) + ", shape " + node.shape.to_string());
  node.id = static_cast<NodeId>(nodes_.size());
  nodes_.push_back(std::move(node));
  return Tensor(this, nodes_.back().id);
}

Tensor Graph::placeholder(const Shape& shape, DType dtype, const std::string& name) {
  for (std::int64_t d : shape.dims())
    if (d < 0 && d != Shape::unknown)
      throw ShapeError("placeholder '" + name + "': negative dimension in " + shape.to_string());
  Node node;
  node.kind = NodeKind::placeholder;
  node.shape = shape;
  node.dtype = dtype;
  node.name = unique_name(scoped(name));
  return push(std::move(node));
}

Tensor Graph::variable(const std::string& name, Array initial_value, bool trainable) {
  if (initial_value.empty()) throw ValueError("variable '" + name + "': the initial value is an empty Array");
  if (trainable && !is_floating(initial_value.dtype()))  // no gradient reaches quantized weights
    throw DTypeError("variable '" + name + "': an " + dtype_name(initial_value.dtype()) + " variable cannot be trainable");
  Node node;
  node.kind = NodeKind::variable;
  node.shape = initial_value.shape();
  node.dtype = initial_value.dtype();
  node.name = unique_name(scoped(name));
  node.trainable = trainable;
  node.value_index = static_cast<std::int32_t>(values_.size());
  const void* storage = initial_value.raw();
  values_.push_back(std::move(initial_value));
  const Tensor result = push(std::move(node));
  variable_by_storage_.emplace(storage, result.id());
  return result;
}

Tensor Graph::find_variable(const Array& value) {
  const auto found = variable_by_storage_.find(value.raw());
  if (found == variable_by_storage_.end()) return Tensor();
  const Node& n = node(found->second);
  // A reshaped view shares the storage but is not the same variable.
  if (n.shape != value.shape() || n.dtype != value.dtype()) return Tensor();
  return Tensor(this, found->second);
}

Tensor Graph::constant(Array value, const std::string& name) {
  if (value.empty()) throw ValueError("constant '" + name + "': the value is an empty Array");
  Node node;
  node.kind = NodeKind::constant;
  node.shape = value.shape();
  node.dtype = value.dtype();
  node.name = unique_name(scoped(name));
  node.value_index = static_cast<std::int32_t>(values_.size());
  values_.push_back(std::move(value));
  return push(std::move(node));
}

Tensor Graph::scalar(double value, DType dtype, const std::string& name) {
  return constant(Array::full(Shape{}, value, dtype), name);
}

namespace {
void check_inputs(const OpDef& op, const std::string& node_name, const std::vector<Tensor>& inputs,
                  const Graph& graph) {
  const int count = static_cast<int>(inputs.size());
  if (count < op.min_inputs() || count > op.max_inputs()) {
    const std::string expected = op.min_inputs() == op.max_inputs()
                                     ? std::to_string(op.min_inputs())
                                     : std::to_string(op.min_inputs()) + " to " + std::to_string(op.max_inputs());
    throw ConfigError(op.short_name() + " '" + node_name + "': takes " + expected + " inputs, got " +
                      std::to_string(count));
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].valid() || &inputs[i].graph() != &graph)
      throw Error(op.short_name() + " '" + node_name + "': input " + std::to_string(i) +
                  (inputs[i].valid() ? " belongs to another graph" : " is an empty Tensor"));
  }
  const auto listing = [&] {
    std::string text;
    for (std::size_t j = 0; j < inputs.size(); ++j)
      text += (j ? ", " : "") + std::string(dtype_name(inputs[j].dtype())) + inputs[j].shape().to_string();
    return text;
  };
  // Inputs whose dtype the op fixes (an int8 kernel) are checked against it; the others must share one floating
  // dtype, the node's.
  const DType* node_dtype = nullptr;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (const DType* fixed = op.fixed_input_dtype(static_cast<int>(i))) {
      if (inputs[i].dtype() != *fixed)
        throw DTypeError(op.short_name() + " '" + node_name + "': input " + std::to_string(i) + " must be " +
                         dtype_name(*fixed) + ", got " + listing());
      continue;
    }
    if (node_dtype == nullptr) {
      if (!is_floating(inputs[i].dtype()))
        throw DTypeError(op.short_name() + " '" + node_name + "': computes in float32 or float64, got " + listing());
      node_dtype = &inputs[i].node().dtype;
    } else if (inputs[i].dtype() != *node_dtype) {
      throw DTypeError(op.short_name() + " '" + node_name + "': inputs have different dtypes: " + listing());
    }
  }
}

// The node's dtype: its first input's whose dtype the op does not fix (float32 for an op without such inputs).
DType node_dtype_of(const OpDef& op, const std::vector<Tensor>& inputs) {
  for (std::size_t i = 0; i < inputs.size(); ++i)
    if (op.fixed_input_dtype(static_cast<int>(i)) == nullptr) return inputs[i].dtype();
  return DType::float32;
}

void check_attributes(const OpDef& op, const std::string& node_name, const Attributes& attributes) {
  for (const auto& item : attributes.items()) {
    if (op.accepts_attribute(item.first)) continue;
    std::string accepted;
    for (const std::string& name : op.attribute_names()) accepted += (accepted.empty() ? "" : ", ") + name;
    throw ConfigError(op.short_name() + " '" + node_name + "': unknown attribute '" + item.first +
                      "' (accepted: " + (accepted.empty() ? std::string("none") : accepted) + ")");
  }
}
}  // namespace

Tensor Graph::add_op(const std::string& op_name, const std::vector<Tensor>& inputs, Attributes attributes,
                     const std::string& name) {
  const OpDef& op = op_registry().get(op_name);
  const std::string node_name = scoped(name.empty() ? op.short_name() : name);
  check_inputs(op, node_name, inputs, *this);
  check_attributes(op, node_name, attributes);

  std::vector<Shape> input_shapes;
  input_shapes.reserve(inputs.size());
  for (const Tensor& input : inputs) input_shapes.push_back(input.shape());

  Node node;
  node.kind = NodeKind::op;
  node.op = &op;
  node.dtype = node_dtype_of(op, inputs);
  for (const Tensor& input : inputs) node.inputs.push_back(input.id());
  node.shape = op.shape_fn()(InferContext(op, node_name, input_shapes, attributes));
  node.attributes = std::move(attributes);
  node.name = unique_name(node_name);
  return push(std::move(node));
}

// ---- values ------------------------------------------------------------------------------------------

const Array& Graph::value(const Tensor& tensor) const {
  // A node id means nothing in another graph: reading it here would read whichever node has that id.
  if (&tensor.graph() != this)
    throw Error("'" + tensor.name() + "' belongs to another graph: its value cannot be read or set through this one");
  const Node& n = node(tensor.id());
  if (n.value_index < 0) throw Error(n.describe() + " holds no value (only variables and constants do)");
  return values_[static_cast<std::size_t>(n.value_index)];
}

Array& Graph::mutable_value(const Tensor& tensor) { return const_cast<Array&>(value(tensor)); }

void Graph::assign(const Tensor& variable, const Array& value) {
  Array& target = mutable_value(variable);
  const Node& n = node(variable.id());
  if (n.kind != NodeKind::variable) throw Error(n.describe() + ": only a variable can be assigned a new value");
  if (value.shape() != target.shape())
    throw ShapeError(n.describe() + ": cannot assign a value of shape " + value.shape().to_string() +
                     " to a variable of shape " + target.shape().to_string());
  if (value.dtype() != target.dtype())
    throw DTypeError(n.describe() + ": cannot assign a " + dtype_name(value.dtype()) + " value to a " +
                     dtype_name(target.dtype()) + " variable");
  // Copy into the existing storage: programs hold pointers to it.
  std::memcpy(target.raw(), value.raw(), target.nbytes());
}

void Graph::add_loss(const Tensor& loss) {
  if (!loss.valid() || &loss.graph() != this) throw Error("add_loss: the loss must belong to this graph");
  if (loss.rank() != 0)
    throw ShapeError(node(loss.id()).describe() + ": a loss must be a scalar, got shape " + loss.shape().to_string());
  losses_.push_back(loss);
}

void Graph::set_mask(const Tensor& tensor, const Tensor& mask) {
  if (!tensor.valid() || !mask.valid() || &tensor.graph() != this || &mask.graph() != this)
    throw Error("set_mask: the tensor and its mask must belong to this graph");
  const Shape& shape = tensor.shape();
  const Shape& steps = mask.shape();
  auto fits = [](std::int64_t a, std::int64_t b) { return a == b || a == Shape::unknown || b == Shape::unknown; };
  bool ok = steps.rank() >= 1 && steps.rank() < shape.rank() && mask.dtype() == tensor.dtype();
  for (int axis = 0; ok && axis < steps.rank(); ++axis) ok = fits(steps[axis], shape[axis]);
  if (!ok)
    throw ShapeError(node(mask.id()).describe() + ": a mask has its tensor's leading dimensions (batch, steps) "
                     "and dtype; " +
                     node(tensor.id()).describe() + " is " + shape.to_string() + " " + dtype_name(tensor.dtype()) +
                     ", the mask " + steps.to_string() + " " + dtype_name(mask.dtype()));
  masks_[tensor.id()] = mask.id();
}

Tensor Graph::mask_of(const Tensor& tensor) {
  if (!tensor.valid() || &tensor.graph() != this) return Tensor();
  const auto found = masks_.find(tensor.id());
  return found == masks_.end() ? Tensor() : Tensor(this, found->second);
}

void Graph::add_state_update(const Tensor& variable, const Tensor& value) {
  if (!variable.valid() || !value.valid() || &variable.graph() != this || &value.graph() != this)
    throw Error("add_state_update: both tensors must belong to this graph");
  const Node& n = node(variable.id());
  if (n.kind != NodeKind::variable) throw Error(n.describe() + ": only a variable can take a state update");
  if (value.shape() != n.shape)
    throw ShapeError(n.describe() + ": a state update of shape " + value.shape().to_string() +
                     " for a variable of shape " + n.shape.to_string());
  if (value.dtype() != n.dtype)
    throw DTypeError(n.describe() + ": a " + dtype_name(value.dtype()) + " state update for a " + dtype_name(n.dtype) +
                     " variable");
  state_updates_.push_back({variable, value});
}

std::vector<Tensor> Graph::variables() const {
  std::vector<Tensor> result;
  for (const Node& n : nodes_)
    if (n.kind == NodeKind::variable) result.emplace_back(const_cast<Graph*>(this), n.id);
  return result;
}

std::vector<Tensor> Graph::trainable_variables() const {
  std::vector<Tensor> result;
  for (const Node& n : nodes_)
    if (n.kind == NodeKind::variable && n.trainable) result.emplace_back(const_cast<Graph*>(this), n.id);
  return result;
}

std::vector<Tensor> Graph::placeholders() const {
  std::vector<Tensor> result;
  for (const Node& n : nodes_)
    if (n.kind == NodeKind::placeholder) result.emplace_back(const_cast<Graph*>(this), n.id);
  return result;
}

}  // namespace kiln
