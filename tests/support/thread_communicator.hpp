#pragma once
// A Communicator whose ranks are threads of this process: the trainer's data-parallel path tested without
// MPI (and under the sanitizers). Each collective is a meeting of every rank's thread; sums add the ranks'
// values in rank order, so every rank gets bitwise the same result, as MPI's do.
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <kiln/train/communicator.hpp>

namespace kiln::testing {

/// What the ranks' threads share: make one, then one ThreadCommunicator per rank.
class ThreadWorld {
 public:
  explicit ThreadWorld(int size);
  int size() const { return size_; }

  /// Waits until every rank's thread has called it (a generation barrier).
  void meet();
  /// Every rank posts a pointer and what its collective is (its kind and size); after the meeting, all of them
  /// are readable.
  void post(int rank, void* data, std::uint64_t signature) {
    posted_[static_cast<std::size_t>(rank)] = data;
    signatures_[static_cast<std::size_t>(rank)] = signature;
  }
  void* posted(int rank) const { return posted_[static_cast<std::size_t>(rank)]; }
  /// After a meeting: throws DistributedError on every rank when the ranks' collectives differ (what MPI would
  /// hang on or mix up), naming `what`.
  void check_same(const char* what) const;

 private:
  int size_;
  std::mutex mutex_;
  std::condition_variable changed_;
  int waiting_ = 0;
  std::uint64_t generation_ = 0;
  std::vector<void*> posted_;
  std::vector<std::uint64_t> signatures_;
};

/// Rank `rank` of a ThreadWorld.
class ThreadCommunicator : public Communicator {
 public:
  ThreadCommunicator(ThreadWorld& world, int rank) : world_(world), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return world_.size(); }
  void start_sum(void* data, std::size_t count, DType dtype) override;
  void progress() override {}
  void wait_all() override;
  void sum(double* data, std::size_t count) override;
  void broadcast(void* data, std::size_t bytes, int root) override;
  std::vector<std::uint64_t> all_gather(std::uint64_t value) override;
  /// How many sums were started (buckets), over the communicator's life.
  std::size_t sums_started() const { return started_; }

 private:
  struct Pending {
    void* data;
    std::size_t count;
    DType dtype;
  };
  // Sums `count` values of every rank's posted buffer into this rank's `data`, in rank order.
  template <class T>
  void sum_into(T* data, std::size_t count);

  ThreadWorld& world_;
  int rank_;
  std::vector<Pending> pending_;
  std::size_t started_ = 0;
};

}  // namespace kiln::testing
