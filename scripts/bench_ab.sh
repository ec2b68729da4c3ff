#!/usr/bin/env bash
# Before and after: two builds of kiln_bench on the same machine, alternating fresh processes (old, new) for
# three rounds per row, and the median of each one's medians in ms. For a change's effect on a noisy machine,
# where a whole `make bench` minutes apart would mostly measure the machine.
#   bash scripts/bench_ab.sh OLD_BUILD/bench/kiln_bench NEW_BUILD/bench/kiln_bench [ROWS_FILE]
# ROWS_FILE has one row a line, "workload mode threads seq" (seq "-" for the workload's own); without it, the
# rows below. An old build: `git worktree add ../old <commit>` and configure it with KILN_BUILD_TESTS=OFF.
set -euo pipefail
old=${1:?usage: bench_ab.sh OLD_KILN_BENCH NEW_KILN_BENCH [ROWS_FILE]}
new=${2:?usage: bench_ab.sh OLD_KILN_BENCH NEW_KILN_BENCH [ROWS_FILE]}
default_rows="mql5_block forward 1 -
mql5_block forward 2 -
mql5_block train_step 1 -
mql5_block train_step 2 -
seed_dpa forward 1 -
seed_mha forward 1 -
seed_mha train_step 1 -
seed_mha train_step 2 -
char_gpt forward 1 -
char_gpt train_step 1 -
char_gpt train_step 2 -
long_mha train_step 1 256
long_mha train_step 1 512
lstm train_step 1 -
rnn train_step 1 -
cnn_small train_step 1 -
tcn train_step 1 -
norms train_step 1 -"
rows=$default_rows
[ $# -ge 3 ] && rows=$(cat "$3")

median_ms() {  # the ms_median of one run of kiln_bench "$@"
  "$@" 2>/dev/null | tail -1 | grep -o '"ms_median":[0-9.]*' | cut -d: -f2
}

echo "$rows" | while read -r workload mode threads seq; do
  [ -z "$workload" ] && continue
  extra=()
  [ "$seq" != - ] && extra=(--seq "$seq")
  olds=() news=()
  for round in 1 2 3; do
    olds+=("$(median_ms "$old" --workload "$workload" --mode "$mode" --threads "$threads" "${extra[@]}")")
    news+=("$(median_ms "$new" --workload "$workload" --mode "$mode" --threads "$threads" "${extra[@]}")")
  done
  old_ms=$(printf '%s\n' "${olds[@]}" | sort -g | sed -n 2p)
  new_ms=$(printf '%s\n' "${news[@]}" | sort -g | sed -n 2p)
  awk -v w="$workload" -v m="$mode" -v t="$threads" -v q="$seq" -v o="$old_ms" -v n="$new_ms" \
    'BEGIN { printf "%-11s %-10s %s %5s | old %8.2f  new %8.2f  new/old %.2f\n", w, m, t, q, o, n, n / o }'
done
