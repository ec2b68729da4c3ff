#pragma once
// Internal: the pieces of a data-parallel fit (FitOptions::distribute) besides the trainer's loop: which
// rows of a global batch are this rank's, the gradient buckets summed while backward runs, and the one
// small collective per step that agrees on failures and sums the logged statistics.
#include <cstddef>
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include <kiln/core/array.hpp>
#include <kiln/core/tensor.hpp>
#include <kiln/train/communicator.hpp>

namespace kiln::detail {

/// Rank `rank`'s rows of a batch of `rows` split over `size` ranks: as even as can be, the first
/// rows % size ranks taking one more, in rank order, so the shards are disjoint and cover the batch.
struct Shard {
  std::int64_t start = 0;  ///< the first row, in the batch
  std::int64_t count = 0;  ///< may be 0 when the batch has fewer rows than ranks
};
Shard shard_of(std::int64_t rows, int rank, int size);

/// The gradients of one training graph, packed into buckets of about Communicator::bucket_bytes() (the
/// first of 1 MB at most) in the order backward computes them (by node, the plan's launch order, the same
/// on every rank). A gradient is copied into its bucket, scaled by the rank's share of the batch, as soon as
/// the program reports it (Program::on_ready); buckets start summing across ranks in bucket order, each as
/// soon as it and the ones before it are full, so every rank starts the same sums in the same order.
class GradientBuckets {
 public:
  /// `gradients[i]` empty or without elements: weight i gets no gradient (it stays out of the buckets).
  GradientBuckets(Communicator& communicator, const std::vector<Tensor>& gradients);

  /// A new step: every gradient is still to come; each is multiplied by `scale` (this rank's rows over the
  /// batch's, so the summed gradient is the whole batch's mean).
  void begin(double scale);
  /// Gradient `i` has its value at `data` (from the program's hook); nullptr: zeros.
  void ready(std::size_t i, const void* data);
  /// Zeros for every gradient not reported this step (a rank without rows, or one that failed), starts
  /// every bucket not started, and waits for all of them.
  void finish();
  /// Gradient i summed over the ranks (after finish()): a view into its bucket; empty for an empty gradient.
  const Array& reduced(std::size_t i) const { return reduced_[i]; }

  std::size_t num_buckets() const { return buckets_.size(); }
  /// Buckets started while the program was still running, in the last step.
  std::size_t started_early() const { return started_early_; }

 private:
  struct Bucket {
    DType dtype = DType::float32;
    Array data;                         // 1-D
    std::size_t pending = 0, size = 0;  // gradients still to come this step, and in all
  };
  struct Slot {
    std::size_t bucket = 0, offset = 0, count = 0;
    bool filled = false;
  };

  Communicator& communicator_;
  std::vector<Bucket> buckets_;
  std::vector<Slot> slots_;           // by gradient; count 0 for one outside the buckets
  std::vector<std::size_t> order_;    // the gradients in the buckets, in packing order
  std::vector<Array> reduced_;
  double scale_ = 1.0;
  bool finishing_ = false;
  std::size_t next_start_ = 0;        // the first bucket not started this step
  std::size_t started_early_ = 0;
};

/// Each step's one small collective, and the failure protocol around it. `exchange(failed, values)` sums
/// `values` (the batch's statistics) over the ranks together with every rank's status; when any rank failed,
/// every rank throws: the failed one its own exception, the others a DistributedError that names the
/// failed rank and carries its message. So a rank that throws never leaves the others waiting in a
/// collective: every rank's next collective is this one.
class Agreement {
 public:
  /// `who` starts messages ("sequential.fit").
  Agreement(Communicator& communicator, std::string who);

  /// Keeps a failure (the exception being handled) to report at the next exchange.
  void fail(std::exception_ptr error);
  bool failed() const { return static_cast<bool>(error_); }
  /// Sums `values` (in place), every rank's status and the ranks asking to stop (`stop`); throws as described
  /// when any rank failed, else returns whether any rank asked to stop. `where` says what ran ("epoch 3,
  /// batch 7") in the others' message.
  bool exchange(std::vector<double>& values, const std::string& where, bool stop = false);
  /// The same for a training step, its "epoch E, batch B" written only when a rank failed: a step allocates
  /// nothing here once the buffer has grown.
  bool exchange_step(std::vector<double>& values, int epoch, std::int64_t batch, bool stop);
  /// An exchange of the status and the stop requests alone.
  bool agree(const std::string& where, bool stop = false);

 private:
  bool exchange(std::vector<double>& values, const std::function<std::string()>& where, bool stop);

  Communicator& communicator_;
  std::string who_;
  std::exception_ptr error_;
  std::vector<double> buffer_;
};

/// A 64-bit FNV-1a hash of `size` bytes, continuing from `hash` (start with the default), for comparing
/// configs and weights across ranks.
std::uint64_t hash_bytes(const void* data, std::size_t size, std::uint64_t hash = 14695981039346656037ULL);
/// hash_bytes of a text.
inline std::uint64_t hash_text(const std::string& text) { return hash_bytes(text.data(), text.size()); }

/// Refuses a fit whose ranks differ: `model` hashes the model (config, weights' paths, shapes and dtypes)
/// and `fit` the fit's plan (rows, batch size, epochs, steps, shapes). Compared before any collective on
/// weights; DistributedError on every rank, comparing rank 0's hashes with the first differing rank's.
void check_same_on_every_rank(Communicator& communicator, std::uint64_t model, std::uint64_t fit,
                              const std::string& who);

/// Rank 0's values of `arrays` on every rank (each array's bytes, in order).
void broadcast_arrays(Communicator& communicator, std::vector<Array>& arrays);

}  // namespace kiln::detail
