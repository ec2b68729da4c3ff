#pragma once
// Internal: the plan a Program runs for one set of fed shapes, and the planner that makes it.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <kiln/core/op.hpp>
#include <kiln/core/program.hpp>

namespace kiln::detail {

struct Launch {
  NodeId node = -1;
  bool alias = false;  // no kernel: the output is input 0's bytes, from alias_offset on
  std::size_t alias_offset = 0;
  KernelFn kernel = nullptr;
  std::vector<NodeId> inputs;
  std::vector<const void*> input_data;     // refreshed before each run of the kernel
  std::vector<const Shape*> input_shapes;  // into Plan::shapes
  KernelContext context;
};

struct AlignedFree {
  void operator()(unsigned char* p) const { std::free(p); }
};

// KILN_PROFILE=1 in the environment: every kernel is timed, and when the process exits the time per op
// and output shape, over every plan, is printed to stderr, largest first.
bool profiling();
struct KernelProfile {
  std::vector<std::string> labels;  // by launch: "kiln>MatMul (64, 40, 128)"; empty when not profiling
  std::vector<double> seconds;
  std::vector<std::int64_t> calls;
  ~KernelProfile();  // adds this plan's times to the process's table
};

struct Plan {
  std::int64_t batch_size = -1;    // the fed batch (axis 0's unknown size); -1 when no axis 0 is unknown
  std::vector<std::int64_t> key;   // the fed sizes of every unknown placeholder dimension, in order
  std::vector<Shape> shapes;       // by node id: concrete shapes for these fed shapes
  std::vector<void*> data;       // by node id: where each node's bytes are during a run
  std::unique_ptr<unsigned char, AlignedFree> arena;
  std::vector<Launch> launches;  // the kernels, in order
  std::vector<NodeId> external;  // variables and constants, whose storage the graph owns
  // (op node, variable): an in-place op whose output is the value the program updates the variable to, and which
  // is the variable's only reader: it writes into the variable itself (a key/value cache's WriteSteps, a running
  // total's Add), and the update then has nothing to copy.
  std::vector<std::pair<NodeId, NodeId>> written_in_variable;
  PlanStats stats;
  KernelProfile profile;
  // For a ReadyHook: (launches done, hook index) pairs in launch order, made at the plan's first hooked run.
  std::vector<std::pair<std::size_t, std::size_t>> ready_after;
  bool ready_made = false;
};

// The nodes `roots` depend on, in topological (id) order.
std::vector<NodeId> needed_nodes(const Graph& graph, const std::vector<NodeId>& roots);

// The fed data's shapes, by placeholder: what a plan is made for.
struct FedShapes {
  std::vector<NodeId> placeholders;
  std::vector<Shape> shapes;          // parallel to placeholders
  std::int64_t batch_size = -1;       // Plan::batch_size
  std::vector<std::int64_t> key;      // Plan::key
};

// Every op's shape rule is run again on the fed shapes; a ShapeError says which op refuses them.
std::unique_ptr<Plan> make_plan(const Graph& graph, const std::vector<NodeId>& needed,
                                const std::vector<Tensor>& fetches, const std::vector<Update>& updates,
                                const FedShapes& fed);

// What a run reports as it goes (Program::on_ready): after the launch that gives node `nodes[i]` its final
// value, `ready(i, data)`. Nodes no launch computes (placeholders, variables) are reported before the first.
struct ReadyHook {
  std::vector<NodeId> nodes;
  std::function<void(std::size_t, const void*)> ready;
};

// Runs every launch once; placeholders' data must already be set in plan.data. `run` is the Program's
// run count, which seeds per-run randomness (dropout); `batch_offset` is Program::set_batch_offset's.
void execute(Plan& plan, Graph& graph, std::uint64_t run, std::int64_t batch_offset = 0,
             const ReadyHook* hook = nullptr);

}  // namespace kiln::detail
