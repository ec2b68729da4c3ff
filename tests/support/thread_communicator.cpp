#include "support/thread_communicator.hpp"

#include <chrono>
#include <cstring>
#include <string>

#include <kiln/core/error.hpp>

namespace kiln::testing {

ThreadWorld::ThreadWorld(int size)
    : size_(size), posted_(static_cast<std::size_t>(size), nullptr), signatures_(static_cast<std::size_t>(size), 0) {}

void ThreadWorld::check_same(const char* what) const {
  for (std::size_t r = 1; r < signatures_.size(); ++r)
    if (signatures_[r] != signatures_[0])
      throw DistributedError(std::string("ThreadWorld: the ranks' ") + what + " differ: rank " + std::to_string(r) +
                             " " + std::to_string(signatures_[r]) + ", rank 0 " + std::to_string(signatures_[0]));
}

void ThreadWorld::meet() {
  std::unique_lock<std::mutex> lock(mutex_);
  const std::uint64_t generation = generation_;
  if (++waiting_ == size_) {
    waiting_ = 0;
    ++generation_;
    changed_.notify_all();
    return;
  }
  // A protocol bug must fail the test, not hang it.
  if (!changed_.wait_for(lock, std::chrono::seconds(60), [&] { return generation_ != generation; }))
    throw DistributedError("ThreadWorld: a rank did not reach the collective in 60 s");
}

void ThreadCommunicator::start_sum(void* data, std::size_t count, DType dtype) {
  pending_.push_back({data, count, dtype});
  ++started_;
}

template <class T>
void ThreadCommunicator::sum_into(T* data, std::size_t count) {
  // Every rank reads every rank's values (a meeting), sums them in rank order into a copy, and writes its
  // own buffer only after every rank has read (a second meeting).
  std::vector<T> total(count, T(0));
  world_.post(rank_, data, (count * 2 + (sizeof(T) == 8 ? 1 : 0)) * 4 + 1);  // kind 1: a sum
  world_.meet();
  world_.check_same("sums (count and dtype)");
  for (int r = 0; r < world_.size(); ++r) {
    const T* values = static_cast<const T*>(world_.posted(r));
    for (std::size_t i = 0; i < count; ++i) total[i] += values[i];
  }
  world_.meet();
  std::memcpy(data, total.data(), count * sizeof(T));
}

void ThreadCommunicator::wait_all() {
  for (const Pending& pending : pending_) {
    if (pending.dtype == DType::float64)
      sum_into(static_cast<double*>(pending.data), pending.count);
    else
      sum_into(static_cast<float*>(pending.data), pending.count);
  }
  pending_.clear();
}

void ThreadCommunicator::sum(double* data, std::size_t count) { sum_into(data, count); }

void ThreadCommunicator::broadcast(void* data, std::size_t bytes, int root) {
  world_.post(rank_, data, (bytes * 64 + static_cast<std::uint64_t>(root)) * 4 + 2);  // kind 2: a broadcast
  world_.meet();
  world_.check_same("broadcasts (bytes and root)");
  if (rank_ != root) std::memcpy(data, world_.posted(root), bytes);
  world_.meet();
}

std::vector<std::uint64_t> ThreadCommunicator::all_gather(std::uint64_t value) {
  std::vector<std::uint64_t> values(static_cast<std::size_t>(world_.size()));
  world_.post(rank_, &value, 3);  // kind 3: a gather
  world_.meet();
  world_.check_same("gathers");
  for (int r = 0; r < world_.size(); ++r) values[static_cast<std::size_t>(r)] = *static_cast<std::uint64_t*>(world_.posted(r));
  world_.meet();
  return values;
}

}  // namespace kiln::testing
