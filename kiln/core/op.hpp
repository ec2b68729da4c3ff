#pragma once
// OpDef: one op's shape rule, forward kernels and backward rule, registered by name. An op family's
// .cpp file in ops/ defines all three side by side (the kiln version of a derivatives.yaml row).
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <kiln/core/attributes.hpp>
#include <kiln/core/dtype.hpp>
#include <kiln/core/names.hpp>
#include <kiln/core/registry.hpp>
#include <kiln/core/shape.hpp>
#include <kiln/core/tensor.hpp>

namespace kiln {

/// What a shape rule sees: the op, the node being created, its input shapes and attributes.
class InferContext {
 public:
  /// Graph::add_op and the planner make one per call of a shape rule. It keeps references to its
  /// arguments, so it is valid only while that call runs.
  InferContext(const OpDef& op, const std::string& node_name, const std::vector<Shape>& input_shapes,
               const Attributes& attributes)
      : op_(op), node_name_(node_name), input_shapes_(input_shapes), attributes_(attributes) {}

  /// The shape of input `index` (not checked against num_inputs()). When the node is created it may hold
  /// Shape::unknown dimensions; when a Program plans a batch size it is concrete.
  const Shape& input_shape(int index) const { return input_shapes_[static_cast<std::size_t>(index)]; }
  /// How many inputs the node has.
  int num_inputs() const { return static_cast<int>(input_shapes_.size()); }
  /// The node's attributes.
  const Attributes& attributes() const { return attributes_; }
  /// The node's name, e.g. "dense_1/matmul", as messages show it.
  const std::string& node_name() const { return node_name_; }
  /// The op whose shape rule runs.
  const OpDef& op() const { return op_; }
  /// Throws ShapeError: "<op> '<node>': <what>: <every input shape>", e.g.
  /// "matmul 'dense_1/matmul': inner dimensions differ: (None, 150, 512) @ (256, 64)".
  [[noreturn]] void fail(const std::string& what) const;
  /// Like fail, but with the shapes written by the caller.
  [[noreturn]] void fail_with(const std::string& what_and_shapes) const;

 private:
  const OpDef& op_;
  const std::string& node_name_;
  const std::vector<Shape>& input_shapes_;
  const Attributes& attributes_;
};

/// What a kernel sees when it runs: raw pointers into the arena (or fed/variable memory) and the
/// concrete shapes of this batch size. Kernels assume the shapes were checked when the node was created.
struct KernelContext {
  /// The node being run: its attributes, dtype and name.
  const Node* node = nullptr;
  /// Each input's data, in the node's dtype; read it with in().
  const void* const* inputs = nullptr;
  /// Each input's concrete shape.
  const Shape* const* input_shapes = nullptr;
  /// How many inputs the node has.
  int num_inputs = 0;
  /// Where the output goes; write it with out(). For a Sharing::inplace op it may be input 0's buffer.
  void* output = nullptr;
  /// The output's concrete shape.
  const Shape* output_shape = nullptr;
  void* workspace = nullptr;  ///< scratch for this kernel only, sized by OpDef::workspace
  /// The size of `workspace` in bytes; 0 when the op asked for none.
  std::size_t workspace_bytes = 0;
  std::uint64_t run = 0;  ///< the Program's run count: seeds per-run randomness (dropout)
  /// The plan's batch (axis 0's fed size), or -1 when no placeholder's axis 0 is unknown.
  std::int64_t batch_rows = -1;
  /// Where this run's rows start in a larger batch split across processes (a distributed fit's shard, see
  /// Program::set_batch_offset); 0 otherwise. Random ops draw as those rows of the whole batch would.
  std::int64_t batch_offset = 0;
  /// How many leading elements of the output anything reads after this kernel (later kernels, a fetch, an
  /// update): the whole output, unless its only readers are parts of it (OpDef::alias_offset) that end sooner,
  /// such as fused attention's output in a plan without its backward. The kernel may leave the elements past it
  /// unwritten. -1 (the whole output) where no planner says otherwise.
  std::int64_t read_output_elements = -1;

  /// Input `index`'s data as T, which must be the node's dtype (not checked).
  template <class T>
  const T* in(int index) const {
    return static_cast<const T*>(inputs[index]);
  }
  /// The output buffer as T, the node's dtype (not checked).
  template <class T>
  T* out() const {
    return static_cast<T*>(output);
  }
  /// The workspace as T; nullptr when the op asked for none.
  template <class T>
  T* scratch() const {
    return static_cast<T*>(workspace);
  }
  /// Input `index`'s concrete shape.
  const Shape& input_shape(int index) const { return *input_shapes[index]; }
  /// The node's attributes.
  const Attributes& attributes() const;
  std::size_t output_size() const;  ///< number of elements
};

/// What a backward rule sees. It returns one gradient per input: a graph Tensor, or an empty Tensor
/// for an input that needs none. The autodiff engine sums over broadcast axes and accumulates fan-out.
class GradContext {
 public:
  /// gradients() makes one per node whose backward rule it calls: node `node` of `graph`, the summed
  /// gradient of its output, and which inputs need a gradient.
  GradContext(Graph& graph, NodeId node, Tensor output_grad, std::vector<bool> needs_grad)
      : graph_(graph), node_(node), output_grad_(output_grad), needs_grad_(std::move(needs_grad)) {}

  /// Input `index` of the forward node, for a gradient expression that uses it.
  Tensor input(int index) const;
  /// The forward node's own output, for rules that reuse it (exp, tanh, softmax).
  Tensor output() const;
  /// The gradient of the loss with respect to the node's output, summed over every consumer; it has the
  /// output's shape.
  Tensor output_grad() const { return output_grad_; }
  /// Whether input `index` needs a gradient: false when no tensor passed to gradients() lies behind it, or
  /// when the op marks it non-differentiable. Return an empty Tensor for such an input.
  bool needs_grad(int index) const { return needs_grad_[static_cast<std::size_t>(index)]; }
  /// The forward node's attributes.
  const Attributes& attributes() const;
  /// The forward node.
  const Node& node() const;
  /// How many inputs the forward node has: the number of gradients the rule returns.
  int num_inputs() const;

 private:
  Graph& graph_;
  NodeId node_;
  Tensor output_grad_;
  std::vector<bool> needs_grad_;
};

/// A shape rule: the output shape from the input shapes and attributes, or InferContext::fail. It runs when
/// a node is created and again, on concrete shapes, each time a Program plans a batch size.
using ShapeFn = Shape (*)(const InferContext&);
/// A forward kernel for one dtype: writes the output from the inputs.
using KernelFn = void (*)(const KernelContext&);
/// A backward rule: one gradient per input (see GradContext).
using BackwardFn = std::vector<Tensor> (*)(const GradContext&);
/// Bytes of scratch a kernel needs, from the concrete input shapes (0: none).
using WorkspaceFn = std::size_t (*)(const std::vector<Shape>& input_shapes, const Shape& output_shape,
                                    const Attributes& attributes, DType dtype);

/// Work a kernel can do once per plan rather than in every run, from the concrete shapes: generating the
/// small-GEMM kernels its products will call (see ops/detail/gemm.hpp). The planner calls it for each node once
/// per plan (each set of fed shapes: batch size, sequence length); a kernel must still work without it.
using PrepareFn = void (*)(const std::vector<Shape>& input_shapes, const Shape& output_shape,
                           const Attributes& attributes, DType dtype);

/// Where an alias's output starts in input 0, in elements (OpDef::alias_offset), from the concrete input shapes.
using AliasOffsetFn = std::int64_t (*)(const std::vector<Shape>& input_shapes, const Attributes& attributes);

/// How an op's output may share memory with its first input.
enum class Sharing {
  none,     ///< the output gets its own buffer
  inplace,  ///< elementwise: may overwrite input 0 when that buffer has no later reader and the sizes match
  alias,    ///< the output *is* input 0's bytes with another shape (reshape family; a part, with alias_offset):
            ///< no kernel runs
};

/// One op: its input count, accepted attributes, shape rule, forward kernels, backward rule and memory
/// sharing, under its registry key. Build one with the chained setters and register it with
/// KILN_REGISTER_OP; Graph::add_op then makes nodes of it by name.
class OpDef {
 public:
  /// An op named by its key "Package>Name" ("kiln>MatMul"), taking one input and no attributes.
  explicit OpDef(std::string name);

  /// Exactly `count` inputs.
  /// Builder: OpDef("kiln>MatMul").inputs(2).infer_shape(f).forward(k32, k64).backward(b)
  OpDef& inputs(int count) { return inputs(count, count); }
  /// From `min_count` to `max_count` inputs; Graph::add_op throws ConfigError for another count.
  OpDef& inputs(int min_count, int max_count);
  /// The attribute names a node may set; Graph::add_op throws ConfigError for any other.
  OpDef& attributes(std::vector<std::string> names);
  /// The shape rule. Every op needs one: op_registry().check() reports an op without.
  OpDef& infer_shape(ShapeFn fn);
  /// The forward kernels, one per dtype. Every op needs both: op_registry().check() reports a missing one.
  OpDef& forward(KernelFn float32_kernel, KernelFn float64_kernel);
  /// The gradient rule. Without one, a gradient asked through the op throws NotDifferentiable.
  OpDef& backward(BackwardFn fn);
  /// No gradient through this op at all; `reason` is shown when one is asked through it.
  OpDef& not_differentiable(std::string reason);
  /// Inputs that carry no gradient by their nature (indices, masks, labels); gradients stop there.
  OpDef& non_differentiable_inputs(std::vector<int> indices, std::string reason);
  /// Input `index` has this dtype whatever the node's (an int8 quantized kernel beside float activations): it is
  /// checked against `dtype`, not against the other inputs, and kernels read it as that type. The node's dtype
  /// is its other inputs'. Such an input carries no gradient unless it is floating and differentiable.
  OpDef& input_dtype(int index, DType dtype);
  /// Whether the output may share memory with input 0; Sharing::none unless set.
  OpDef& sharing(Sharing mode);
  /// Scratch memory for the kernel, placed in the Program's arena like any buffer (not for Sharing::alias).
  OpDef& workspace(WorkspaceFn fn);
  /// Plan-time preparation for the kernels (see PrepareFn); none unless set.
  OpDef& prepare(PrepareFn fn);
  /// For Sharing::alias: the output is input 0's bytes from this element on, not from its start. An op that
  /// computes one flat buffer for several results hands out its parts this way, with no copy (fused attention's
  /// [dq | dk | dv]). The planner refuses an offset that puts the output outside input 0.
  OpDef& alias_offset(AliasOffsetFn fn);
  /// How messages and default node names spell the op when snake_case of its name reads badly
  /// ("kiln>MatMul" is "matmul", not "mat_mul").
  OpDef& display_name(std::string name);

  /// The registry key, "Package>Name".
  const std::string& name() const { return name_; }
  /// The part after "Package>", lower-cased with underscores: "kiln>LogSoftmax" -> "log_softmax".
  const std::string& short_name() const { return short_name_; }
  /// The fewest inputs a node of this op takes.
  int min_inputs() const { return min_inputs_; }
  /// The most inputs a node of this op takes.
  int max_inputs() const { return max_inputs_; }
  /// Whether `name` is one of attribute_names().
  bool accepts_attribute(const std::string& name) const;
  /// The attribute names a node may set.
  const std::vector<std::string>& attribute_names() const { return attribute_names_; }
  /// The shape rule, or nullptr.
  ShapeFn shape_fn() const { return shape_fn_; }
  /// The forward kernel for `dtype`, or nullptr (no op computes in int8).
  KernelFn kernel(DType dtype) const {
    return dtype == DType::float32 ? kernel_f32_ : dtype == DType::float64 ? kernel_f64_ : nullptr;
  }
  /// The dtype input `index` must have, when input_dtype() fixed one; else nullptr (the node's dtype).
  const DType* fixed_input_dtype(int index) const;
  /// Whether both forward kernels are set.
  bool has_kernel() const { return kernel_f32_ != nullptr && kernel_f64_ != nullptr; }
  /// Whether the op has a gradient rule.
  bool has_backward() const { return backward_fn_ != nullptr; }
  /// The gradient rule, or nullptr.
  BackwardFn backward_fn() const { return backward_fn_; }
  /// Why the op has no gradient, as given to not_differentiable(); empty when it was not called.
  const std::string& not_differentiable_reason() const { return not_differentiable_reason_; }
  /// False for an input named by non_differentiable_inputs().
  bool input_is_differentiable(int index) const;
  /// Why those inputs carry no gradient, as given to non_differentiable_inputs().
  const std::string& non_differentiable_inputs_reason() const { return non_differentiable_inputs_reason_; }
  /// How the output may share memory with input 0.
  Sharing sharing() const { return sharing_; }
  /// The workspace size function, or nullptr for none.
  WorkspaceFn workspace_fn() const { return workspace_fn_; }
  /// The plan-time preparation, or nullptr for none.
  PrepareFn prepare_fn() const { return prepare_fn_; }
  /// Where an alias's output starts in input 0, or nullptr for its start.
  AliasOffsetFn alias_offset_fn() const { return alias_offset_fn_; }

 private:
  std::string name_;
  std::string short_name_;
  int min_inputs_ = 1;
  int max_inputs_ = 1;
  std::vector<std::string> attribute_names_;
  ShapeFn shape_fn_ = nullptr;
  KernelFn kernel_f32_ = nullptr;
  KernelFn kernel_f64_ = nullptr;
  BackwardFn backward_fn_ = nullptr;
  std::string not_differentiable_reason_;
  std::vector<int> non_differentiable_inputs_;
  std::vector<std::pair<int, DType>> fixed_input_dtypes_;
  std::string non_differentiable_inputs_reason_;
  Sharing sharing_ = Sharing::none;
  WorkspaceFn workspace_fn_ = nullptr;
  PrepareFn prepare_fn_ = nullptr;
  AliasOffsetFn alias_offset_fn_ = nullptr;
};

/// Every op, by its name ("kiln>Softmax"): Graph::add_op looks them up here. check() also reports an op
/// without a shape rule or kernels.
Registry<OpDef>& op_registry();

namespace detail {
bool register_op(OpDef op);
}  // namespace detail

}  // namespace kiln

// Registers an OpDef during static initialization: KILN_REGISTER_OP(OpDef("kiln>Add")...);
#define KILN_REGISTER_OP(definition) KILN_AT_STARTUP(::kiln::detail::register_op(definition))
