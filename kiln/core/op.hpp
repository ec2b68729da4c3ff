#pragma once
// OpDef: one op's shape rule, forward kernels and backward rule, registered by name. An op family's
// .cpp file in ops/ defines all three side by side (the kiln version of a derivatives.yaml row).
#include <cstddef>
#include <cstdint>
#include <string>
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
  InferContext(const OpDef& op, const std::string& node_name, const std::vector<Shape>& input_shapes,
               const Attributes& attributes)
      : op_(op), node_name_(node_name), input_shapes_(input_shapes), attributes_(attributes) {}

  const Shape& input_shape(int index) const { return input_shapes_[static_cast<std::size_t>(index)]; }
  int num_inputs() const { return static_cast<int>(input_shapes_.size()); }
  const Attributes& attributes() const { return attributes_; }
  const std::string& node_name() const { return node_name_; }
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
  const Node* node = nullptr;
  const void* const* inputs = nullptr;
  const Shape* const* input_shapes = nullptr;
  int num_inputs = 0;
  void* output = nullptr;
  const Shape* output_shape = nullptr;
  void* workspace = nullptr;  ///< scratch for this kernel only, sized by OpDef::workspace
  std::size_t workspace_bytes = 0;
  std::uint64_t run = 0;  ///< the Program's run count: seeds per-run randomness (dropout)

  template <class T>
  const T* in(int index) const {
    return static_cast<const T*>(inputs[index]);
  }
  template <class T>
  T* out() const {
    return static_cast<T*>(output);
  }
  template <class T>
  T* scratch() const {
    return static_cast<T*>(workspace);
  }
  const Shape& input_shape(int index) const { return *input_shapes[index]; }
  const Attributes& attributes() const;
  std::size_t output_size() const;  ///< number of elements
};

/// What a backward rule sees. It returns one gradient per input: a graph Tensor, or an empty Tensor
/// for an input that needs none. The autodiff engine sums over broadcast axes and accumulates fan-out.
class GradContext {
 public:
  GradContext(Graph& graph, NodeId node, Tensor output_grad, std::vector<bool> needs_grad)
      : graph_(graph), node_(node), output_grad_(output_grad), needs_grad_(std::move(needs_grad)) {}

  Tensor input(int index) const;
  Tensor output() const;
  Tensor output_grad() const { return output_grad_; }
  bool needs_grad(int index) const { return needs_grad_[static_cast<std::size_t>(index)]; }
  const Attributes& attributes() const;
  const Node& node() const;
  int num_inputs() const;

 private:
  Graph& graph_;
  NodeId node_;
  Tensor output_grad_;
  std::vector<bool> needs_grad_;
};

using ShapeFn = Shape (*)(const InferContext&);
using KernelFn = void (*)(const KernelContext&);
using BackwardFn = std::vector<Tensor> (*)(const GradContext&);
/// Bytes of scratch a kernel needs, from the concrete input shapes (0: none).
using WorkspaceFn = std::size_t (*)(const std::vector<Shape>& input_shapes, const Shape& output_shape,
                                    const Attributes& attributes, DType dtype);

/// How an op's output may share memory with its first input.
enum class Sharing {
  none,     // the output gets its own buffer
  inplace,  // elementwise: may overwrite input 0 when that buffer has no later reader and the sizes match
  alias,    // the output *is* input 0's bytes with another shape (reshape family): no kernel runs
};

class OpDef {
 public:
  explicit OpDef(std::string name);

  /// Builder: OpDef("kiln>MatMul").inputs(2).infer_shape(f).forward(k32, k64).backward(b)
  OpDef& inputs(int count) { return inputs(count, count); }
  OpDef& inputs(int min_count, int max_count);
  OpDef& attributes(std::vector<std::string> names);
  OpDef& infer_shape(ShapeFn fn);
  OpDef& forward(KernelFn float32_kernel, KernelFn float64_kernel);
  OpDef& backward(BackwardFn fn);
  /// No gradient through this op at all; `reason` is shown when one is asked through it.
  OpDef& not_differentiable(std::string reason);
  /// Inputs that carry no gradient by their nature (indices, masks, labels); gradients stop there.
  OpDef& non_differentiable_inputs(std::vector<int> indices, std::string reason);
  OpDef& sharing(Sharing mode);
  OpDef& workspace(WorkspaceFn fn);
  /// How messages and default node names spell the op when snake_case of its name reads badly
  /// ("kiln>MatMul" is "matmul", not "mat_mul").
  OpDef& display_name(std::string name);

  const std::string& name() const { return name_; }
  /// The part after "Package>", lower-cased with underscores: "kiln>LogSoftmax" -> "log_softmax".
  const std::string& short_name() const { return short_name_; }
  int min_inputs() const { return min_inputs_; }
  int max_inputs() const { return max_inputs_; }
  bool accepts_attribute(const std::string& name) const;
  const std::vector<std::string>& attribute_names() const { return attribute_names_; }
  ShapeFn shape_fn() const { return shape_fn_; }
  KernelFn kernel(DType dtype) const { return dtype == DType::float32 ? kernel_f32_ : kernel_f64_; }
  bool has_kernel() const { return kernel_f32_ != nullptr && kernel_f64_ != nullptr; }
  bool has_backward() const { return backward_fn_ != nullptr; }
  BackwardFn backward_fn() const { return backward_fn_; }
  const std::string& not_differentiable_reason() const { return not_differentiable_reason_; }
  bool input_is_differentiable(int index) const;
  const std::string& non_differentiable_inputs_reason() const { return non_differentiable_inputs_reason_; }
  Sharing sharing() const { return sharing_; }
  WorkspaceFn workspace_fn() const { return workspace_fn_; }

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
  std::string non_differentiable_inputs_reason_;
  Sharing sharing_ = Sharing::none;
  WorkspaceFn workspace_fn_ = nullptr;
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
