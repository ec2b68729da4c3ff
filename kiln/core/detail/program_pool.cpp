#include <kiln/core/detail/program_pool.hpp>

#include <algorithm>

namespace kiln::detail {

ProgramPool::ProgramPool(Graph& graph, std::vector<Tensor> fetches, std::vector<Update> updates)
    : graph_(graph), fetches_(std::move(fetches)), updates_(std::move(updates)) {
  // The first Program now: it checks the fetches and updates here, not at the first lease.
  idle_.push_back(std::make_unique<Program>(graph_, fetches_, updates_));
}

ProgramPool::Lease::~Lease() {
  if (program_) pool_->give_back(std::move(program_));
}

ProgramPool::Lease ProgramPool::lease(std::int64_t batch_size) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!idle_.empty()) {
      auto planned = std::find_if(idle_.rbegin(), idle_.rend(), [&](const auto& p) { return p->has_plan(batch_size); });
      auto chosen = planned != idle_.rend() ? std::prev(planned.base()) : std::prev(idle_.end());
      std::unique_ptr<Program> program = std::move(*chosen);
      idle_.erase(chosen);
      return Lease(*this, std::move(program));
    }
  }
  // Made outside the lock: another caller may take or give back meanwhile.
  return Lease(*this, std::make_unique<Program>(graph_, fetches_, updates_));
}

void ProgramPool::give_back(std::unique_ptr<Program> program) {
  std::unique_ptr<Program> dropped;  // freed after the lock is released
  std::lock_guard<std::mutex> lock(mutex_);
  if (idle_.size() < kMaxIdle)
    idle_.push_back(std::move(program));
  else
    dropped = std::move(program);
}

std::size_t ProgramPool::idle() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return idle_.size();
}

}  // namespace kiln::detail
