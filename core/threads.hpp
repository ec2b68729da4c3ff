#pragma once
// How many threads kiln computes with, as torch::set_num_threads sets libtorch's.
namespace kiln {

// The threads kiln's own kernels (fused attention, softmax, layer normalization, ...) split their work
// over, and the threads OpenBLAS runs GEMMs with: one number for both, so neither oversubscribes the
// cores. At least 1. The default is OpenBLAS's (OPENBLAS_NUM_THREADS, else every core).
//
// It takes effect at the next kernel. A kernel that keeps scratch per thread uses at most as many
// threads as when its Program was planned (compile, or the first step of a new batch size).
void set_num_threads(int threads);
int get_num_threads();

}  // namespace kiln
