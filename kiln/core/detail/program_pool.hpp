#pragma once
// Internal: Programs over one graph for callers on several threads (predict and evaluate on one model).
//
//   ProgramPool pool(graph, outputs);
//   auto program = pool.lease(batch_size);   // this caller's alone until the lease ends
//   program->feed(x, batch);
//   program->run();
//
// A lease takes an idle Program, one already planned for the batch size if there is one, or makes a
// new one; ending the lease gives it back. Callers never wait for each other's runs: the pool's lock is
// held only to take and give back. The graph must not change while the pool is in use.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <kiln/core/program.hpp>

namespace kiln::detail {

class ProgramPool {
 public:
  ProgramPool(Graph& graph, std::vector<Tensor> fetches, std::vector<Update> updates = {});
  ProgramPool(const ProgramPool&) = delete;
  ProgramPool& operator=(const ProgramPool&) = delete;

  class Lease {
   public:
    Lease(Lease&& other) noexcept : pool_(other.pool_), program_(std::move(other.program_)) {}
    Lease& operator=(Lease&&) = delete;
    ~Lease();
    Program& operator*() const { return *program_; }
    Program* operator->() const { return program_.get(); }

   private:
    friend class ProgramPool;
    Lease(ProgramPool& pool, std::unique_ptr<Program> program) : pool_(&pool), program_(std::move(program)) {}
    ProgramPool* pool_;
    std::unique_ptr<Program> program_;
  };

  Lease lease(std::int64_t batch_size);
  std::size_t idle() const;  // Programs waiting for a caller

 private:
  // Idle Programs kept; more concurrent callers than this re-plan when they come back.
  static constexpr std::size_t kMaxIdle = 8;
  void give_back(std::unique_ptr<Program> program);

  Graph& graph_;
  std::vector<Tensor> fetches_;
  std::vector<Update> updates_;
  mutable std::mutex mutex_;
  std::vector<std::unique_ptr<Program>> idle_;  // most recently given back last
};

}  // namespace kiln::detail
