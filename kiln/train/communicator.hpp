#pragma once
// Communicator: the collectives a data-parallel fit needs from the processes it trains with. The trainer
// sees only this interface; kiln::distributed::Context (kiln/distributed/, linked as kiln::distributed when
// kiln was built with MPI) implements it over MPI, and a test can implement it over threads.
//
// Every rank calls the same collectives in the same order with the same sizes: that is what keeps a
// distributed fit from waiting for ever. The trainer agrees on failures before each collective it starts.
#include <cstddef>
#include <cstdint>
#include <vector>

#include <kiln/core/dtype.hpp>

namespace kiln {

/// The processes of a data-parallel fit (FitOptions::distribute) and the collectives between them. Every
/// call is collective: each rank makes it, in the same order, with the same sizes. A failure of the
/// transport (a lost process) throws DistributedError.
class Communicator {
 public:
  virtual ~Communicator() = default;

  /// This process's index, from 0 to size() - 1. Rank 0 is the chief: it prints and writes files.
  virtual int rank() const = 0;
  /// The number of processes.
  virtual int size() const = 0;

  /// Starts summing `count` values of `dtype` at `data`, in place, across the processes, and returns at once;
  /// `data` must stay untouched until wait_all(). Sums started on every rank in the same order pair up.
  virtual void start_sum(void* data, std::size_t count, DType dtype) = 0;
  /// Lets the started sums advance without waiting for them (called between kernels).
  virtual void progress() = 0;
  /// Waits until every started sum is done.
  virtual void wait_all() = 0;
  /// Sums `count` doubles at `data` in place across the processes, waiting for the result.
  virtual void sum(double* data, std::size_t count) = 0;
  /// Copies `bytes` bytes at `data` from rank `root` to every other rank.
  virtual void broadcast(void* data, std::size_t bytes, int root) = 0;
  /// Every rank's `value`, by rank.
  virtual std::vector<std::uint64_t> all_gather(std::uint64_t value) = 0;

  /// The size of the gradient buckets summed while backward runs (default 25 MB, as PyTorch's DDP): a bucket
  /// starts summing as soon as its last gradient is computed. The first bucket, which holds the last layers'
  /// gradients (backward's first), takes 1 MB at most, so its sum starts early, as in PyTorch's DDP.
  std::size_t bucket_bytes() const { return bucket_bytes_; }
  /// Sets bucket_bytes(); at least one gradient goes in each bucket, whatever its size.
  void set_bucket_bytes(std::size_t bytes) { bucket_bytes_ = bytes; }

 private:
  std::size_t bucket_bytes_ = std::size_t{25} << 20;
};

}  // namespace kiln
