#include <kiln/core/detail/cpu_limits.hpp>

#include <sched.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace kiln::detail {

namespace {

// ceil(quota / period) for a positive quota and period, else 0.
int cpus_of(long long quota, long long period) {
  if (quota <= 0 || period <= 0) return 0;
  const long long cpus = (quota + period - 1) / period;
  return static_cast<int>(std::min<long long>(cpus, 1 << 16));
}

bool parse_number(const std::string& text, long long& value) {
  std::istringstream in(text);
  return static_cast<bool>(in >> value);
}

std::string first_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

// The cgroup path of `controller` in /proc/self/cgroup ("" for cgroup v2's unified line), or "" when absent.
bool cgroup_path(const std::string& controller, std::string& path) {
  std::ifstream in("/proc/self/cgroup");
  for (std::string line; std::getline(in, line);) {
    const std::size_t first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    bool match = controller.empty() ? controllers.empty() : false;
    for (std::size_t at = 0; !controller.empty() && at <= controllers.size();) {
      const std::size_t comma = std::min(controllers.find(',', at), controllers.size());
      match = match || controllers.substr(at, comma - at) == controller;
      at = comma + 1;
    }
    if (match) {
      path = line.substr(second + 1);
      return true;
    }
  }
  return false;
}

// The smallest nonzero limit `read(folder)` gives for `root` + `path` and each of its parents up to `root`.
template <class Read>
int tightest(const std::string& root, std::string path, Read read) {
  int best = 0;
  for (int depth = 0; depth < 64; ++depth) {
    const int cpus = read(root + path);
    if (cpus > 0) best = best == 0 ? cpus : std::min(best, cpus);
    if (path.empty() || path == "/") break;
    const std::size_t slash = path.rfind('/');
    path = slash == std::string::npos || slash == 0 ? std::string("/") : path.substr(0, slash);
  }
  return best;
}

}  // namespace

int cpus_from_cgroup2(const std::string& cpu_max) {
  std::istringstream in(cpu_max);
  std::string quota;
  long long period = 0, value = 0;
  if (!(in >> quota >> period) || quota == "max" || !parse_number(quota, value)) return 0;
  return cpus_of(value, period);
}

int cpus_from_cgroup1(const std::string& quota_us, const std::string& period_us) {
  long long quota = 0, period = 0;
  if (!parse_number(quota_us, quota) || !parse_number(period_us, period)) return 0;
  return cpus_of(quota, period);
}

int cgroup_cpu_limit() {
  std::string path;
  if (cgroup_path("", path)) {
    const int cpus = tightest("/sys/fs/cgroup", path, [](const std::string& folder) {
      return cpus_from_cgroup2(first_line(folder + "/cpu.max"));
    });
    if (cpus > 0) return cpus;
  }
  if (cgroup_path("cpu", path)) {
    for (const char* root : {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpuacct,cpu"}) {
      const int cpus = tightest(root, path, [](const std::string& folder) {
        return cpus_from_cgroup1(first_line(folder + "/cpu.cfs_quota_us"), first_line(folder + "/cpu.cfs_period_us"));
      });
      if (cpus > 0) return cpus;
    }
  }
  return 0;
}

int affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return 0;
  return CPU_COUNT(&set);
}

int available_cpus() {
  const int affinity = affinity_cpus(), quota = cgroup_cpu_limit();
  if (affinity > 0 && quota > 0) return std::min(affinity, quota);
  return std::max(affinity, quota);
}

int default_num_threads(int openblas) {
  const int threads = std::max(1, openblas);
  for (const char* variable : {"OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS"}) {
    const char* value = std::getenv(variable);
    if (value != nullptr && std::atoi(value) > 0) return threads;  // the user's choice, as OpenBLAS read it
  }
  const int cpus = available_cpus();
  return cpus > 0 ? std::min(threads, cpus) : threads;
}

}  // namespace kiln::detail
