// kiln::set_num_threads and the pool behind detail::parallel_for.
//
// The pool keeps get_num_threads() − 1 threads, or fewer (below). Callers on any number of threads share it: each job
// sits in a slot of its own, its caller works through its ranges and the pool's threads take ranges from any slot that
// has some left, so two Programs running at once on two threads both progress and neither waits for the other (a caller
// never waits for the pool: it claims whatever ranges are left itself). Which thread runs a range never changes the
// ranges, so results are bitwise the same for any mix of callers. Between jobs a pool thread spins briefly on the job
// counter (a training step runs kernels back to back, and a futex wake-up costs more than a small kernel), then sleeps
// on a condition variable.
//
// More threads than CPUs: the pool starts no more threads than the process has CPUs besides the caller's (its
// affinity mask and cgroup quota). A job still has get_num_threads() ranges, each run as range i whichever thread
// takes it, so results do not change; but no range waits for a thread the OS has set aside, and the same few
// threads do the work. A claim then takes a thread's share of the ranges in a row (ranges ÷ threads that can run),
// so each works through neighbouring rows, those the kernel before most likely left in its cache, as with one
// range a thread: 10 ranges of a bias add claimed one at a time by 2 threads took 3.5× as long. (Starting them all and
// letting only that many run at once, the seat each took passed from sleeper to sleeper: a thread woken after a while
// is queued on the CPU it last ran on, often the caller's, and the caller and it took turns on one CPU while the other
// idled. On 2 cores, char_gpt's LayerNorm took 3.3× its 2-thread time at 16 threads, and a GEMM cut into 16 column
// slices 4.3×.)
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

#include <kiln/core/detail/cpu_limits.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/parallel.hpp>

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

// One job at a time per slot. Its ticket packs the job's generation, its number of ranges and the next
// range to claim into one word: a range is claimed by one compare-and-swap, which fails if the slot has
// moved on to another job, so a thread that looked at an old job can never run a range of a new one.
struct Slot {
  static constexpr int range_bits = 16;
  static constexpr std::uint64_t range_mask = (std::uint64_t{1} << range_bits) - 1;
  static std::uint64_t ranges_of(std::uint64_t ticket) { return (ticket >> range_bits) & range_mask; }
  static std::uint64_t next_of(std::uint64_t ticket) { return ticket & range_mask; }

  std::atomic<bool> taken{false};        // a caller owns the slot
  std::atomic<std::uint64_t> ticket{0};  // generation << 32 | ranges << 16 | next range
  std::atomic<RangeFunction> function{nullptr};
  std::atomic<const void*> body{nullptr};
  std::atomic<std::int64_t> count{0};
  std::atomic<int> done{0};   // ranges finished
  std::atomic<int> chunk{1};  // ranges a claim takes at once
  std::mutex error_mutex;
  std::exception_ptr error;

  // The next unclaimed ranges of the current job, [first, first + taken); false when none is left. A claim takes
  // up to `chunk` ranges in a row, so with more ranges than threads to run them each thread works through
  // neighbouring ones, as it would through one range of its own: the rows a kernel's ranges cover are those the
  // kernel before it left in the same thread's cache.
  bool claim(std::uint64_t& first, std::uint64_t& taken, std::uint64_t& ranges) {
    std::uint64_t seen = ticket.load(std::memory_order_acquire);
    const auto most = static_cast<std::uint64_t>(chunk.load(std::memory_order_relaxed));
    for (;;) {
      ranges = ranges_of(seen);
      first = next_of(seen);
      if (first >= ranges) return false;
      taken = std::min(most, ranges - first);
      if (ticket.compare_exchange_weak(seen, seen + taken, std::memory_order_acq_rel, std::memory_order_acquire))
        return true;
    }
  }

  // Runs claimed ranges; the job's fields stay put until every range is done.
  void run(std::uint64_t first, std::uint64_t taken, std::uint64_t ranges) {
    const std::int64_t total = count.load(std::memory_order_relaxed);
    const auto n = static_cast<std::int64_t>(ranges);
    for (auto r = static_cast<std::int64_t>(first); r < static_cast<std::int64_t>(first + taken); ++r) {
      try {
        function.load(std::memory_order_relaxed)(body.load(std::memory_order_relaxed), total * r / n,
                                                 total * (r + 1) / n, static_cast<int>(r));
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mutex);
        if (!error) error = std::current_exception();
      }
    }
    done.fetch_add(static_cast<int>(taken), std::memory_order_acq_rel);
  }

  // Claims and runs ranges until none is left; true if it ran any.
  bool help() {
    bool worked = false;
    for (std::uint64_t first = 0, taken = 0, ranges = 0; claim(first, taken, ranges); worked = true)
      run(first, taken, ranges);
    return worked;
  }
};

class Pool {
 public:
  static Pool& instance() {
    static Pool pool;
    return pool;
  }

  ~Pool() {
    std::lock_guard<std::mutex> lock(threads_mutex_);
    stop_threads();
  }

  int threads() const { return threads_.load(std::memory_order_relaxed); }

  void set_threads(int threads) {
    threads = std::min<int>(threads, static_cast<int>(Slot::range_mask));
    std::lock_guard<std::mutex> lock(threads_mutex_);
    stop_threads();
    threads_.store(threads, std::memory_order_relaxed);
  }

  void run(std::int64_t count, int workers, RangeFunction function, const void* body) {
    Slot* slot = take_slot();
    if (slot == nullptr) {  // more callers at once than slots: this one runs its ranges itself, in order
      for (int worker = 0; worker < workers; ++worker)
        function(body, count * worker / workers, count * (worker + 1) / workers, worker);
      return;
    }
    start_threads(workers - 1);
    slot->function.store(function, std::memory_order_relaxed);
    slot->body.store(body, std::memory_order_relaxed);
    slot->count.store(count, std::memory_order_relaxed);
    slot->done.store(0, std::memory_order_relaxed);
    // The threads that can run at once, the caller and the pool's (no more than the CPUs): a claim takes a
    // share of the ranges each (one each when there are no more ranges than threads).
    const int running = 1 + std::min(workers - 1, max_pool_threads_);
    slot->chunk.store((workers + running - 1) / running, std::memory_order_relaxed);
    slot->error = nullptr;
    const std::uint64_t generation = (slot->ticket.load(std::memory_order_relaxed) >> 32) + 1;
    slot->ticket.store(generation << 32 | static_cast<std::uint64_t>(workers) << Slot::range_bits,
                       std::memory_order_release);
    announce(workers - 1);
    inside_job = true;
    slot->help();
    inside_job = false;
    for (int spins = 0; slot->done.load(std::memory_order_acquire) != workers; ++spins) {
      if (spins < 20000)
        cpu_relax();
      else
        std::this_thread::yield();
    }
    std::exception_ptr error = slot->error;
    slot->taken.store(false, std::memory_order_release);
    if (error) std::rethrow_exception(error);
  }

 private:
  // Enough for every thread of a busy server to have a job in flight; a caller that finds none free
  // still runs, on its own.
  static constexpr int kSlots = 32;

  Pool()
      : threads_(default_num_threads(openblas_get_num_threads())), max_pool_threads_([] {
          const int cpus = available_cpus();
          return cpus > 0 ? cpus - 1 : 1 << 16;  // unknown: no cap
        }()) {
    openblas_set_num_threads(1);
  }

  Slot* take_slot() {
    for (Slot& slot : slots_)
      if (!slot.taken.load(std::memory_order_relaxed) && !slot.taken.exchange(true, std::memory_order_acquire))
        return &slot;
    return nullptr;
  }

  // A new job with `helpers` ranges for pool threads: as many sleeping pool threads wake as it has ranges for.
  // (Both sides use seq_cst: either this sees a sleeper and wakes it, or the sleeper sees the new count and does
  // not sleep.) A sleeper left asleep keeps its stale count and helps when next woken; the caller runs any range
  // no pool thread takes, so no job waits for a thread that was not woken.
  void announce(int helpers) {
    jobs_.fetch_add(1, std::memory_order_seq_cst);
    const int sleeping = sleepers_.load(std::memory_order_seq_cst);
    if (sleeping > 0 && helpers > 0) {
      { std::lock_guard<std::mutex> lock(sleep_mutex_); }
      if (helpers >= sleeping) {
        wake_.notify_all();
      } else {
        for (int i = 0; i < helpers; ++i) wake_.notify_one();
      }
    }
  }

  void work() {
    inside_job = true;
    for (;;) {
      const std::uint64_t seen = jobs_.load(std::memory_order_seq_cst);
      bool worked = false;
      for (Slot& slot : slots_) worked = slot.help() || worked;
      if (stopping_.load(std::memory_order_acquire)) return;
      if (worked) continue;
      bool changed = false;
      for (int spins = 0; spins < 4000 && !changed; ++spins) {
        cpu_relax();
        changed = jobs_.load(std::memory_order_acquire) != seen || stopping_.load(std::memory_order_relaxed);
      }
      if (changed) continue;
      std::unique_lock<std::mutex> lock(sleep_mutex_);
      sleepers_.fetch_add(1, std::memory_order_seq_cst);
      wake_.wait(lock, [&] { return stopping_.load() || jobs_.load(std::memory_order_seq_cst) != seen; });
      sleepers_.fetch_sub(1, std::memory_order_seq_cst);
    }
  }

  // Up to `wanted` pool threads, no more than max_pool_threads_.
  void start_threads(int wanted) {
    wanted = std::min(wanted, max_pool_threads_);
    if (started_.load(std::memory_order_acquire) >= wanted) return;
    std::lock_guard<std::mutex> lock(threads_mutex_);
    while (static_cast<int>(pool_.size()) < wanted) pool_.emplace_back([this] { work(); });
    started_.store(static_cast<int>(pool_.size()), std::memory_order_release);
  }

  // Under threads_mutex_. Callers keep running meanwhile: they claim their own ranges.
  void stop_threads() {
    {
      std::lock_guard<std::mutex> lock(sleep_mutex_);
      stopping_.store(true, std::memory_order_release);
    }
    wake_.notify_all();
    for (std::thread& thread : pool_) thread.join();
    pool_.clear();
    started_.store(0, std::memory_order_release);
    stopping_.store(false, std::memory_order_release);
  }

  std::atomic<int> threads_;
  const int max_pool_threads_;  // the process's CPUs but the caller's
  Slot slots_[kSlots];
  std::atomic<std::uint64_t> jobs_{0};  // jobs announced so far
  std::atomic<int> sleepers_{0};
  std::mutex sleep_mutex_;
  std::condition_variable wake_;
  std::atomic<bool> stopping_{false};
  std::mutex threads_mutex_;  // starting and stopping threads
  std::vector<std::thread> pool_;
  std::atomic<int> started_{0};
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
