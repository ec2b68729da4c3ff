#!/usr/bin/env bash
# Per-kernel thread scaling (issue 39): each benchmark model's train step (or forward) at 2 threads and at HIGH
# threads with KILN_PROFILE=1, and every kernel's time a call at HIGH over its time at 2. A model must not take
# more than 2x its 2-thread time, nor a kernel more than 3x, at any thread count, on any machine, this 2-core one
# too: more threads than cores must never collapse. Exits 1 when something is over.
#
#   scripts/kernel_scaling.sh [BUILD_DIR] [HIGH]     (defaults: build, 16)
#   KERNEL_SCALING_ONLY   only the workloads whose name matches this awk regex
#
# make bench THREADS="... 2 ... 16" runs it after the scaling table, with HIGH the largest count. Kernels below
# 0.5 ms in all (at HIGH threads) are left out: a few µs of noise on them is no collapse.
set -euo pipefail

build=${1:-build}
high=${2:-16}
kiln="$build/bench/kiln_bench"
[ -x "$kiln" ] || { echo "kernel_scaling: $kiln is missing: build with -DKILN_BUILD_BENCH=ON (make build)" >&2; exit 1; }

rows="mql5_block train_step
seed_mha train_step
cnn_small train_step
tcn train_step
norms train_step
noise train_step
rnn train_step
lstm train_step
char_gpt train_step
char_gpt forward"
if [ -n "${KERNEL_SCALING_ONLY:-}" ]; then
  rows=$(awk -v only="$KERNEL_SCALING_ONLY" '$1 ~ "^(" only ")$"' <<<"$rows")
  [ -n "$rows" ] || { echo "kernel_scaling: KERNEL_SCALING_ONLY='$KERNEL_SCALING_ONLY' matches no workload here"; exit 0; }
fi

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
over=0
printf "per-kernel scaling: %s threads over 2 (flags: a model above 2x, a kernel above 3x)\n" "$high"
while read -r workload mode; do
  for threads in 2 "$high"; do
    KILN_PROFILE=1 "$kiln" --workload "$workload" --mode "$mode" --threads "$threads" --iters 15 --warmup 3 \
      >"$out/$threads.txt" 2>&1
  done
  # The first line is kiln_bench's JSON; then the profile: ms, %, calls, µs a call, op (output shape).
  if ! awk -v high="$high" -v workload="$workload" -v mode="$mode" '
    function median_ms(line) { sub(/.*"ms_median":/, "", line); sub(/,.*/, "", line); return line + 0 }
    FNR == 1 { step[FILENAME == ARGV[1] ? "low" : "high"] = median_ms($0); next }
    $1 ~ /^[0-9.]+$/ && $2 ~ /%$/ && NF >= 5 {
      name = $5; for (i = 6; i <= NF; ++i) name = name " " $i
      if (FILENAME == ARGV[1]) low[name] = $4; else { highcall[name] = $4; total[name] = $1 }
    }
    END {
      r = step["high"] / step["low"]
      worst = ""; worst_r = 0; flagged = 0
      for (name in highcall) {
        if (!(name in low) || low[name] <= 0 || total[name] < 0.5) continue
        k = highcall[name] / low[name]
        if (k > worst_r) { worst_r = k; worst = name }
        if (k > 3) { printf "    kernel over 3x: %-40s %9.2f -> %9.2f us a call (%.2fx)\n", name, low[name], highcall[name], k; ++flagged }
      }
      printf "%-12s %-10s step %7.2f -> %7.2f ms (%.2fx)%s; slowest kernel %.2fx %s\n", workload, mode, step["low"],
             step["high"], r, (r > 2 ? "  <- over 2x" : ""), worst_r, worst
      exit ((r > 2 || flagged > 0) ? 1 : 0)
    }' "$out/2.txt" "$out/$high.txt"; then
    over=$((over + 1))
  fi
done <<<"$rows"
echo "$over workload(s) over"
[ "$over" -eq 0 ]
