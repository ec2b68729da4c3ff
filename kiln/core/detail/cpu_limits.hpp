#pragma once
// The CPUs this process may use, for kiln's default thread count: its affinity mask (taskset, cpusets, a
// container's --cpuset-cpus) and its cgroup's CPU quota (a container's --cpus, Kubernetes' CPU limit), which
// caps the time its threads get however many cores the host has.
#include <string>

namespace kiln::detail {

/// The CPUs a cgroup v2 cpu.max allows ("200000 100000": 2; "150000 100000": 2, rounded up), 0 for "max ..."
/// (no quota) or text that does not parse.
int cpus_from_cgroup2(const std::string& cpu_max);
/// The same from cgroup v1's cpu.cfs_quota_us and cpu.cfs_period_us; 0 for a quota of -1 (none).
int cpus_from_cgroup1(const std::string& quota_us, const std::string& period_us);

/// The tightest CPU quota on this process's cgroup and its parents (v2, then v1), 0 when there is none or it
/// cannot be read.
int cgroup_cpu_limit();
/// The CPUs in this process's affinity mask, 0 when it cannot be read.
int affinity_cpus();

/// The CPUs this process may keep busy at once: its affinity mask's, capped by its cgroup quota; 0 when neither
/// can be read.
int available_cpus();

/// kiln's default thread count. OPENBLAS_NUM_THREADS, GOTO_NUM_THREADS or OMP_NUM_THREADS when one is set (as
/// OpenBLAS reads them, `openblas` is its count); else `openblas` (the CPUs OpenBLAS found) capped by the
/// affinity mask and the cgroup quota. At least 1.
int default_num_threads(int openblas);

}  // namespace kiln::detail
