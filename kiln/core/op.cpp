#include <kiln/core/op.hpp>

#include <algorithm>
#include <cctype>
#include <deque>

#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>

namespace kiln {

namespace {
// "kiln>LogSoftmax" -> "log_softmax": how messages and node names spell an op.
std::string snake_case_of(const std::string& name) {
  const std::size_t start = name.find('>') == std::string::npos ? 0 : name.find('>') + 1;
  std::string result;
  for (std::size_t i = start; i < name.size(); ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (std::isupper(c)) {
      if (i > start) result += '_';
      result += static_cast<char>(std::tolower(c));
    } else {
      result += static_cast<char>(c);
    }
  }
  return result;
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      const bool same =
          std::tolower(static_cast<unsigned char>(a[i - 1])) == std::tolower(static_cast<unsigned char>(b[j - 1]));
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (same ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}
}  // namespace

std::string did_you_mean(const std::vector<std::string>& names) {
  if (names.empty()) return "";
  std::string text = "; did you mean";
  for (std::size_t i = 0; i < names.size(); ++i) text += (i ? ", '" : " '") + names[i] + "'";
  return text + "?";
}

std::vector<std::string> nearest_names(const std::string& name, const std::vector<std::string>& candidates,
                                       std::size_t count) {
  std::vector<std::pair<std::size_t, std::string>> scored;
  for (const std::string& candidate : candidates) scored.emplace_back(edit_distance(name, candidate), candidate);
  std::sort(scored.begin(), scored.end());
  std::vector<std::string> result;
  for (std::size_t i = 0; i < scored.size() && i < count; ++i) result.push_back(scored[i].second);
  return result;
}

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

OpDef::OpDef(std::string name) : name_(std::move(name)), short_name_(snake_case_of(name_)) {}

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
OpDef& OpDef::sharing(Sharing mode) {
  sharing_ = mode;
  return *this;
}
OpDef& OpDef::workspace(WorkspaceFn fn) {
  workspace_fn_ = fn;
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
  return std::find(non_differentiable_inputs_.begin(), non_differentiable_inputs_.end(), index) ==
         non_differentiable_inputs_.end();
}

// ---- registry ------------------------------------------------------------------------------------------

namespace {
// A deque, so that the OpDef pointers nodes keep stay valid while later libraries register more ops.
std::deque<OpDef>& registered_ops() {
  static std::deque<OpDef> ops;
  return ops;
}
}  // namespace

void OpRegistry::add(OpDef op) {
  if (try_find(op.name()) != nullptr) {
    duplicates_.push_back(op.name());
    return;
  }
  registered_ops().push_back(std::move(op));
}

const OpDef* OpRegistry::try_find(const std::string& name) const {
  for (const OpDef& op : registered_ops())
    if (op.name() == name) return &op;
  return nullptr;
}

const OpDef& OpRegistry::find(const std::string& name) const {
  if (const OpDef* op = try_find(name)) return *op;
  std::vector<std::string> names;
  for (const OpDef& op : registered_ops()) names.push_back(op.name());
  std::string message = "unknown op '" + name + "'";
  const auto nearest = nearest_names(name, names);
  if (!nearest.empty()) {
    message += "; nearest registered: ";
    for (std::size_t i = 0; i < nearest.size(); ++i) message += (i ? ", " : "") + nearest[i];
  }
  throw ConfigError(message);
}

std::vector<const OpDef*> OpRegistry::all() const {
  std::vector<const OpDef*> result;
  for (const OpDef& op : registered_ops()) result.push_back(&op);
  return result;
}

void OpRegistry::check() const {
  if (!duplicates_.empty()) throw ConfigError("op registered twice: " + duplicates_.front());
  for (const OpDef& op : registered_ops()) {
    if (op.shape_fn() == nullptr) throw ConfigError("op " + op.name() + " has no shape rule");
    if (!op.has_kernel()) throw ConfigError("op " + op.name() + " has no float32 and float64 kernels");
  }
}

OpRegistry& op_registry() {
  static OpRegistry registry;
  return registry;
}

}  // namespace kiln
