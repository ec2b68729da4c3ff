// kiln::set_num_threads and the pool behind detail::parallel_for.
//
// The pool keeps get_num_threads() − 1 threads; the calling thread runs the first range itself. Between
// jobs a pool thread spins briefly on the job counter (a training step runs kernels back to back, and a
// futex wake-up costs more than a small kernel), then sleeps on a condition variable.
//
// OpenBLAS is set to one thread for good: kiln splits large GEMMs over its own pool (ops/detail/gemm.cpp).
// Two pools on the same cores fight: OpenBLAS 0.3.21's threads spin for up to 2^28 cycles after each GEMM
// (OPENBLAS_THREAD_TIMEOUT), taking the core from the kernel that runs next, and its own threshold for
// going parallel is far too low for small products (a 12×128×2560 weight gradient ran 2× slower on 2
// threads). With one pool, every kernel, GEMM or not, uses the same threads.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "core/parallel.hpp"

// OpenBLAS's own thread control (Debian's libopenblas0-pthread): kiln holds it at one thread.
extern "C" {
void openblas_set_num_threads(int num_threads);
int openblas_get_num_threads(void);
}

namespace kiln {
namespace detail {
namespace {

void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Set on the pool's threads, and on the caller while it runs a job: a parallel_for inside a body runs
// its ranges serially instead of waiting for the pool it is part of.
thread_local bool inside_job = false;

class Pool {
 public:
  static Pool& instance() {
    static Pool pool;
    return pool;
  }

  ~Pool() { stop_threads(); }

  int threads() const { return threads_.load(std::memory_order_relaxed); }

  void set_threads(int threads) {
    threads = std::min<int>(threads, static_cast<int>(worker_mask));
    std::lock_guard<std::mutex> run_lock(run_mutex_);
    stop_threads();
    threads_.store(threads, std::memory_order_relaxed);
  }

  void run(std::int64_t count, int workers, RangeFunction function, const void* body) {
    std::lock_guard<std::mutex> run_lock(run_mutex_);  // one job at a time (Programs on several threads)
    start_threads(workers - 1);
    function_ = function;
    body_ = body;
    count_ = count;
    workers_ = workers;
    error_ = nullptr;
    remaining_.store(workers - 1, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      // The job's number and its worker count in one word, so a pool thread that wakes late reads the
      // two together: it cannot take a newer job's count for an older job.
      ++generation_;
      job_.store(generation_ << worker_bits | static_cast<std::uint64_t>(workers), std::memory_order_release);
    }
    wake_.notify_all();
    inside_job = true;
    run_range(0);
    inside_job = false;
    for (int spins = 0; remaining_.load(std::memory_order_acquire) != 0; ++spins) {
      if (spins < 20000)
        cpu_relax();
      else
        std::this_thread::yield();
    }
    if (error_) std::rethrow_exception(error_);
  }

 private:
  Pool() : threads_(std::max(1, openblas_get_num_threads())) { openblas_set_num_threads(1); }

  void run_range(int worker) {
    const std::int64_t begin = count_ * worker / workers_;
    const std::int64_t end = count_ * (worker + 1) / workers_;
    try {
      function_(body_, begin, end, worker);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
  }

  // Pool thread `worker` (1-based: worker 0 is the caller). A thread takes part in a job when its number
  // is below the job's worker count; the caller waits for exactly those, so the job's fields stay put
  // until they are done.
  void work(int worker, std::uint64_t seen) {
    inside_job = true;
    for (;;) {
      std::uint64_t job = seen;
      for (int spins = 0; spins < 4000 && job == seen; ++spins) {
        cpu_relax();
        job = job_.load(std::memory_order_acquire);
      }
      if (job == seen) {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return stopping_ || job_.load(std::memory_order_acquire) != seen; });
        if (stopping_) return;
        job = job_.load(std::memory_order_acquire);
      }
      seen = job;
      if (worker < static_cast<int>(job & worker_mask)) {
        run_range(worker);
        remaining_.fetch_sub(1, std::memory_order_acq_rel);
      }
    }
  }

  void start_threads(int wanted) {
    while (static_cast<int>(pool_.size()) < wanted) {
      const int worker = static_cast<int>(pool_.size()) + 1;
      // The job before the one about to start: the thread must not take that one for already seen.
      const std::uint64_t seen = job_.load(std::memory_order_acquire);
      pool_.emplace_back([this, worker, seen] { work(worker, seen); });
    }
  }

  void stop_threads() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    for (std::thread& thread : pool_) thread.join();
    pool_.clear();
    stopping_ = false;
  }

  std::atomic<int> threads_;
  std::vector<std::thread> pool_;
  std::mutex run_mutex_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  static constexpr int worker_bits = 16;
  static constexpr std::uint64_t worker_mask = (std::uint64_t{1} << worker_bits) - 1;
  std::uint64_t generation_ = 0;    // under mutex_
  std::atomic<std::uint64_t> job_{0};  // generation_ << worker_bits | the job's worker count
  std::atomic<int> remaining_{0};
  RangeFunction function_ = nullptr;
  const void* body_ = nullptr;
  std::int64_t count_ = 0;
  int workers_ = 0;
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

}  // namespace

int parallel_workers(std::int64_t count, int max_workers) {
  std::int64_t workers = std::min<std::int64_t>(Pool::instance().threads(), max_workers);
  workers = std::min(workers, count);
  return static_cast<int>(std::max<std::int64_t>(workers, 1));
}

void parallel_for(std::int64_t count, int max_workers, RangeFunction function, const void* body) {
  if (count <= 0) return;
  const int workers = inside_job ? 1 : parallel_workers(count, max_workers);
  if (workers == 1) {
    function(body, 0, count, 0);
    return;
  }
  Pool::instance().run(count, workers, function, body);
}

}  // namespace detail

void set_num_threads(int threads) {
  if (threads < 1)
    throw ValueError("set_num_threads: the number of threads must be at least 1, got " + std::to_string(threads));
  detail::Pool::instance().set_threads(threads);
}

int get_num_threads() { return detail::Pool::instance().threads(); }

}  // namespace kiln
