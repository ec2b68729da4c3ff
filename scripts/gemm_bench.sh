#!/usr/bin/env bash
# The GEMM-library table of bench/RESULTS.md: kiln's small products (and one large one) in OpenBLAS, BLIS,
# libxsmm and oneDNN, each on one thread and one core (taskset -c 0), as GFLOP/s per shape.
#
#   scripts/gemm_bench.sh [BUILD_DIR]     (the libraries: scripts/install-peer.sh; then configure BUILD_DIR again)
#   GEMM_MIN_TIME    seconds per shape and library (default 0.5)
set -euo pipefail

build=${1:-build}
min_time=${GEMM_MIN_TIME:-0.5}
out="$build/bench/gemm.jsonl"
: >"$out"
pin=()
command -v taskset >/dev/null && pin=(taskset -c 0)
for library in openblas blis xsmm dnnl kiln; do
  binary="$build/bench/gemm_bench_$library"
  if [ ! -x "$binary" ]; then
    echo "gemm_bench: $binary is not built (scripts/install-peer.sh installs the library; configure again)" >&2
    continue
  fi
  OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 BLIS_NUM_THREADS=1 "${pin[@]}" "$binary" --min-time "$min_time" >>"$out"
done
awk '
function field(line, key,    m) {
  if (match(line, "\"" key "\":\"?[^,}\"]*")) { m = substr(line, RSTART, RLENGTH); sub("^\"" key "\":\"?", "", m); return m }
  return ""
}
{
  shape = field($0, "shape")
  if (!(shape in seen)) { seen[shape] = 1; order[++count] = shape; dims[shape] = field($0, "m") "x" field($0, "n") "x" field($0, "k") " x" field($0, "count") }
  lib = field($0, "library"); libs[lib] = 1
  rate[shape, lib] = field($0, "supported") == "false" ? "n/a" : sprintf("%.1f", field($0, "gflops"))
}
END {
  n = split("openblas blis libxsmm onednn kiln", names, " ")
  printf "%-38s %-18s", "shape (where kiln runs it)", "m x n x k x count"
  for (i = 1; i <= n; ++i) if (names[i] in libs) printf " %9s", names[i]
  printf "\n"
  for (j = 1; j <= count; ++j) {
    s = order[j]
    if (dims[s] == "xx x") dims[s] = ""
    printf "%-38s %-18s", s, dims[s]
    for (i = 1; i <= n; ++i) if (names[i] in libs) printf " %9s", ((s, names[i]) in rate) ? rate[s, names[i]] : "-"
    printf "\n"
  }
  printf "GFLOP/s, 1 thread on 1 core; n/a: the library has no kernel for that transpose; kiln: its detail::gemm\n"
}' "$out"
