#include <kiln/core/program.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/op.hpp>
#include <kiln/core/planner.hpp>

namespace kiln {

namespace {
void check_update(const Graph& graph, const Update& update) {
  if (!update.variable.valid() || !update.value.valid() || &update.variable.graph() != &graph ||
      &update.value.graph() != &graph)
    throw Error("Program: an update names a tensor of another graph, or an empty one");
  const Node& variable = update.variable.node();
  if (variable.kind != NodeKind::variable)
    throw Error("Program: updates assign to variables, but " + variable.describe() + " is not one");
  const std::string what = "Program: cannot update " + variable.describe() + " " + variable.shape.to_string() + " " +
                           dtype_name(variable.dtype) + " with " + update.value.node().describe() + " " +
                           update.value.shape().to_string() + " " + dtype_name(update.value.dtype());
  if (update.value.dtype() != variable.dtype) throw DTypeError(what);  // as feed and Graph::assign say it
  if (update.value.shape() != variable.shape) throw ShapeError(what);
}
}  // namespace

Program::Program(Graph& graph, std::vector<Tensor> fetches, std::vector<Update> updates)
    : graph_(&graph),
      fetches_(std::move(fetches)),
      updates_(std::move(updates)),
      running_(std::make_unique<std::atomic<bool>>(false)) {
  std::vector<NodeId> roots;
  for (const Tensor& fetch : fetches_) {
    if (!fetch.valid() || &fetch.graph() != graph_)
      throw Error("Program: a fetch belongs to another graph, or is empty");
    roots.push_back(fetch.id());
  }
  for (const Update& update : updates_) {
    check_update(graph, update);
    roots.push_back(update.value.id());
    roots.push_back(update.variable.id());
  }
  needed_ = detail::needed_nodes(graph, roots);
  for (NodeId id : needed_)
    if (graph.node(id).kind == NodeKind::placeholder) placeholders_.push_back(id);
  fed_.resize(placeholders_.size());
  std::size_t unknown_dims = 0;
  for (NodeId id : placeholders_)
    for (std::int64_t dim : graph.node(id).shape.dims()) unknown_dims += dim == Shape::unknown;
  key_.reserve(unknown_dims);
}

Program::~Program() = default;
Program::Program(Program&&) noexcept = default;
Program& Program::operator=(Program&&) noexcept = default;

void Program::feed(const Tensor& placeholder, const Array& value) {
  if (!placeholder.valid() || &placeholder.graph() != graph_) throw Error("Program::feed: a tensor of another graph");
  const Node& node = placeholder.node();
  if (node.kind != NodeKind::placeholder) throw Error("Program::feed: " + node.describe() + " is not a placeholder");
  if (value.dtype() != node.dtype)
    throw DTypeError("Program::feed: " + node.describe() + " takes " + dtype_name(node.dtype) + ", got " +
                     dtype_name(value.dtype()) + " data of shape " + value.shape().to_string());
  if (!node.shape.accepts(value.shape()))
    throw ShapeError("Program::feed: " + node.describe() + " of shape " + node.shape.to_string() +
                     " cannot take data of shape " + value.shape().to_string());
  for (std::size_t i = 0; i < placeholders_.size(); ++i)
    if (placeholders_[i] == node.id) fed_[i] = value;
}

// The fed sizes of every unknown placeholder dimension, into key_ (its capacity was reserved, so this does
// not allocate); returns the batch, the size of the unknown axes 0, which must agree. Other unknown axes
// (a sequence's length) may differ between placeholders: the shape rules check them when planning.
std::int64_t Program::read_fed_sizes() {
  key_.clear();
  std::int64_t batch = -1;
  NodeId first = -1;
  for (std::size_t i = 0; i < placeholders_.size(); ++i) {
    const Node& node = graph_->node(placeholders_[i]);
    if (fed_[i].empty()) throw ValueError("Program::run: " + node.describe() + " was not fed");
    for (int axis = 0; axis < node.shape.rank(); ++axis) {
      if (node.shape[axis] != Shape::unknown) continue;
      const std::int64_t size = fed_[i].shape()[axis];
      if (size == 0)
        throw ValueError("Program::run: " + node.describe() + " was fed an empty " +
                         (axis == 0 ? "batch " : "dimension ") + fed_[i].shape().to_string());
      key_.push_back(size);
      if (axis != 0) continue;
      if (batch >= 0 && size != batch)
        throw ValueError("Program::run: batch sizes disagree: " + graph_->node(first).describe() + " has " +
                         std::to_string(batch) + ", " + node.describe() + " has " + std::to_string(size));
      batch = size;
      first = node.id;
    }
  }
  return batch;
}

namespace {
// Plans kept per Program: predict with many row counts makes a plan per tail size, and batches of
// sequences a plan per length, which would otherwise pile up for as long as the program lives.
constexpr std::size_t kMaxPlans = 16;

// Marks a Program as running for the length of one run.
class RunningFlag {
 public:
  explicit RunningFlag(std::atomic<bool>& flag) : flag_(flag) {
    if (flag_.exchange(true, std::memory_order_acquire))
      throw LayerStateError(
          "Program::run: this Program is already running on another thread; give each thread "
          "a Program of its own (several Programs over one graph may run at once)");
  }
  ~RunningFlag() { flag_.store(false, std::memory_order_release); }
  RunningFlag(const RunningFlag&) = delete;
  RunningFlag& operator=(const RunningFlag&) = delete;

 private:
  std::atomic<bool>& flag_;
};
}  // namespace

bool Program::has_plan(std::int64_t batch_size) const {
  return std::any_of(plans_.begin(), plans_.end(), [&](const auto& plan) { return plan->batch_size == batch_size; });
}

// The plan for the fed shapes (key_), moved to the back as the most recently used.
detail::Plan& Program::plan_for(std::int64_t batch_size) {
  const auto found = std::find_if(plans_.begin(), plans_.end(), [&](const auto& plan) { return plan->key == key_; });
  if (found != plans_.end()) {
    std::rotate(found, found + 1, plans_.end());
    return *plans_.back();
  }
  detail::FedShapes fed;
  fed.placeholders = placeholders_;
  for (const Array& value : fed_) fed.shapes.push_back(value.shape());
  fed.batch_size = batch_size;
  fed.key = key_;
  try {
    plans_.push_back(detail::make_plan(*graph_, needed_, fetches_, updates_, fed));
  } catch (const ShapeError& error) {
    // The graph accepted unknown dimensions; these sizes meet an op that refuses them (two sequences of
    // different lengths added): say which data did it.
    std::string fed_shapes;
    for (std::size_t i = 0; i < placeholders_.size(); ++i)
      fed_shapes += (i ? ", " : "") + graph_->node(placeholders_[i]).describe() + " " + fed.shapes[i].to_string();
    throw ShapeError(std::string(error.what()) + " (planning for the fed shapes: " + fed_shapes + ")");
  }
  if (plans_.size() > kMaxPlans) {
    if (plans_.front().get() == last_) last_ = nullptr;
    plans_.erase(plans_.begin());
  }
  return *plans_.back();
}

void Program::run() {
  const RunningFlag running(*running_);
  detail::Plan& plan = plan_for(read_fed_sizes());
  for (std::size_t i = 0; i < placeholders_.size(); ++i)
    plan.data[static_cast<std::size_t>(placeholders_[i])] = const_cast<void*>(fed_[i].raw());
  detail::execute(plan, *graph_, run_count_, batch_offset_, hook_.get());
  for (const Update& update : updates_) {
    Array& target = graph_->mutable_value(update.variable);
    // memmove: the new value may be a view of the variable itself; or it is the variable (written in place).
    const void* value = plan.data[static_cast<std::size_t>(update.value.id())];
    if (value != target.raw()) std::memmove(target.raw(), value, target.nbytes());
  }
  last_ = &plan;
  ++run_count_;
}

void Program::set_batch_offset(std::int64_t rows) {
  if (rows < 0) throw ValueError("Program::set_batch_offset: the offset must not be negative, got " + std::to_string(rows));
  batch_offset_ = rows;
}

void Program::on_ready(const std::vector<Tensor>& tensors, std::function<void(std::size_t, const void*)> ready) {
  for (const Tensor& tensor : tensors) fetch_slot(tensor);
  for (const auto& plan : plans_) plan->ready_made = false;
  if (tensors.empty()) {
    hook_.reset();
    return;
  }
  auto hook = std::make_unique<detail::ReadyHook>();
  for (const Tensor& tensor : tensors) hook->nodes.push_back(tensor.id());
  hook->ready = std::move(ready);
  hook_ = std::move(hook);
}

const detail::Plan& Program::last_plan() const {
  if (last_ == nullptr) throw Error("Program: nothing has run yet");
  return *last_;
}

std::size_t Program::fetch_slot(const Tensor& tensor) const {
  for (std::size_t i = 0; i < fetches_.size(); ++i)
    if (fetches_[i] == tensor) return i;
  throw Error("Program: " + (tensor.valid() ? tensor.node().describe() : std::string("an empty tensor")) +
              " is not one of this program's fetches");
}

Array Program::view(const Tensor& tensor) const {
  fetch_slot(tensor);
  const detail::Plan& plan = last_plan();
  const auto id = static_cast<std::size_t>(tensor.id());
  return Array::view(plan.data[id], plan.shapes[id], tensor.dtype());
}

Array Program::fetch(const Tensor& tensor) const { return view(tensor).copy(); }

const Shape& Program::planned_shape(const Tensor& tensor) const {
  fetch_slot(tensor);
  return last_plan().shapes[static_cast<std::size_t>(tensor.id())];
}

void Program::fetch_into(const Tensor& tensor, Array& out) const {
  fetch_slot(tensor);
  const detail::Plan& plan = last_plan();
  const auto id = static_cast<std::size_t>(tensor.id());
  const Shape& shape = plan.shapes[id];
  if (out.dtype() != tensor.dtype())
    throw DTypeError("Program::fetch_into: " + tensor.node().describe() + " is " + dtype_name(tensor.dtype()) +
                     ", the array " + dtype_name(out.dtype()));
  if (out.shape() != shape || out.empty())
    throw ShapeError("Program::fetch_into: " + tensor.node().describe() + " has shape " + shape.to_string() +
                     ", the array " + out.shape().to_string());
  if (out.nbytes() > 0) std::memmove(out.raw(), plan.data[id], out.nbytes());
}

double Program::scalar(const Tensor& tensor) const {
  const Array value = view(tensor);
  if (value.size() != 1)
    throw ShapeError("Program::scalar: " + tensor.node().describe() + " has shape " + value.shape().to_string());
  return value.flat(0);
}

PlanStats Program::stats() const { return last_plan().stats; }

}  // namespace kiln
