#pragma once
// How many threads kiln computes with, as torch::set_num_threads sets libtorch's.
namespace kiln {

/// The threads kiln's kernels split their work over, GEMMs included: kiln splits large products over its
/// own threads and runs OpenBLAS single-threaded in each (kiln sets OpenBLAS to one thread when it starts
/// its pool, which also affects other OpenBLAS calls in the process). At least 1. The default is
/// OPENBLAS_NUM_THREADS (or GOTO_NUM_THREADS, OMP_NUM_THREADS, as OpenBLAS reads them) when set; else the CPUs
/// the process may run on: those of its affinity mask (taskset, a container's cpuset), capped by its cgroup's
/// CPU quota rounded up (a container started with --cpus=2 on a 64-core host gets 2).
///
/// It takes effect at the next kernel. A kernel that keeps scratch per thread uses at most as many
/// threads as when its Program was planned (compile, or the first step of a new batch size).
void set_num_threads(int threads);
/// The threads kiln's kernels use: the last set_num_threads(), or the default described there.
int get_num_threads();

}  // namespace kiln
