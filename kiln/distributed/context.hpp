#pragma once
// kiln::distributed::Context: the processes of an MPI job as a Communicator for a data-parallel fit.
//
//   int main(int argc, char** argv) {
//     kiln::distributed::Context context(argc, argv);   // MPI_Init; rank, size; errors returned, not fatal
//     ...build the same model on every rank...
//     model.fit(x, y, kiln::FitOptions().epochs(20).batch_size(256).distribute(context));
//   }
//
// run as `mpirun -np 4 ./train`. Linked as kiln::distributed (built when kiln finds MPI: KILN_WITH_MPI);
// this header includes no MPI header, so code that uses it builds the same against Open MPI or MPICH.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <kiln/train/communicator.hpp>

namespace kiln::distributed {

/// The processes of the MPI job this process belongs to (MPI_COMM_WORLD, duplicated for kiln), as the
/// Communicator that FitOptions::distribute takes. One Context per process: it initializes MPI (with
/// MPI_THREAD_FUNNELED: only the thread that made the Context calls MPI, so call fit on that thread) unless
/// the program already did, and finalizes it at destruction if it initialized it. MPI errors are returned,
/// not fatal, and thrown as DistributedError naming the call. A process started without mpirun is a job of
/// one. A failure inside fit reaches every rank (docs/distributed.md); a rank that fails outside fit, while
/// others may wait in a collective, should end the job with abort().
class Context : public Communicator {
 public:
  /// Initializes MPI with the program's arguments (MPI may take its own out of them).
  Context(int& argc, char**& argv);
  /// Initializes MPI without arguments.
  Context();
  ~Context() override;
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  /// This process's rank in the job (MPI_Comm_rank).
  int rank() const override { return rank_; }
  /// The number of processes in the job (MPI_Comm_size).
  int size() const override { return size_; }
  /// Rank 0: the process that prints and writes files in a distributed fit.
  bool is_chief() const { return rank_ == 0; }
  /// Waits until every rank has called it.
  void barrier();
  /// Ends every process of the job (MPI_Abort) with exit code `code`: for a rank that fails outside fit,
  /// where the other ranks cannot learn of it. Does not return.
  [[noreturn]] void abort(int code);
  /// What this rank's sums cost so far: how many were started, their bytes, and the seconds wait_all() spent
  /// waiting for them (the part of the communication that computing did not hide).
  struct Stats {
    std::uint64_t sums = 0;   ///< start_sum calls (gradient buckets)
    std::uint64_t bytes = 0;  ///< their bytes
    double wait_seconds = 0;  ///< time spent in wait_all
  };
  /// This rank's Stats since the Context was made or reset_stats() was called.
  const Stats& stats() const { return stats_; }
  /// Starts the Stats again from zero.
  void reset_stats() { stats_ = {}; }
  /// The MPI library's version string (MPI_Get_library_version), e.g. "Open MPI v4.1.4, ...".
  static std::string library_version();

  /// MPI_Iallreduce (MPI_SUM, in place), in pieces of at most INT_MAX values.
  void start_sum(void* data, std::size_t count, DType dtype) override;
  /// MPI_Testall on the started sums.
  void progress() override;
  /// MPI_Waitall on the started sums.
  void wait_all() override;
  /// MPI_Allreduce (MPI_SUM, in place).
  void sum(double* data, std::size_t count) override;
  /// MPI_Bcast of bytes.
  void broadcast(void* data, std::size_t bytes, int root) override;
  /// MPI_Allgather of one value a rank.
  std::vector<std::uint64_t> all_gather(std::uint64_t value) override;

 private:
  void start(int* argc, char*** argv);
  struct Mpi;  // the communicator and the pending requests, in MPI's types
  std::unique_ptr<Mpi> mpi_;
  int rank_ = 0, size_ = 1;
  bool finalize_ = false;
  Stats stats_;
};

}  // namespace kiln::distributed
