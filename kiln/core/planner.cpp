#include <kiln/core/planner.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <new>

#include <kiln/core/error.hpp>
#include <kiln/core/graph.hpp>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace kiln::detail {

namespace {

constexpr std::size_t alignment = 64;
constexpr std::size_t forever = std::numeric_limits<std::size_t>::max();

std::size_t aligned(std::size_t bytes) { return (bytes + alignment - 1) / alignment * alignment; }

std::size_t bytes_of(const Shape& shape, DType dtype) {
  return static_cast<std::size_t>(shape.num_elements()) * dtype_size(dtype);
}

// A span of the arena some buffers share over time: [first, last] are the positions in the node order
// it must live through.
struct Storage {
  std::size_t bytes = 0;
  std::size_t first = 0;
  std::size_t last = 0;
  std::size_t offset = 0;
};

// A placeholder's shape is the fed data's; variables and constants are fully known; an op's output comes
// from its shape rule run on its inputs' concrete shapes.
Shape concrete_shape(const Node& node, const std::vector<Shape>& shapes, const FedShapes& fed) {
  if (node.kind == NodeKind::placeholder) {
    for (std::size_t i = 0; i < fed.placeholders.size(); ++i)
      if (fed.placeholders[i] == node.id) return fed.shapes[i];
    return node.shape;  // not fed: Program::run refuses that before planning
  }
  if (node.kind != NodeKind::op) return node.shape;
  std::vector<Shape> input_shapes;
  for (NodeId input : node.inputs) input_shapes.push_back(shapes[static_cast<std::size_t>(input)]);
  return node.op->shape_fn()(InferContext(*node.op, node.name, input_shapes, node.attributes));
}

// The arena, zeroed. One of 2 MB or more is backed by the kernel's 2 MB pages where it offers them (Linux's
// transparent huge pages, which Debian enables for regions that ask, MADV_HUGEPAGE): a training step walks every
// buffer of its arena, and in 4 KB pages mql5_block's 28 MB needed more translations than the TLB holds; attention
// reads each head's rows 512 bytes apart across them. On 2 MB pages its 1-thread train step took 0.93-0.95 of its
// time (alternating runs of one binary, huge pages on and off); its forward, whose arena stays in cache, was
// unchanged. The arena is then rounded up to whole 2 MB pages: at most 2 MB more, only for arenas that large.
unsigned char* allocate_arena(std::size_t bytes) {
  std::size_t capacity = bytes, boundary = alignment;
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr std::size_t huge_page = std::size_t{2} << 20;
  if (bytes >= huge_page) {
    boundary = huge_page;
    capacity = (bytes + huge_page - 1) / huge_page * huge_page;
  }
#endif
  void* memory = std::aligned_alloc(boundary, capacity);
  if (memory == nullptr) throw std::bad_alloc();
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  if (boundary != alignment) madvise(memory, capacity, MADV_HUGEPAGE);  // (advice: refused, it changes nothing)
#endif
  std::memset(memory, 0, bytes);
  return static_cast<unsigned char*>(memory);
}

// Places every storage at an offset: first fit into the gaps that buffers dead before its first position
// left, so memory is reused as soon as a buffer's last reader has run.
std::size_t place(std::vector<Storage>& storages) {
  std::vector<std::size_t> order(storages.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return storages[a].first < storages[b].first; });
  std::vector<std::size_t> live;  // indices into storages, sorted by offset
  std::size_t arena_end = 0;
  for (std::size_t index : order) {
    Storage& storage = storages[index];
    live.erase(std::remove_if(live.begin(), live.end(),
                              [&](std::size_t other) { return storages[other].last < storage.first; }),
               live.end());
    std::size_t candidate = 0;
    for (std::size_t other : live) {
      if (candidate + storage.bytes <= storages[other].offset) break;
      candidate = std::max(candidate, storages[other].offset + storages[other].bytes);
    }
    storage.offset = candidate;
    arena_end = std::max(arena_end, candidate + storage.bytes);
    live.insert(std::upper_bound(live.begin(), live.end(), index,
                                 [&](std::size_t a, std::size_t b) { return storages[a].offset < storages[b].offset; }),
                index);
  }
  return arena_end;
}

class Planner {
 public:
  Planner(const Graph& graph, const std::vector<NodeId>& needed, const FedShapes& fed)
      : graph_(graph), needed_(needed), fed_(fed) {}

  std::unique_ptr<Plan> run(const std::vector<Tensor>& fetches, const std::vector<Update>& updates);

 private:
  void infer_shapes();
  void find_last_uses(const std::vector<Tensor>& fetches, const std::vector<Update>& updates);
  void assign_storage(Plan& plan);
  bool can_overwrite_input(const Node& node, std::size_t position) const;
  void find_updates(const std::vector<Update>& updates);
  bool writes_updated_variable(const Node& node, std::size_t position) const;
  std::size_t alias_offset(const Node& node) const;
  void find_read_extents(const std::vector<Tensor>& fetches, const std::vector<Update>& updates);
  void build_launches(Plan& plan);
  void prepare_kernels() const;

  const Graph& graph_;
  const std::vector<NodeId>& needed_;
  const FedShapes& fed_;
  std::vector<Shape> shapes_;
  std::vector<std::size_t> last_use_;         // by node id: the position of its last reader
  std::vector<int> storage_of_;               // by node id: index into storages_, -1 for graph-owned memory
  std::vector<std::size_t> offset_of_;        // by node id: where in its storage it starts (a part's alias)
  std::vector<std::size_t> alias_offset_;     // by node id: an alias's offset in bytes into input 0
  std::vector<std::size_t> read_bytes_;       // by node id: how many of its leading bytes anything reads
  std::vector<int> workspace_of_;             // by node id: scratch storage or -1
  std::vector<std::size_t> workspace_bytes_;  // by node id: the bytes its workspace function asked for
  std::vector<Storage> storages_;
  std::vector<NodeId> updated_variable_;  // by node id: the variable an update sets to this node's value, or -1
  std::vector<int> readers_;              // by node id: how many op nodes read it
};

void Planner::infer_shapes() {
  const std::size_t count = static_cast<std::size_t>(needed_.back()) + 1;
  shapes_.assign(count, Shape());
  for (NodeId id : needed_) {
    const Node& node = graph_.node(id);
    shapes_[static_cast<std::size_t>(id)] = concrete_shape(node, shapes_, fed_);
  }
}

void Planner::find_last_uses(const std::vector<Tensor>& fetches, const std::vector<Update>& updates) {
  last_use_.assign(shapes_.size(), 0);
  for (std::size_t position = 0; position < needed_.size(); ++position) {
    const Node& node = graph_.node(needed_[position]);
    last_use_[static_cast<std::size_t>(node.id)] = std::max(last_use_[static_cast<std::size_t>(node.id)], position);
    for (NodeId input : node.inputs) last_use_[static_cast<std::size_t>(input)] = position;
  }
  for (const Tensor& fetch : fetches) last_use_[static_cast<std::size_t>(fetch.id())] = forever;
  for (const Update& update : updates) last_use_[static_cast<std::size_t>(update.value.id())] = forever;
}

// An elementwise op may write over input 0 when nothing reads that buffer after this position, the sizes
// agree, and no other input is a differently shaped view of the same bytes.
bool Planner::can_overwrite_input(const Node& node, std::size_t position) const {
  if (node.op->sharing() != Sharing::inplace || node.inputs.empty()) return false;
  const NodeId first = node.inputs[0];
  const int storage = storage_of_[static_cast<std::size_t>(first)];
  if (storage < 0 || storages_[static_cast<std::size_t>(storage)].last != position) return false;
  if (shapes_[static_cast<std::size_t>(first)] != shapes_[static_cast<std::size_t>(node.id)]) return false;
  for (std::size_t i = 1; i < node.inputs.size(); ++i) {
    const NodeId other = node.inputs[i];
    if (storage_of_[static_cast<std::size_t>(other)] == storage && other != first) return false;
  }
  return true;
}

void Planner::find_updates(const std::vector<Update>& updates) {
  updated_variable_.assign(shapes_.size(), -1);
  readers_.assign(shapes_.size(), 0);
  for (const Update& update : updates)
    if (static_cast<std::size_t>(update.value.id()) < updated_variable_.size())
      updated_variable_[static_cast<std::size_t>(update.value.id())] = update.variable.id();
  for (NodeId id : needed_) {
    const Node& node = graph_.node(id);
    if (node.kind != NodeKind::op) continue;
    for (std::size_t i = 0; i < node.inputs.size(); ++i)
      if (std::find(node.inputs.begin(), node.inputs.begin() + static_cast<std::ptrdiff_t>(i), node.inputs[i]) ==
          node.inputs.begin() + static_cast<std::ptrdiff_t>(i))
        ++readers_[static_cast<std::size_t>(node.inputs[i])];
  }
}

// An in-place op may write straight into the variable at its input 0 when the program updates that variable to
// the op's output and nothing else reads the variable (not another op, not a fetch, not the op's other inputs):
// the variable then holds the new value a little before the run ends, as it would after.
bool Planner::writes_updated_variable(const Node& node, std::size_t position) const {
  if (node.op->sharing() != Sharing::inplace || node.inputs.empty()) return false;
  const NodeId first = node.inputs[0];
  const auto index = static_cast<std::size_t>(first);
  if (graph_.node(first).kind != NodeKind::variable) return false;
  if (updated_variable_[static_cast<std::size_t>(node.id)] != first) return false;
  if (readers_[index] != 1 || last_use_[index] != position) return false;
  if (shapes_[index] != shapes_[static_cast<std::size_t>(node.id)] || graph_.node(first).dtype != node.dtype) return false;
  for (std::size_t i = 1; i < node.inputs.size(); ++i)
    if (node.inputs[i] == first) return false;
  return true;
}

// Where an alias's output starts in input 0, in bytes (OpDef::alias_offset); refused when it would reach past
// input 0's end.
std::size_t Planner::alias_offset(const Node& node) const {
  if (node.op->alias_offset_fn() == nullptr) return 0;
  std::vector<Shape> inputs;
  for (NodeId input : node.inputs) inputs.push_back(shapes_[static_cast<std::size_t>(input)]);
  const std::int64_t offset = node.op->alias_offset_fn()(inputs, node.attributes);
  const Shape& output = shapes_[static_cast<std::size_t>(node.id)];
  if (offset < 0 || offset + output.num_elements() > inputs[0].num_elements())
    throw Error(node.op->name() + " '" + node.name + "': its output " + output.to_string() + " at element " +
                std::to_string(offset) + " of input 0 " + inputs[0].to_string() + " would reach outside it");
  return static_cast<std::size_t>(offset) * dtype_size(node.dtype);
}

void Planner::assign_storage(Plan& plan) {
  storage_of_.assign(shapes_.size(), -1);
  offset_of_.assign(shapes_.size(), 0);
  alias_offset_.assign(shapes_.size(), 0);
  workspace_of_.assign(shapes_.size(), -1);
  workspace_bytes_.assign(shapes_.size(), 0);
  for (std::size_t position = 0; position < needed_.size(); ++position) {
    const Node& node = graph_.node(needed_[position]);
    const auto id = static_cast<std::size_t>(node.id);
    if (node.kind != NodeKind::op) continue;
    int storage = -1;
    const auto first = static_cast<std::size_t>(node.inputs.empty() ? node.id : node.inputs[0]);
    if (node.op->sharing() == Sharing::alias) {
      storage = storage_of_[first];
      alias_offset_[id] = alias_offset(node);
      offset_of_[id] = offset_of_[first] + alias_offset_[id];
      ++plan.stats.num_aliases;
    } else if (writes_updated_variable(node, position)) {
      storage = -1;  // the variable's own memory, set when the plan runs
      plan.written_in_variable.emplace_back(node.id, node.inputs[0]);
      ++plan.stats.num_inplace;
    } else if (can_overwrite_input(node, position)) {
      storage = storage_of_[first];
      offset_of_[id] = offset_of_[first];
      ++plan.stats.num_inplace;
    } else {
      storage = static_cast<int>(storages_.size());
      storages_.push_back(Storage{aligned(bytes_of(shapes_[id], node.dtype)), position, position, 0});
      plan.stats.unplanned_bytes += storages_.back().bytes;
    }
    storage_of_[id] = storage;
    if (storage >= 0) {
      Storage& s = storages_[static_cast<std::size_t>(storage)];
      s.last = std::max(s.last, last_use_[id]);
    }
    if (node.op->workspace_fn() != nullptr && node.op->sharing() != Sharing::alias) {
      std::vector<Shape> inputs;
      for (NodeId input : node.inputs) inputs.push_back(shapes_[static_cast<std::size_t>(input)]);
      const std::size_t bytes = node.op->workspace_fn()(inputs, shapes_[id], node.attributes, node.dtype);
      if (bytes > 0) {
        workspace_of_[id] = static_cast<int>(storages_.size());
        workspace_bytes_[id] = bytes;
        storages_.push_back(Storage{aligned(bytes), position, position, 0});
        plan.stats.unplanned_bytes += storages_.back().bytes;
      }
    }
  }
}

// How much of each output is read: a part (an alias at an offset) reads input 0 only up to where the part ends,
// and what reads the part reads that much of it; every other reader, a fetch and an update read the whole output.
// In reverse order, so a node's readers are counted before it passes its own extent on. A kernel may then skip
// what nobody reads (KernelContext::read_output_elements): fused attention's kept probabilities in a plan with no
// backward, 3.9 MB of mql5_block's forward.
void Planner::find_read_extents(const std::vector<Tensor>& fetches, const std::vector<Update>& updates) {
  read_bytes_.assign(shapes_.size(), 0);
  auto bytes_of_node = [&](NodeId id) {
    return bytes_of(shapes_[static_cast<std::size_t>(id)], graph_.node(id).dtype);
  };
  for (const Tensor& fetch : fetches) read_bytes_[static_cast<std::size_t>(fetch.id())] = bytes_of_node(fetch.id());
  for (const Update& update : updates)
    read_bytes_[static_cast<std::size_t>(update.value.id())] = bytes_of_node(update.value.id());
  for (auto it = needed_.rbegin(); it != needed_.rend(); ++it) {
    const Node& node = graph_.node(*it);
    if (node.kind != NodeKind::op) continue;
    const bool alias = node.op->sharing() == Sharing::alias;
    for (std::size_t i = 0; i < node.inputs.size(); ++i) {
      const auto input = static_cast<std::size_t>(node.inputs[i]);
      const std::size_t read = alias && i == 0 ? alias_offset_[static_cast<std::size_t>(node.id)] +
                                                     read_bytes_[static_cast<std::size_t>(node.id)]
                                               : bytes_of_node(node.inputs[i]);
      read_bytes_[input] = std::max(read_bytes_[input], read);
    }
  }
}

// Each op's plan-time work for its kernels (OpDef::prepare), such as making the GEMM kernels of these shapes,
// so that the first run does no more than the next ones.
void Planner::prepare_kernels() const {
  std::vector<Shape> inputs;
  for (NodeId id : needed_) {
    const Node& node = graph_.node(id);
    if (node.kind != NodeKind::op || node.op->prepare_fn() == nullptr) continue;
    inputs.clear();
    for (NodeId input : node.inputs) inputs.push_back(shapes_[static_cast<std::size_t>(input)]);
    node.op->prepare_fn()(inputs, shapes_[static_cast<std::size_t>(id)], node.attributes, node.dtype);
  }
}

void Planner::build_launches(Plan& plan) {
  auto address = [&](int storage) -> unsigned char* {
    return storage < 0 ? nullptr : plan.arena.get() + storages_[static_cast<std::size_t>(storage)].offset;
  };
  plan.data.assign(plan.shapes.size(), nullptr);
  for (NodeId id : needed_) {
    const Node& node = graph_.node(id);
    const auto index = static_cast<std::size_t>(id);
    if (node.kind == NodeKind::variable || node.kind == NodeKind::constant) plan.external.push_back(id);
    if (node.kind != NodeKind::op) continue;
    Launch launch;
    launch.node = id;
    launch.alias = node.op->sharing() == Sharing::alias;
    launch.kernel = node.op->kernel(node.dtype);
    launch.inputs = node.inputs;
    launch.input_data.assign(node.inputs.size(), nullptr);
    for (NodeId input : node.inputs) launch.input_shapes.push_back(&plan.shapes[static_cast<std::size_t>(input)]);
    if (launch.alias)
      launch.alias_offset = alias_offset_[index];
    else if (storage_of_[index] >= 0)
      plan.data[index] = address(storage_of_[index]) + offset_of_[index];
    launch.context.node = &node;
    launch.context.num_inputs = static_cast<int>(node.inputs.size());
    launch.context.output_shape = &plan.shapes[index];
    launch.context.read_output_elements = static_cast<std::int64_t>(read_bytes_[index] / dtype_size(node.dtype));
    launch.context.workspace = address(workspace_of_[index]);
    if (workspace_of_[index] >= 0) launch.context.workspace_bytes = workspace_bytes_[index];
    plan.launches.push_back(std::move(launch));
    ++plan.stats.num_kernels;
  }
  plan.stats.num_kernels -= plan.stats.num_aliases;
  if (profiling()) {  // labels, and counters the launches add to without allocating
    for (const Launch& launch : plan.launches)
      plan.profile.labels.push_back(graph_.node(launch.node).op->name() + " " +
                                    plan.shapes[static_cast<std::size_t>(launch.node)].to_string());
    plan.profile.seconds.assign(plan.launches.size(), 0.0);
    plan.profile.calls.assign(plan.launches.size(), 0);
  }
  // The vectors inside the launches are final now: point the contexts at them.
  for (Launch& launch : plan.launches) {
    launch.context.inputs = launch.input_data.data();
    launch.context.input_shapes = launch.input_shapes.data();
  }
}

std::unique_ptr<Plan> Planner::run(const std::vector<Tensor>& fetches, const std::vector<Update>& updates) {
  auto plan = std::make_unique<Plan>();
  plan->batch_size = fed_.batch_size;
  plan->key = fed_.key;
  plan->stats.batch_size = fed_.batch_size;
  if (needed_.empty()) return plan;
  infer_shapes();
  find_last_uses(fetches, updates);
  find_updates(updates);
  assign_storage(*plan);
  find_read_extents(fetches, updates);
  prepare_kernels();
  const std::size_t arena_bytes = std::max<std::size_t>(place(storages_), alignment);
  plan->stats.arena_bytes = arena_bytes;
  plan->arena.reset(allocate_arena(arena_bytes));
  plan->shapes = std::move(shapes_);
  build_launches(*plan);
  return plan;
}

}  // namespace

std::vector<NodeId> needed_nodes(const Graph& graph, const std::vector<NodeId>& roots) {
  if (roots.empty()) return {};
  const NodeId last = *std::max_element(roots.begin(), roots.end());
  std::vector<char> needed(static_cast<std::size_t>(last) + 1, 0);
  for (NodeId root : roots) needed[static_cast<std::size_t>(root)] = 1;
  for (NodeId id = last; id >= 0; --id) {
    if (!needed[static_cast<std::size_t>(id)]) continue;
    for (NodeId input : graph.node(id).inputs) needed[static_cast<std::size_t>(input)] = 1;
  }
  std::vector<NodeId> result;
  for (NodeId id = 0; id <= last; ++id)
    if (needed[static_cast<std::size_t>(id)]) result.push_back(id);
  return result;
}

std::unique_ptr<Plan> make_plan(const Graph& graph, const std::vector<NodeId>& needed,
                                const std::vector<Tensor>& fetches, const std::vector<Update>& updates,
                                const FedShapes& fed) {
  return Planner(graph, needed, fed).run(fetches, updates);
}

namespace {

// Which launch finishes each hooked node: the last launch (kernel or alias) that writes it. A hooked node is
// a fetch, so no later launch overwrites its buffer in place.
void make_ready_schedule(Plan& plan, const ReadyHook& hook) {
  plan.ready_after.clear();
  for (std::size_t i = 0; i < hook.nodes.size(); ++i) {
    std::size_t done = 0;  // before any launch
    for (std::size_t index = 0; index < plan.launches.size(); ++index)
      if (plan.launches[index].node == hook.nodes[i]) done = index + 1;
    plan.ready_after.emplace_back(done, i);
  }
  std::stable_sort(plan.ready_after.begin(), plan.ready_after.end());
  plan.ready_made = true;
}

}  // namespace

void execute(Plan& plan, Graph& graph, std::uint64_t run, std::int64_t batch_offset, const ReadyHook* hook) {
  for (NodeId id : plan.external) plan.data[static_cast<std::size_t>(id)] = graph.mutable_value(graph.tensor(id)).raw();
  for (const auto& [node, variable] : plan.written_in_variable)
    plan.data[static_cast<std::size_t>(node)] = plan.data[static_cast<std::size_t>(variable)];
  if (hook != nullptr && !plan.ready_made) make_ready_schedule(plan, *hook);
  std::size_t next_ready = 0;
  // Reports every hooked node finished by the first `done` launches.
  auto report = [&](std::size_t done) {
    if (hook == nullptr) return;
    for (; next_ready < plan.ready_after.size() && plan.ready_after[next_ready].first <= done; ++next_ready) {
      const std::size_t i = plan.ready_after[next_ready].second;
      hook->ready(i, plan.data[static_cast<std::size_t>(hook->nodes[i])]);
    }
  };
  report(0);
  const bool timed = !plan.profile.labels.empty();
  for (std::size_t index = 0; index < plan.launches.size(); ++index) {
    Launch& launch = plan.launches[index];
    if (launch.alias) {
      plan.data[static_cast<std::size_t>(launch.node)] =
          static_cast<unsigned char*>(plan.data[static_cast<std::size_t>(launch.inputs[0])]) + launch.alias_offset;
      report(index + 1);
      continue;
    }
    for (std::size_t i = 0; i < launch.inputs.size(); ++i)
      launch.input_data[i] = plan.data[static_cast<std::size_t>(launch.inputs[i])];
    launch.context.output = plan.data[static_cast<std::size_t>(launch.node)];
    launch.context.run = run;
    launch.context.batch_rows = plan.batch_size;
    launch.context.batch_offset = batch_offset;
    if (!timed) {
      launch.kernel(launch.context);
      report(index + 1);
      continue;
    }
    const auto start = std::chrono::steady_clock::now();
    launch.kernel(launch.context);
    plan.profile.seconds[index] += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    ++plan.profile.calls[index];
    report(index + 1);
  }
}

}  // namespace kiln::detail
