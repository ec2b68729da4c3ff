#include <catch2/catch.hpp>

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <kiln/core/detail/cpu_limits.hpp>
#include <kiln/core/error.hpp>
#include <kiln/core/parallel.hpp>
#include <kiln/core/threads.hpp>

namespace {
// Restores the thread count a test changed.
struct KeepThreads {
  int saved = kiln::get_num_threads();
  ~KeepThreads() { kiln::set_num_threads(saved); }
};
}  // namespace

TEST_CASE("parallel_for covers every item once, in contiguous ranges, one per worker", "[threads]") {
  KeepThreads keep;
  for (int threads : {1, 2, 3, 5, 16}) {
    kiln::set_num_threads(threads);
    REQUIRE(kiln::get_num_threads() == threads);
    for (std::int64_t count : {1, 2, 7, 64, 1000}) {
      for (int max_workers : {1, 2, 100}) {
        std::vector<std::atomic<int>> hits(static_cast<std::size_t>(count));
        std::vector<std::atomic<int>> ranges_of_worker(16);
        const int expected_workers = kiln::detail::parallel_workers(count, max_workers);
        INFO("threads " << threads << " count " << count << " max_workers " << max_workers);
        REQUIRE(expected_workers >= 1);
        REQUIRE(expected_workers <= std::min<std::int64_t>({threads, count, max_workers}));
        std::atomic<int> empty_ranges{0};  // (Catch2 v2's assertions are not thread-safe: count, check after)
        kiln::detail::parallel_for(count, max_workers, [&](std::int64_t begin, std::int64_t end, int worker) {
          if (begin >= end) empty_ranges++;
          ranges_of_worker[static_cast<std::size_t>(worker)]++;
          for (std::int64_t i = begin; i < end; ++i) hits[static_cast<std::size_t>(i)]++;
        });
        REQUIRE(empty_ranges == 0);
        for (std::int64_t i = 0; i < count; ++i) REQUIRE(hits[static_cast<std::size_t>(i)] == 1);
        for (int worker = 0; worker < 16; ++worker)
          REQUIRE(ranges_of_worker[static_cast<std::size_t>(worker)] == (worker < expected_workers ? 1 : 0));
      }
    }
  }
}

TEST_CASE("parallel_for rethrows a range's exception on the caller, and the pool keeps working", "[threads]") {
  KeepThreads keep;
  kiln::set_num_threads(3);
  REQUIRE_THROWS_AS(kiln::detail::parallel_for(9, 3,
                                               [](std::int64_t begin, std::int64_t, int) {
                                                 if (begin > 0) throw std::runtime_error("range failed");
                                               }),
                    std::runtime_error);
  std::atomic<std::int64_t> total{0};
  kiln::detail::parallel_for(100, 3, [&](std::int64_t begin, std::int64_t end, int) {
    for (std::int64_t i = begin; i < end; ++i) total += i;
  });
  REQUIRE(total == 4950);
}

TEST_CASE("parallel_for inside a parallel_for runs serially instead of waiting for itself", "[threads]") {
  KeepThreads keep;
  kiln::set_num_threads(2);
  std::atomic<int> items{0}, inner_workers_above_0{0};
  kiln::detail::parallel_for(4, 2, [&](std::int64_t begin, std::int64_t end, int) {
    for (std::int64_t i = begin; i < end; ++i)
      kiln::detail::parallel_for(10, 2, [&](std::int64_t b, std::int64_t e, int worker) {
        if (worker != 0) inner_workers_above_0++;
        items += static_cast<int>(e - b);
      });
  });
  REQUIRE(items == 40);
  REQUIRE(inner_workers_above_0 == 0);
}

namespace {
// The threads of this process, from /proc.
int process_threads() {
  int count = 0;
  for (std::ifstream stat("/proc/self/status"); stat;) {
    std::string key;
    stat >> key;
    if (key == "Threads:") stat >> count;
    stat.ignore(1 << 20, '\n');
  }
  return count;
}
}  // namespace

TEST_CASE("more threads than CPUs: the ranges of that many threads, on no more pool threads than spare CPUs",
          "[threads]") {
  KeepThreads keep;
  const int cpus = kiln::detail::available_cpus();
  REQUIRE(cpus >= 1);
  const int threads = cpus + 14;
  kiln::set_num_threads(threads);
  const int before = process_threads();
  REQUIRE(before >= 1);
  for (int job = 0; job < 20; ++job) {
    const std::int64_t count = 1000;
    std::vector<std::atomic<std::int64_t>> begins(static_cast<std::size_t>(threads)), ends(begins.size());
    for (auto& begin : begins) begin = -1;
    kiln::detail::parallel_for(count, 1 << 16, [&](std::int64_t begin, std::int64_t end, int worker) {
      begins[static_cast<std::size_t>(worker)] = begin;
      ends[static_cast<std::size_t>(worker)] = end;
    });
    for (int worker = 0; worker < threads; ++worker) {
      INFO("worker " << worker << " of " << threads);
      REQUIRE(begins[static_cast<std::size_t>(worker)] == count * worker / threads);
      REQUIRE(ends[static_cast<std::size_t>(worker)] == count * (worker + 1) / threads);
    }
  }
  // The pool started at most one thread for each CPU but the caller's: more would only queue behind them.
  CHECK(process_threads() - before <= cpus - 1);
}

TEST_CASE("set_num_threads refuses fewer than one thread", "[threads]") {
  KeepThreads keep;
  REQUIRE_THROWS_AS(kiln::set_num_threads(0), kiln::ValueError);
  REQUIRE_THROWS_WITH(kiln::set_num_threads(-2), Catch::Contains("at least 1"));
  REQUIRE(kiln::get_num_threads() == keep.saved);
}

TEST_CASE("the pool takes jobs from several callers at once, each covered exactly once", "[threads][concurrency]") {
  KeepThreads keep;
  kiln::set_num_threads(2);
  constexpr int callers = 6, rounds = 300;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int caller = 0; caller < callers; ++caller)
    threads.emplace_back([&, caller] {
      for (int round = 0; round < rounds; ++round) {
        const std::int64_t count = 1 + (caller * 131 + round * 17) % 500;
        std::vector<int> hits(static_cast<std::size_t>(count), 0);
        std::atomic<int> ranges{0};
        kiln::detail::parallel_for(count, 8, [&](std::int64_t begin, std::int64_t end, int worker) {
          ranges++;
          // The ranges are a function of (count, workers) alone, whichever thread runs them.
          const int workers = kiln::detail::parallel_workers(count, 8);
          if (begin != count * worker / workers || end != count * (worker + 1) / workers) wrong++;
          for (std::int64_t i = begin; i < end; ++i) hits[static_cast<std::size_t>(i)]++;
        });
        for (int hit : hits)
          if (hit != 1) wrong++;
        if (ranges != kiln::detail::parallel_workers(count, 8)) wrong++;
      }
    });
  for (std::thread& thread : threads) thread.join();
  REQUIRE(wrong == 0);
}

TEST_CASE("a caller whose job is slow does not hold up another caller's job", "[threads][concurrency]") {
  KeepThreads keep;
  kiln::set_num_threads(2);
  std::atomic<bool> release{false}, quick_done{false};
  // The slow job's ranges wait until the quick job has finished: with one job at a time, this deadlocks.
  std::thread slow([&] {
    kiln::detail::parallel_for(2, 2, [&](std::int64_t, std::int64_t, int) {
      while (!release.load()) std::this_thread::yield();
    });
  });
  std::thread quick([&] {
    std::atomic<std::int64_t> total{0};
    kiln::detail::parallel_for(1000, 2, [&](std::int64_t begin, std::int64_t end, int) {
      for (std::int64_t i = begin; i < end; ++i) total += i;
    });
    quick_done = total == 499500;
    release = true;
  });
  quick.join();
  slow.join();
  REQUIRE(quick_done);
}

TEST_CASE("set_num_threads while other threads run jobs neither loses a range nor hangs", "[threads][concurrency]") {
  KeepThreads keep;
  std::atomic<bool> stop{false};
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int caller = 0; caller < 3; ++caller)
    threads.emplace_back([&] {
      while (!stop.load()) {
        std::atomic<std::int64_t> total{0};
        kiln::detail::parallel_for(100, 4, [&](std::int64_t begin, std::int64_t end, int) {
          for (std::int64_t i = begin; i < end; ++i) total += i;
        });
        if (total != 4950) wrong++;
      }
    });
  for (int change = 0; change < 50; ++change) kiln::set_num_threads(1 + change % 3);
  stop = true;
  for (std::thread& thread : threads) thread.join();
  REQUIRE(wrong == 0);
}

TEST_CASE("the default thread count follows the CPUs the process may use: affinity, cgroup quota, environment",
          "[threads]") {
  // cgroup v2's cpu.max and v1's quota and period: the quota's CPUs, rounded up; none for "max" and -1.
  CHECK(kiln::detail::cpus_from_cgroup2("200000 100000") == 2);
  CHECK(kiln::detail::cpus_from_cgroup2("150000 100000") == 2);
  CHECK(kiln::detail::cpus_from_cgroup2("50000 100000") == 1);
  CHECK(kiln::detail::cpus_from_cgroup2("max 100000") == 0);
  CHECK(kiln::detail::cpus_from_cgroup2("") == 0);
  CHECK(kiln::detail::cpus_from_cgroup2("garbage") == 0);
  CHECK(kiln::detail::cpus_from_cgroup1("400000", "100000") == 4);
  CHECK(kiln::detail::cpus_from_cgroup1("-1", "100000") == 0);
  CHECK(kiln::detail::cpus_from_cgroup1("100000", "0") == 0);
  CHECK(kiln::detail::cpus_from_cgroup1("", "") == 0);

  // This thread pinned to one CPU: the default, without the environment's say, is 1 however many CPUs OpenBLAS saw.
  const char* variables[] = {"OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"};
  std::vector<std::pair<std::string, std::string>> saved;
  for (const char* variable : variables)
    if (const char* value = std::getenv(variable)) saved.emplace_back(variable, value);
  for (const char* variable : variables) ::unsetenv(variable);
  cpu_set_t mask, one;
  REQUIRE(::sched_getaffinity(0, sizeof mask, &mask) == 0);
  const int cpus = CPU_COUNT(&mask);
  CHECK(kiln::detail::affinity_cpus() == cpus);
  const int quota = kiln::detail::cgroup_cpu_limit();
  CHECK(kiln::detail::default_num_threads(1000) == (quota > 0 ? std::min(cpus, quota) : cpus));
  CPU_ZERO(&one);
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
    if (CPU_ISSET(cpu, &mask)) {
      CPU_SET(cpu, &one);
      break;
    }
  REQUIRE(::sched_setaffinity(0, sizeof one, &one) == 0);
  CHECK(kiln::detail::affinity_cpus() == 1);
  CHECK(kiln::detail::default_num_threads(1000) == 1);
  CHECK(kiln::detail::default_num_threads(0) == 1);
  // OPENBLAS_NUM_THREADS set: the user's count (OpenBLAS's reading of it) stands.
  ::setenv("OPENBLAS_NUM_THREADS", "6", 1);
  CHECK(kiln::detail::default_num_threads(6) == 6);
  ::unsetenv("OPENBLAS_NUM_THREADS");
  REQUIRE(::sched_setaffinity(0, sizeof mask, &mask) == 0);
  for (const auto& [variable, value] : saved) ::setenv(variable.c_str(), value.c_str(), 1);
}
