#!/usr/bin/env bash
# make bench: kiln against libtorch (the peer, bench/torch_bench) and raw OpenBLAS sgemm, in one run.
#
#   scripts/bench.sh [BUILD_DIR]        (default: build; make bench passes $(BUILD_DIR))
#   BENCH_QUICK=1    a fast subset: every workload but long_mha at sequence 512 only, one round, short timing
#   BENCH_THREADS    thread counts to run (default "1 2"; make bench THREADS="1 2 4 8 16" sets it). With 2
#                    and more counts, a scaling table follows: each count's kiln time over its 2-thread time,
#                    flagged where a count above 2 takes more than 2x (issue 39: more threads must never
#                    collapse, on a machine with fewer cores than threads too); then each model's kernels at
#                    the largest count over 2 threads (scripts/kernel_scaling.sh), a kernel above 3x flagged.
#   BENCH_ROUNDS     rounds per row (default 3; 1 with BENCH_QUICK)
#   BENCH_ONLY       only the workloads whose name matches this awk regex ("rnn", "norms|noise")
#   BENCH_PEER_ENV   environment for the peers' processes; default "OMP_WAIT_POLICY=passive GLIBC_TUNABLES=
#                    glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967296" (set it to ""
#                    for libtorch's defaults). Debian's libtorch runs its own kernels on GNU OpenMP threads,
#                    which spin between parallel regions by default, and its GEMMs on OpenBLAS's pthreads: at
#                    2 threads on 2 cores the two pools fight, and the peer's GEMM-heavy rows run 2.5-3x
#                    slower (measured on an idle machine: seed_dpa forward 12 -> 4 ms, seed_mha train step
#                    200 -> 75 ms with passive waiting; never slower). And PyTorch allocates every step's
#                    tensors anew: glibc gives large blocks back to the OS when freed (mmap, trimming), so each
#                    step faults its pages in again, ~900 a step on mql5_block, and on a hypervisor where a fault
#                    is slow that is most of the step (libtorch's cnn_small train step 108 -> 23 ms, mql5_block's
#                    26-43 -> 12 ms with glibc told to keep them). kiln allocates nothing in a step. The bench
#                    compares against the better peer.
#
# Every measurement is a fresh process (so each row's peak memory is its own), and kiln and the peer run
# alternately, round after round (the order flips every round), so load from the rest of the machine hits
# both alike; a row's time is the median over rounds of each process's median step time, and its memory
# the median of the peak RSS above the process's baseline. The sgemm column times, in one more process,
# just the row's GEMMs (same shapes, transposes and batch counts) with cblas_sgemm: "% sgemm" is that time
# over an implementation's time, i.e. the implementation's fraction of OpenBLAS's own sgemm throughput.
# Every JSON line lands in BUILD_DIR/bench/results.jsonl. Needs only bash, awk and coreutils.
set -euo pipefail

build=${1:-build}
kiln="$build/bench/kiln_bench"
torch="$build/bench/torch_bench"
quick=${BENCH_QUICK:-0}
[ "$quick" = "0" ] && quick=""
threads_list=${BENCH_THREADS:-"1 2"}
[ -z "${threads_list// /}" ] && threads_list="1 2"
rounds=${BENCH_ROUNDS:-$([ -n "$quick" ] && echo 1 || echo 3)}

if [ ! -x "$kiln" ]; then
  echo "bench: $kiln is missing: build with -DKILN_BUILD_BENCH=ON (make build)" >&2
  exit 1
fi

# libtorch installed after this build directory was configured: configure again so the peer is built.
if [ ! -x "$torch" ] && compgen -G "/usr/lib/*/cmake/Torch/TorchConfig.cmake" >/dev/null; then
  echo "bench: libtorch is installed; configuring $build again to build the peer"
  cmake -S "$(dirname "$0")/.." -B "$build" >/dev/null
  cmake --build "$build" --target torch_bench -j"${JOBS:-2}" >/dev/null || true
fi
have_peer=""
[ -x "$torch" ] && have_peer=1
read -r -a peer_env <<<"${BENCH_PEER_ENV-OMP_WAIT_POLICY=passive GLIBC_TUNABLES=glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=4294967296}"
peer=(env "${peer_env[@]}" "$torch")
# PyTorch in Python (bench/torch_peer.py, eager), when a python3 here imports torch: BENCH_PYTHON, else python3 on
# the PATH, else Debian's /usr/bin/python3 (scripts/install-peer.sh installs its python3-torch, 1.13; a machine with
# PyTorch 2 gets the comparison that matters today). It runs the rows it has a port of.
py_peer_rows="seed_mha mql5_block long_mha cnn_small lstm char_gpt"
have_py=""
py_version=""
for python in ${BENCH_PYTHON:-python3 /usr/bin/python3}; do
  if py_version=$("$python" -c 'import torch; print(torch.__version__)' 2>/dev/null); then
    have_py=1
    py_python=$python
    py_peer=(env "${peer_env[@]}" "$python" "$(dirname "$0")/../bench/torch_peer.py")
    break
  fi
done
# oneDNN's own primitives (bench/dnnl_bench, built when libdnnl-dev is installed: make install-peer): what
# PyTorch 2 runs underneath, on the rows it has a composition of (lstm; rnn: its LSTM and linear-before-reset GRU;
# cnn_small: its convolutions with ReLU, batch norm, pooling and inner product, forward and train step).
# GNU OpenMP's default waiting (spin, then sleep) as PyTorch has it: oneDNN's RNN meets at a barrier every time
# step, and with passive waiting its 2-thread LSTM runs slower than its 1-thread one here.
dnnl="$build/bench/dnnl_bench"
dnnl_rows="lstm rnn cnn_small"
have_dnnl=""
[ -x "$dnnl" ] && have_dnnl=1
dnnl_row() {
  [ -n "$have_dnnl" ] && [[ " $dnnl_rows " == *" $1 "* ]] && { [ "$2" = forward ] || [ "$2" = train_step ]; }
}
py_row() { [ -n "$have_py" ] && [[ " $py_peer_rows " == *" $1 "* ]] && { [ "$2" = forward ] || [ "$2" = train_step ]; }; }

# workload mode seq, one row a line: every workload at its one size, then long_mha over sequence lengths
# (only 512 when quick).
rows="seed_dpa forward -
seed_mha forward -
seed_mha train_step -
mql5_block forward -
mql5_block train_step -
cnn_small forward -
cnn_small train_step -
tcn train_step -
norms forward -
norms train_step -
noise train_step -
rnn forward -
rnn train_step -
lstm forward -
lstm train_step -
char_gpt forward -
char_gpt train_step -
char_gpt_generate generate -
gpt2_small_generate generate -
bert_base forward -
resnet50 forward -
resnet50 train_step -
mobilenet_v2 forward -
stock_demo latency -
mql5_block latency -
seed_mha latency -
mobilenet_v2 latency -"
if [ -n "$quick" ]; then
  rows="$rows
long_mha forward 512
long_mha train_step 512"
  timing=(--warmup 3 --min-time 0.3 --max-time 1)
else
  for mode in forward train_step; do
    for seq in 256 512 1024 2048; do rows="$rows
long_mha $mode $seq"; done
  done
  timing=(--warmup 3 --min-time 1 --max-time 2)
fi

if [ -n "${BENCH_ONLY:-}" ]; then
  rows=$(awk -v only="$BENCH_ONLY" '$1 ~ "^(" only ")$"' <<<"$rows")
  [ -n "$rows" ] || { echo "bench: BENCH_ONLY='$BENCH_ONLY' matches no workload" >&2; exit 1; }
fi

results="$build/bench/results.jsonl"
: >"$results"

# Timing flags for one row: a step of the largest rows takes seconds, so they warm up once (the first
# step plans and allocates; later ones do not), time 3 steps, and run 2 rounds at most (keeps make bench
# under about 10 minutes on 2 busy cores).
big_row() {
  { [ "$1" = long_mha ] && [ "$3" != - ] && [ "$3" -ge 2048 ]; } || [ "$1" = resnet50 ] || [ "$1" = mobilenet_v2 ] ||
    [ "$1" = gpt2_small_generate ] || [ "$1" = bert_base ]
}
row_timing() {
  if big_row "$@"; then echo "--warmup 1 --min-time 1 --max-time 1"; else echo "${timing[*]}"; fi
}
row_rounds() {
  if big_row "$@" && [ "$rounds" -gt 2 ] && [ -z "${BENCH_ROUNDS:-}" ]; then echo 2; else echo "$rounds"; fi
}

# Runs one process and appends its JSON line to $results; prints nothing on success.
measure() {
  local line
  if ! line=$("$@" 2>&1); then
    echo "bench: failed: $*" >&2
    echo "$line" >&2
    return 1
  fi
  echo "$line" >>"$results"
}

cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo 2>/dev/null || echo unknown)
echo "kiln bench: $(nproc) cores ($cpu), threads {$threads_list}, $rounds round(s) (2 at sequence 2048)${quick:+, BENCH_QUICK}"
echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg); compilers running: $(pgrep -c 'cc1plus|clang' || true); peer environment: ${peer_env[*]:-(libtorch defaults)}"
echo "peers: torch = libtorch $( [ -n "$have_peer" ] && echo "(C++, bench/torch_bench)" || echo "(not built)"); pytorch = $( [ -n "$have_py" ] && echo "PyTorch $py_version in $py_python (eager, bench/torch_peer.py)" || echo "(no python3 here imports torch)"); onednn = $( [ -n "$have_dnnl" ] && echo "oneDNN's primitives (bench/dnnl_bench) on: $dnnl_rows" || echo "(not built: make install-peer)")"
if [ -n "$have_peer" ]; then
  printf "agreement (mql5_block forward, same weights): "
  "$torch" --check || { echo "bench: kiln and the peer disagree: the comparison is not apples to apples" >&2; exit 1; }
fi
started=$(date +%s)

# awk functions the two tables share: a JSON field, the median of a list, a ratio, a percentage.
awk_lib='
function field(line, key,    m) {
  if (match(line, "\"" key "\":\"?[^,}\"]*")) {
    m = substr(line, RSTART, RLENGTH)
    sub("^\"" key "\":\"?", "", m)
    return m
  }
  return ""
}
function median(list,    n, v, i, j, t) {
  n = split(list, v, " ")
  if (n == 0) return ""
  for (i = 1; i <= n; ++i) v[i] += 0
  for (i = 2; i <= n; ++i) for (j = i; j > 1 && v[j - 1] > v[j]; --j) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
  return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
}
function ratio(a, b) { return (a == "" || b == "" || b + 0 == 0) ? "-" : sprintf("%.2f", a / b) }
function pct(a, b) { return (a == "" || b == "" || a + 0 == 0 || b + 0 == 0) ? "-" : sprintf("%.0f%%", 100 * a / b) }
function num(v, fmt) { return v == "" ? "-" : sprintf(fmt, v) }
'

for threads in $threads_list; do
  while read -r workload mode seq; do
    seqargs=()
    [ "$seq" != - ] && seqargs=(--seq "$seq")
    read -r -a flags <<<"$(row_timing "$workload" "$mode" "$seq")"
    # latency: one sample's predict, timed call by call (10,000 calls; 1,000 for seed_mha's and mobilenet_v2's ms ones).
    [ "$mode" = latency ] && flags=(--calls "$(case $workload in seed_mha | mobilenet_v2) echo 1000 ;; *) echo 10000 ;; esac)")
    common=(--workload "$workload" --mode "$mode" --threads "$threads" "${seqargs[@]}" "${flags[@]}")
    row_rounds=$(row_rounds "$workload" "$mode" "$seq")
    for ((round = 1; round <= row_rounds; ++round)); do
      if [ $((round % 2)) -eq 0 ]; then
        if py_row "$workload" "$mode"; then measure "${py_peer[@]}" "${common[@]}" || true; fi
        if dnnl_row "$workload" "$mode"; then measure "$dnnl" "${common[@]}" || true; fi
        [ -n "$have_peer" ] && measure "${peer[@]}" "${common[@]}"
        measure "$kiln" "${common[@]}"
      else
        measure "$kiln" "${common[@]}"
        [ -n "$have_peer" ] && measure "${peer[@]}" "${common[@]}"
        if py_row "$workload" "$mode"; then measure "${py_peer[@]}" "${common[@]}" || true; fi
        if dnnl_row "$workload" "$mode"; then measure "$dnnl" "${common[@]}" || true; fi
      fi
    done
    [ "$mode" != latency ] && measure "$kiln" "${common[@]}" --sgemm
    printf "." >&2
  done <<<"$rows"
done

# Two threads predicting at once (1 kiln or libtorch thread each): on one model, and each on a model of its
# own. kiln's predict is safe to call concurrently; "one/two" near 1 says a shared model costs nothing.
concurrent="$build/bench/concurrent.jsonl"
: >"$concurrent"
concurrent_rows="mql5_block"
[ -z "$quick" ] && concurrent_rows="mql5_block seed_mha"
for workload in $concurrent_rows; do
  common=(--workload "$workload" --mode forward --threads 1 --callers 2 "${timing[@]}")
  for ((round = 1; round <= rounds; ++round)); do
    results="$concurrent" measure "$kiln" "${common[@]}" --share one
    results="$concurrent" measure "$kiln" "${common[@]}" --share each
    if [ -n "$have_peer" ]; then results="$concurrent" measure "${peer[@]}" "${common[@]}" --share one; fi
  done
  printf "." >&2
done
echo >&2
elapsed=$(($(date +%s) - started))

awk -v have_peer="$have_peer" "$awk_lib"'
{
  seq = field($0, "seq"); if (seq == "") seq = "-"
  key = field($0, "workload") SUBSEP field($0, "mode") SUBSEP field($0, "threads") SUBSEP seq
  if (!(key in seen)) { seen[key] = 1; order[++count] = key }
  impl = field($0, "impl")
  ms[key, impl] = ms[key, impl] " " field($0, "ms_median")
  mb[key, impl] = mb[key, impl] " " field($0, "peak_rss_mb")
}
END {
  printf "%-10s %-10s %3s %5s | %9s %9s %6s | %10s %6s | %8s %8s %6s | %8s %6s %6s\n", "workload", "mode", "thr", "seq",
         "kiln ms", "torch ms", "k/t", "pytorch ms", "k/py", "kiln MB", "torch MB", "k/t", "sgemm ms", "kiln", "torch"
  printf "%-10s %-10s %3s %5s | %9s %9s %6s | %10s %6s | %8s %8s %6s | %8s %6s %6s\n", "", "", "", "", "", "", "time", "", "time", "peak", "peak", "mem", "", "%sgemm", "%sgemm"
  for (i = 1; i <= count; ++i) {
    key = order[i]
    split(key, part, SUBSEP)
    k = median(ms[key, "kiln"]); t = median(ms[key, "libtorch"]); g = median(ms[key, "openblas_sgemm"])
    p = median(ms[key, "pytorch"])
    km = median(mb[key, "kiln"]); tm = median(mb[key, "libtorch"])
    printf "%-10s %-10s %3s %5s | %9s %9s %6s | %10s %6s | %8s %8s %6s | %8s %6s %6s\n", part[1], part[2], part[3], part[4],
           num(k, "%.2f"), num(t, "%.2f"), ratio(k, t), num(p, "%.2f"), ratio(k, p), num(km, "%.1f"), num(tm, "%.1f"),
           ratio(km, tm), num(g, "%.2f"), pct(g, k), pct(g, t)
  }
}' "$results"
# Against oneDNN's primitives: the rows it has a composition of (issue 39's target: kiln at most 0.9 of it).
awk "$awk_lib"'
field($0, "impl") == "onednn" || field($0, "impl") == "kiln" {
  if ($0 ~ /"mode":"latency"/ || $0 ~ /"callers"/) next
  key = field($0, "workload") SUBSEP field($0, "mode") SUBSEP field($0, "threads")
  ms[key, field($0, "impl")] = ms[key, field($0, "impl")] " " field($0, "ms_median")
  if (field($0, "impl") == "onednn" && !(key in seen)) { seen[key] = 1; order[++count] = key; version = field($0, "version") }
}
END {
  if (count == 0) exit
  printf "\nagainst oneDNN %s'"'"'s primitives (what PyTorch 2 runs underneath; bench/dnnl_bench), ms\n", version
  printf "%-10s %-10s %3s | %9s %9s %7s\n", "workload", "mode", "thr", "kiln ms", "onednn ms", "k/dnnl"
  for (i = 1; i <= count; ++i) {
    key = order[i]; split(key, part, SUBSEP)
    k = median(ms[key, "kiln"]); d = median(ms[key, "onednn"])
    printf "%-10s %-10s %3s | %9s %9s %7s\n", part[1], part[2], part[3], num(k, "%.2f"), num(d, "%.2f"), ratio(k, d)
  }
}' "$results"

awk "$awk_lib"'
$0 ~ /"mode":"latency"/ {
  key = field($0, "workload") SUBSEP field($0, "threads")
  if (!(key in seen)) { seen[key] = 1; order[++count] = key }
  impl = field($0, "impl")
  med[key, impl] = med[key, impl] " " field($0, "us_median"); p99[key, impl] = p99[key, impl] " " field($0, "us_p99")
}
END {
  if (count == 0) exit
  printf "\nlatency: predict on one sample, microseconds (median of rounds of each process'"'"'s median and 99th percentile)\n"
  printf "%-10s %3s | %9s %9s %6s | %9s %9s %6s\n", "workload", "thr", "kiln med", "torch med", "k/t", "kiln p99", "torch p99", "k/t"
  for (i = 1; i <= count; ++i) {
    key = order[i]; split(key, part, SUBSEP)
    km = median(med[key, "kiln"]); tm = median(med[key, "libtorch"]); kp = median(p99[key, "kiln"]); tp = median(p99[key, "libtorch"])
    printf "%-10s %3s | %9s %9s %6s | %9s %9s %6s\n", part[1], part[2], num(km, "%.1f"), num(tm, "%.1f"), ratio(km, tm),
           num(kp, "%.1f"), num(tp, "%.1f"), ratio(kp, tp)
  }
}' "$results"
# Scaling: each thread count's kiln time over the 2-thread time of the same row.
awk -v counts="$threads_list" "$awk_lib"'
field($0, "impl") == "kiln" && $0 !~ /"mode":"latency"/ && $0 !~ /"callers"/ {
  seq = field($0, "seq"); if (seq == "") seq = "-"
  key = field($0, "workload") SUBSEP field($0, "mode") SUBSEP seq
  if (!(key in seen)) { seen[key] = 1; order[++count] = key }
  ms[key, field($0, "threads")] = ms[key, field($0, "threads")] " " field($0, "ms_median")
}
END {
  n = split(counts, thr, " ")
  has2 = 0
  for (j = 1; j <= n; ++j) if (thr[j] == 2) has2 = 1
  if (!has2 || n < 3) exit
  printf "\nscaling: kiln time at each thread count over its 2-thread time (flag: above 2x at more than 2 threads)\n"
  printf "%-10s %-10s %5s |", "workload", "mode", "seq"
  for (j = 1; j <= n; ++j) printf " %7s", thr[j] " thr"
  printf "\n"
  flagged = 0
  for (i = 1; i <= count; ++i) {
    key = order[i]; split(key, part, SUBSEP)
    base = median(ms[key, 2]); line = sprintf("%-10s %-10s %5s |", part[1], part[2], part[3]); flag = ""
    for (j = 1; j <= n; ++j) {
      t = median(ms[key, thr[j]]); r = ratio(t, base); line = line sprintf(" %7s", r)
      if (r != "-" && thr[j] > 2 && r + 0 > 2) flag = "  <- over 2x"
    }
    if (flag != "") ++flagged
    print line flag
  }
  printf "%d row(s) over 2x\n", flagged
}' "$results"
# And each model's kernels at the largest count against 2 threads (scripts/kernel_scaling.sh: a kernel above 3x is
# flagged). Reported, not fatal: the bench goes on to its other tables.
high=$(tr ' ' '\n' <<<"$threads_list" | sort -n | tail -n 1)
if [[ " $threads_list " == *" 2 "* ]] && [ "$high" -gt 2 ] && [ "$(wc -w <<<"$threads_list")" -ge 3 ]; then
  echo
  KERNEL_SCALING_ONLY="${BENCH_ONLY:-}" bash "$(dirname "$0")/kernel_scaling.sh" "$build" "$high" || true
fi
echo "times: median over rounds of each process's median step (ms); peak: VmHWM above the RSS before the"
echo "workload was built (MB); k/t = kiln / libtorch (C++); k/py = kiln / PyTorch in Python (${py_version:-absent});"
echo "%sgemm = raw OpenBLAS time for the same GEMMs / impl time."
echo
awk "$awk_lib"'
{
  key = field($0, "workload")
  if (!(key in seen)) { seen[key] = 1; order[++count] = key }
  ms[key, field($0, "impl") "/" field($0, "share")] = ms[key, field($0, "impl") "/" field($0, "share")] " " field($0, "ms_median")
}
END {
  printf "two threads predicting at once, 1 thread each (forward; ms until both are done)\n"
  printf "%-10s | %9s %9s %8s | %9s %6s\n", "workload", "one model", "two", "one/two", "torch one", "k/t"
  for (i = 1; i <= count; ++i) {
    key = order[i]
    one = median(ms[key, "kiln/one"]); two = median(ms[key, "kiln/each"]); t = median(ms[key, "libtorch/one"])
    printf "%-10s | %9s %9s %8s | %9s %6s\n", key, num(one, "%.2f"), num(two, "%.2f"), ratio(one, two), num(t, "%.2f"), ratio(one, t)
  }
}' "$concurrent"
# int8 against float32 (issue 40): each row's model as built and through kiln::quantize(model, "int8") (its float
# Dense and Embedding layers int8, as Keras's model.quantize makes them; GPT-2's token embedding, attention
# projections and feed-forward layers, as keras-hub's quantize does), alternating, 1 thread.
quantized="$build/bench/quantized.jsonl"
: >"$quantized"
quantized_rows="mlp forward
mlp latency
stock_demo latency
mql5_block latency"
[ -z "$quick" ] && quantized_rows="$quantized_rows
gpt2_small_generate generate"
[ -n "${BENCH_ONLY:-}" ] && quantized_rows=$(awk -v only="$BENCH_ONLY" '$1 ~ "^(" only ")$"' <<<"$quantized_rows")
while read -r workload mode; do
  [ -z "$workload" ] && continue
  flags=("${timing[@]}")
  [ "$mode" = latency ] && flags=(--calls "$([ -n "$quick" ] && echo 2000 || echo 10000)")
  common=(--workload "$workload" --mode "$mode" --threads 1 "${flags[@]}")
  for ((round = 1; round <= rounds; ++round)); do
    results="$quantized" measure "$kiln" "${common[@]}"
    results="$quantized" measure "$kiln" "${common[@]}" --quantize int8
    # Keras's default int4 (by blocks of 128 rows) where it is meant to pay: memory, and generation
    case "$workload $mode" in "mlp forward" | "gpt2_small_generate generate")
      results="$quantized" measure "$kiln" "${common[@]}" --quantize int4 ;;
    esac
  done
  printf "." >&2
done <<<"$quantized_rows"
if [ -s "$quantized" ]; then
  echo
  awk "$awk_lib"'
  {
    key = field($0, "workload") SUBSEP field($0, "mode")
    if (!(key in seen)) { seen[key] = 1; order[++count] = key }
    kind = field($0, "quantize") == "" ? "float" : field($0, "quantize")
    ms[key, kind] = ms[key, kind] " " field($0, "ms_median"); mb[key, kind] = field($0, "weights_mb")
    if (field($0, "new_tok_s") != "") tokens[key, kind] = tokens[key, kind] " " field($0, "new_tok_s")
  }
  END {
    printf "int8 against float32, 1 thread (kiln_bench --quantize int8: its Dense and Embedding layers int8)\n"
    printf "%-10s %-8s | %9s %9s %9s | %9s %9s %6s\n", "workload", "mode", "float ms", "int8 ms", "speed-up", "float MB", "int8 MB", "int8/f"
    for (i = 1; i <= count; ++i) {
      key = order[i]; split(key, part, SUBSEP)
      f = median(ms[key, "float"]); q = median(ms[key, "int8"])
      printf "%-10s %-8s | %9s %9s %9s | %9s %9s %6s\n", part[1], part[2], num(f, "%.3f"), num(q, "%.3f"),
             (q > 0 ? sprintf("%.2fx", f / q) : "-"), num(mb[key, "float"], "%.2f"), num(mb[key, "int8"], "%.2f"),
             ratio(mb[key, "int8"], mb[key, "float"])
    }
    for (i = 1; i <= count; ++i) {  # generation: new tokens a second, what the issue measures
      key = order[i]; split(key, part, SUBSEP)
      if (!((key, "float") in tokens)) continue
      f = median(tokens[key, "float"]); q = median(tokens[key, "int8"])
      printf "%s new tokens/s: float %s, int8 %s (%s)", part[1], num(f, "%.1f"), num(q, "%.1f"),
             (f > 0 ? sprintf("%.2fx", q / f) : "-")
      if ((key, "int4") in tokens)
        printf ", int4 %s (%s)", num(median(tokens[key, "int4"]), "%.1f"),
               (f > 0 ? sprintf("%.2fx", median(tokens[key, "int4"]) / f) : "-")
      printf "\n"
    }
    for (i = 1; i <= count; ++i) {  # int4: its weights against float32 (issue: <= 0.15x), and its time
      key = order[i]; split(key, part, SUBSEP)
      if (!((key, "int4") in mb)) continue
      f = median(ms[key, "float"]); q = median(ms[key, "int4"])
      printf "%s %s int4 (Keras default, blocks of 128): %s ms (speed-up %s), weights %s MB (%s of float32)\n", part[1],
             part[2], num(q, "%.3f"), (q > 0 ? sprintf("%.2fx", f / q) : "-"), num(mb[key, "int4"], "%.2f"),
             ratio(mb[key, "int4"], mb[key, "float"])
    }
  }' "$quantized"
  cat "$quantized" >>"$results"
fi
# mixed_bfloat16 against float32 (issue 40): each row's model made under Keras's mixed_bfloat16 policy (float32
# variables, bfloat16 matrix products with float32 sums) and as float32, alternating, at 1 and 2 threads.
mixed="$build/bench/mixed_bfloat16.jsonl"
: >"$mixed"
mixed_rows="char_gpt train_step
char_gpt forward
mlp forward
char_gpt_generate generate"
[ -n "${BENCH_ONLY:-}" ] && mixed_rows=$(awk -v only="$BENCH_ONLY" '$1 ~ "^(" only ")$"' <<<"$mixed_rows")
while read -r workload mode; do
  [ -z "$workload" ] && continue
  for threads in 1 2; do
    common=(--workload "$workload" --mode "$mode" --threads "$threads" "${timing[@]}")
    for ((round = 1; round <= rounds; ++round)); do
      results="$mixed" measure "$kiln" "${common[@]}"
      results="$mixed" measure "$kiln" "${common[@]}" --policy mixed_bfloat16
    done
  done
  printf "." >&2
done <<<"$mixed_rows"
if [ -s "$mixed" ]; then
  echo
  awk "$awk_lib"'
  {
    key = field($0, "workload") SUBSEP field($0, "mode") SUBSEP field($0, "threads")
    if (!(key in seen)) { seen[key] = 1; order[++count] = key }
    kind = field($0, "policy") == "mixed_bfloat16" ? "mixed" : "float"
    ms[key, kind] = ms[key, kind] " " field($0, "ms_median")
  }
  END {
    printf "mixed_bfloat16 against float32 (kiln_bench --policy mixed_bfloat16: bfloat16 products, float32 sums)\n"
    printf "%-17s %-10s %7s | %9s %9s %9s\n", "workload", "mode", "threads", "float ms", "mixed ms", "speed-up"
    for (i = 1; i <= count; ++i) {
      key = order[i]; split(key, part, SUBSEP)
      f = median(ms[key, "float"]); q = median(ms[key, "mixed"])
      printf "%-17s %-10s %7s | %9s %9s %9s\n", part[1], part[2], part[3], num(f, "%.3f"), num(q, "%.3f"),
             (q > 0 ? sprintf("%.2fx", f / q) : "-")
    }
  }' "$mixed"
  cat "$mixed" >>"$results"
fi
# fit fed by a streamed CSV Dataset against in-memory arrays, alternating in one process (target ratio <= 1.1).
if [ -x "$build/bench/dataset_bench" ]; then
  echo
  dataset_lines=$("$build/bench/dataset_bench" --rounds "$rounds" --dir "$build")
  head -n 1 <<<"$dataset_lines" >>"$results"
  tail -n 1 <<<"$dataset_lines"
fi
# Data-parallel training over MPI (when kiln::distributed is built and mpirun is here): 1 and 2 ranks, 1
# thread each, each rank on the workload's own batch; efficiency = samples/s at 2 ranks / (2 x at 1 rank).
if [ -x "$build/bench/distributed_bench" ] && command -v mpirun >/dev/null; then
  echo
  distributed="$build/bench/distributed.jsonl"
  : >"$distributed"
  for workload in seed_mha mql5_block; do
    steps=$([ "$workload" = seed_mha ] && echo 6 || echo 30)
    for ranks in 1 2; do
      results="$distributed" measure mpirun --allow-run-as-root -np "$ranks" "$build/bench/distributed_bench" \
        --workload "$workload" --steps "$steps" --rounds "$((rounds < 3 ? 3 : rounds))"
    done
  done
  cat "$distributed" >>"$results"
  awk "$awk_lib"'
  {
    key = field($0, "workload")
    if (!(key in seen)) { seen[key] = 1; order[++count] = key }
    r = field($0, "ranks"); rate[key, r] = field($0, "samples_per_second")
    bytes[key] = field($0, "gradient_bytes"); buckets[key, r] = field($0, "buckets_per_step")
    wait[key, r] = field($0, "wait_ms_per_step"); alone[key, r] = field($0, "sum_alone_ms")
  }
  END {
    printf "data-parallel training over MPI (1 thread a rank, each rank the workload'"'"'s batch)\n"
    printf "%-10s | %10s %10s %6s | %8s %7s | %11s %10s\n", "workload", "1 rank/s", "2 ranks/s", "eff", "grad MB", "buckets", "wait ms/st", "sum alone"
    for (i = 1; i <= count; ++i) {
      key = order[i]
      one = rate[key, 1]; two = rate[key, 2]
      printf "%-10s | %10s %10s %6s | %8.2f %7s | %11s %10s\n", key, num(one, "%.1f"), num(two, "%.1f"),
             pct(two, 2 * one), bytes[key] / 1e6, num(buckets[key, 2], "%.0f"), num(wait[key, 2], "%.3f"),
             num(alone[key, 2], "%.3f")
    }
  }' "$distributed"
  echo "samples/s: median of $((rounds < 3 ? 3 : rounds)) timed fits; eff = 2-rank samples/s over twice the 1-rank's; wait: ms a step waited"
  echo "for its gradient sums after backward; sum alone: ms the same bytes take summed with nothing to overlap."
fi
# The GEMM libraries on kiln's small products (bench/gemm_bench: OpenBLAS, libxsmm, kiln's own choice; BLIS and
# oneDNN when installed).
if [ -z "$quick" ] && [ -x "$build/bench/gemm_bench_openblas" ]; then
  echo
  GEMM_MIN_TIME=0.3 bash "$(dirname "$0")/gemm_bench.sh" "$build"
fi
echo "took ${elapsed}s; load average at end: $(cut -d' ' -f1-3 /proc/loadavg); JSON lines: $results"
if [ -z "$have_peer" ]; then
  echo "The libtorch peer is not built, so only kiln (and OpenBLAS) ran: install it with \`make install-peer\`"
  echo "(scripts/install-peer.sh, as root: Debian's libtorch-dev), then run \`make bench\` again."
fi
