#include <kiln/core/op.hpp>

#include <algorithm>
#include <cctype>

#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>

namespace kiln {

// ---- contexts ----------------------------------------------------------------------------------------

void InferContext::fail(const std::string& what) const {
  std::string shapes;
  for (int i = 0; i < num_inputs(); ++i) shapes += (i ? ", " : "") + input_shape(i).to_string();
  fail_with(what + ": " + shapes);
}

void InferContext::fail_with(const std::string& what_and_shapes) const {
  throw ShapeError(op_.short_name() + " '" + node_name_ + "': " + what_and_shapes);
}

const Attributes& KernelContext::attributes() const { return node->attributes; }
std::size_t KernelContext::output_size() const { return static_cast<std::size_t>(output_shape->num_elements()); }

Tensor GradContext::input(int index) const {
  return graph_.tensor(graph_.node(node_).inputs[static_cast<std::size_t>(index)]);
}
Tensor GradContext::output() const { return graph_.tensor(node_); }
const Attributes& GradContext::attributes() const { return graph_.node(node_).attributes; }
const Node& GradContext::node() const { return graph_.node(node_); }
int GradContext::num_inputs() const { return static_cast<int>(graph_.node(node_).inputs.size()); }

// ---- OpDef ---------------------------------------------------------------------------------------------

OpDef::OpDef(std::string name) : name_(std::move(name)), short_name_(to_snake_case(class_part(name_))) {}

OpDef& OpDef::inputs(int min_count, int max_count) {
  min_inputs_ = min_count;
  max_inputs_ = max_count;
  return *this;
}
OpDef& OpDef::attributes(std::vector<std::string> names) {
  attribute_names_ = std::move(names);
  return *this;
}
OpDef& OpDef::infer_shape(ShapeFn fn) {
  shape_fn_ = fn;
  return *this;
}
OpDef& OpDef::forward(KernelFn float32_kernel, KernelFn float64_kernel) {
  kernel_f32_ = float32_kernel;
  kernel_f64_ = float64_kernel;
  return *this;
}
OpDef& OpDef::backward(BackwardFn fn) {
  backward_fn_ = fn;
  return *this;
}
OpDef& OpDef::not_differentiable(std::string reason) {
  not_differentiable_reason_ = std::move(reason);
  return *this;
}
OpDef& OpDef::non_differentiable_inputs(std::vector<int> indices, std::string reason) {
  non_differentiable_inputs_ = std::move(indices);
  non_differentiable_inputs_reason_ = std::move(reason);
  return *this;
}
OpDef& OpDef::input_dtype(int index, DType dtype) {
  for (auto& entry : fixed_input_dtypes_)
    if (entry.first == index) {
      entry.second = dtype;
      return *this;
    }
  fixed_input_dtypes_.emplace_back(index, dtype);
  return *this;
}
const DType* OpDef::fixed_input_dtype(int index) const {
  for (const auto& entry : fixed_input_dtypes_)
    if (entry.first == index) return &entry.second;
  return nullptr;
}
OpDef& OpDef::sharing(Sharing mode) {
  sharing_ = mode;
  return *this;
}
OpDef& OpDef::workspace(WorkspaceFn fn) {
  workspace_fn_ = fn;
  return *this;
}

OpDef& OpDef::prepare(PrepareFn fn) {
  prepare_fn_ = fn;
  return *this;
}

OpDef& OpDef::alias_offset(AliasOffsetFn fn) {
  alias_offset_fn_ = fn;
  return *this;
}

OpDef& OpDef::display_name(std::string name) {
  short_name_ = std::move(name);
  return *this;
}

bool OpDef::accepts_attribute(const std::string& name) const {
  return std::find(attribute_names_.begin(), attribute_names_.end(), name) != attribute_names_.end();
}

bool OpDef::input_is_differentiable(int index) const {
  if (const DType* fixed = fixed_input_dtype(index); fixed != nullptr && !is_floating(*fixed)) return false;
  return std::find(non_differentiable_inputs_.begin(), non_differentiable_inputs_.end(), index) ==
         non_differentiable_inputs_.end();
}

// ---- registry ------------------------------------------------------------------------------------------

Registry<OpDef>& op_registry() {
  static Registry<OpDef> registry("op", [](const std::string& key, const OpDef& op) -> std::string {
    if (op.shape_fn() == nullptr) return "op " + key + " has no shape rule";
    if (!op.has_kernel()) return "op " + key + " has no float32 and float64 kernels";
    return "";
  });
  return registry;
}

namespace detail {
bool register_op(OpDef op) {
  const std::string name = op.name();
  return op_registry().add(name, std::move(op));
}
}  // namespace detail

}  // namespace kiln
