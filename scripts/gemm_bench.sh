#!/usr/bin/env bash
# The GEMM-library table of bench/RESULTS.md: the benchmark models' products in OpenBLAS, BLIS, libxsmm, oneDNN
# (its matmul primitive and its dnnl_sgemm) and kiln's detail::gemm (with the library it ran each on), each on one
# thread and one core (taskset -c 0), as GFLOP/s per shape; "kiln/best" is kiln's rate over the best library's.
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
  if (lib == "kiln") backend[shape] = field($0, "backend")
  else if (field($0, "supported") != "false" && field($0, "gflops") + 0 > best[shape]) best[shape] = field($0, "gflops") + 0
}
END {
  n = split("openblas blis libxsmm onednn onednn_sgemm kiln", names, " ")
  printf "%-38s %-18s", "shape (where it comes from)", "m x n x k x count"
  for (i = 1; i <= n; ++i) if (names[i] in libs) printf " %9s", names[i]
  printf "  %-12s %9s\n", "kiln runs it", "kiln/best"
  for (j = 1; j <= count; ++j) {
    s = order[j]
    if (dims[s] == "xx x") dims[s] = ""
    printf "%-38s %-18s", s, dims[s]
    for (i = 1; i <= n; ++i) if (names[i] in libs) printf " %9s", ((s, names[i]) in rate) ? rate[s, names[i]] : "-"
    k = ((s, "kiln") in rate) ? rate[s, "kiln"] + 0 : 0
    printf "  %-12s %9s\n", backend[s], (k > 0 && best[s] > 0) ? sprintf("%.2f", k / best[s]) : "-"
  }
  printf "GFLOP/s, 1 thread on 1 core; n/a: the library has no kernel for that transpose; kiln: its detail::gemm\n"
}' "$out"
