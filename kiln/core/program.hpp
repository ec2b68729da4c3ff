#pragma once
// Program: the part of a graph needed for some fetches and variable updates, planned once per set of
// fed shapes (batch size, and sequence length where that is unknown too) and then run again and again
// without touching the heap.
//
// Planning (core/planner.cpp): keep the nodes the fetches and updates need, compute every buffer's
// lifetime, let elementwise ops overwrite an input that nobody reads later, turn reshapes (and parts of
// an op's flat buffer) into aliases, and place every buffer at an offset of one arena (a freed range is reused).
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/fwd.hpp>
#include <kiln/core/graph.hpp>
#include <kiln/core/tensor.hpp>

namespace kiln {

/// What planning one set of fed shapes made (Program::stats): how much the planner saved, for tests and tuning.
struct PlanStats {
  std::int64_t batch_size = 0;      ///< the batch size planned for; -1 when no placeholder's axis 0 is unknown
  std::size_t num_kernels = 0;      ///< kernels that run each time
  std::size_t num_aliases = 0;      ///< reshapes and parts of flat buffers resolved to views
  std::size_t num_inplace = 0;      ///< outputs written over a dead input
  std::size_t arena_bytes = 0;      ///< one allocation for every intermediate buffer
  std::size_t unplanned_bytes = 0;  ///< what the same buffers would take without reuse
};

namespace detail {
struct Plan;
struct ReadyHook;
}

/// The part of a graph that some fetches and variable updates need, planned once per set of fed shapes
/// and then run again and again without touching the heap: feed() the placeholders, run(), then fetch()
/// or view() the results. A placeholder's unknown axis 0 is the batch, the same in every placeholder;
/// its other unknown axes (a sequence length) take any size the graph's ops accept for them.
class Program {
 public:
  /// Keeps the nodes `fetches` and `updates` need; planning waits for the first run. `graph` must outlive
  /// the program. Throws Error for a fetch or update tensor that is empty or of another graph, or an update
  /// of a node that is not a variable, and ShapeError for an update value of another shape or dtype.
  Program(Graph& graph, std::vector<Tensor> fetches, std::vector<Update> updates = {});
  ~Program();
  /// Takes over another program's plans and feeds; the moved-from one may only be destroyed or assigned.
  Program(Program&&) noexcept;
  /// Takes over another program's plans and feeds; the moved-from one may only be destroyed or assigned.
  Program& operator=(Program&&) noexcept;

  /// Binds data to a placeholder for the next run. The array is not copied: keep it alive and unchanged
  /// until run() returns. Throws ShapeError/DTypeError when it does not fit the placeholder.
  void feed(const Tensor& placeholder, const Array& value);
  /// Runs the program once. The first run with new fed shapes plans (and allocates); later ones do not. The
  /// plans of the 16 sets of shapes used last are kept (pad sequences to a few lengths, not to every one).
  /// Throws ValueError if a needed placeholder was not fed, the fed batch sizes disagree, or an unknown
  /// dimension is fed 0; ShapeError, naming the op and the fed shapes, when an op refuses them (two
  /// sequences of different lengths added).
  ///
  /// One Program is one caller's: several Programs over one graph may run at once on several threads (the
  /// graph and its variables are only read, unless a program updates them), but one Program must not;
  /// a run that finds its Program already running throws LayerStateError.
  void run();
  /// Some plan for this batch size was made already (for one program without another unknown dimension:
  /// running at that batch size allocates nothing).
  bool has_plan(std::int64_t batch_size) const;

  /// The value a fetch had in the last run, copied out.
  Array fetch(const Tensor& tensor) const;
  /// The same without a copy: valid until the next run.
  Array view(const Tensor& tensor) const;
  /// The shape a fetch had in the last run.
  const Shape& planned_shape(const Tensor& tensor) const;
  /// Copies the value a fetch had in the last run into `out`, which must have its shape and dtype (ShapeError,
  /// DTypeError otherwise). Allocates nothing: predict_on_batch writes a caller's buffers with it.
  void fetch_into(const Tensor& tensor, Array& out) const;
  double scalar(const Tensor& tensor) const;  ///< a fetched scalar as double

  /// How many times run() has run: it seeds per-run randomness (dropout), and fit sets it to the optimizer's
  /// iteration count, so it is part of a training run's state.
  std::uint64_t run_count() const { return run_count_; }
  /// Sets run_count(), as resuming a training run does.
  void set_run_count(std::uint64_t count) { run_count_ = count; }

  /// Where the fed rows start in a larger batch that several processes split (a distributed fit's shard,
  /// default 0): random ops (dropout) then draw for each row what the whole batch's row would draw in one
  /// process, so the shards of a batch together draw as the batch does. This holds for tensors whose
  /// outermost axis is the batch, alone or merged with the axes after it ((batch·heads, ...)), as in
  /// every built-in layer.
  void set_batch_offset(std::int64_t rows);
  /// Calls `ready(i, data)` during each run as soon as `tensors[i]` has its final value (before later kernels
  /// run), with the bytes of its value (its planned shape, its dtype; valid until the run ends): a distributed
  /// fit starts summing gradients across processes while backward still runs. Each tensor must be one of the
  /// fetches (Error otherwise). Replaces an earlier hook; an empty list removes it. The callback runs on the
  /// thread that calls run(); if it throws, the run stops there and run() throws it.
  void on_ready(const std::vector<Tensor>& tensors, std::function<void(std::size_t, const void*)> ready);

  PlanStats stats() const;  ///< of the plan used by the last run
  std::size_t num_plans() const { return plans_.size(); }  ///< the plans kept now
  /// The tensors fetch() and view() accept, as given to the constructor.
  const std::vector<Tensor>& fetches() const { return fetches_; }

 private:
  detail::Plan& plan_for(std::int64_t batch_size);
  std::int64_t read_fed_sizes();
  const detail::Plan& last_plan() const;
  std::size_t fetch_slot(const Tensor& tensor) const;

  Graph* graph_;
  std::vector<Tensor> fetches_;
  std::vector<Update> updates_;
  std::vector<NodeId> needed_;                        ///< in topological order
  std::vector<NodeId> placeholders_;                  ///< needed placeholders
  std::vector<Array> fed_;                            ///< parallel to placeholders_
  std::vector<std::int64_t> key_;                     ///< the fed sizes of the unknown dimensions (Plan::key)
  std::vector<std::unique_ptr<detail::Plan>> plans_;  ///< least recently used first
  detail::Plan* last_ = nullptr;
  std::uint64_t run_count_ = 0;
  std::int64_t batch_offset_ = 0;
  std::unique_ptr<detail::ReadyHook> hook_;
  std::unique_ptr<std::atomic<bool>> running_;  ///< (behind a pointer: Program moves, atomics do not)
};

}  // namespace kiln
