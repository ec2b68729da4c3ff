#!/usr/bin/env bash
# `make fuzz`: builds kiln's libFuzzer target (clang, ASan + UBSan) in build-fuzz, writes a seed corpus of
# saved models (kiln files, .keras archives, legacy .h5 files and their parts) and fuzzes the file loaders for
# FUZZ_SECONDS (default 60). Exits non-zero when the fuzzer finds a crash, a leak, a timeout or an
# out-of-memory; the reproducer is left in build-fuzz/fuzz/artifacts.
# Needs clang and libFuzzer (Debian: clang, libclang-rt-14-dev), installed here when missing and run as root.
#
#   FUZZ_SECONDS=600 make fuzz
#   build-fuzz/tests/fuzz/kiln_load_fuzzer build-fuzz/fuzz/artifacts/crash-...   # replays one input
#
# FUZZ_TARGET=hdf5-library fuzzes Debian's libhdf5 itself instead (tests/fuzz/hdf5_library_fuzzer.cpp), on the
# HDF5 files of data/keras: the measurement behind kiln's own HDF5 reader. Findings there are libhdf5's, not
# kiln's, so it reports them and exits 0; its artifacts go to build-fuzz/fuzz-hdf5/artifacts.
set -euo pipefail

cd "$(dirname "$0")/.."
FUZZ_DIR=${FUZZ_DIR:-build-fuzz}
FUZZ_SECONDS=${FUZZ_SECONDS:-60}
JOBS=${JOBS:-2}
CMAKE_FLAGS=${CMAKE_FLAGS:-}

# ---- clang and libFuzzer: optional, only this target needs them ---------------------------------------------
source "$(dirname "$0")/apt-install.sh"
if ! apt_install fuzz clang libclang-rt-14-dev unzip; then
  echo "fuzz: make fuzz needs clang and libFuzzer" >&2
  exit 1
fi
if ! command -v clang++ >/dev/null; then
  echo "fuzz: clang++ is not on PATH (package clang installed?)" >&2
  exit 1
fi

# ---- build ------------------------------------------------------------------------------------------------
# shellcheck disable=SC2086  # CMAKE_FLAGS is a list of flags
CXX=clang++ cmake -S . -B "$FUZZ_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_FUZZ=ON \
  -DKILN_BUILD_EXAMPLES=OFF -DKILN_BUILD_BENCH=OFF -DKILN_BUILD_TESTS=OFF -DKILN_BUILD_CLI=OFF -DKILN_ARCH=x86-64-v2 \
  $CMAKE_FLAGS
FUZZ_TARGET=${FUZZ_TARGET:-kiln}
if [ "$FUZZ_TARGET" = hdf5-library ]; then
  cmake --build "$FUZZ_DIR" --target kiln_hdf5_library_fuzzer -j"$JOBS"
  work="$FUZZ_DIR/fuzz-hdf5"
  rm -rf "$work/seeds" "$work/artifacts"
  mkdir -p "$work/seeds" "$work/corpus" "$work/artifacts"
  find data/keras -name '*.h5' -exec cp {} "$work/seeds/" \;
  for archive in data/keras/keras3/*.keras; do
    unzip -p "$archive" model.weights.h5 >"$work/seeds/$(basename "$archive" .keras).weights.h5" 2>/dev/null || true
  done
  echo "fuzz: fuzzing libhdf5 for ${FUZZ_SECONDS}s on $(ls "$work/seeds" | wc -l) seeds (log: $work/fuzz.log)"
  # -fork keeps going past each crash, so one run counts them all; leaks on libhdf5's error paths are not counted.
  ASAN_OPTIONS=detect_leaks=0 "$FUZZ_DIR/tests/fuzz/kiln_hdf5_library_fuzzer" "$work/corpus" "$work/seeds" \
    -fork=1 -ignore_crashes=1 -ignore_timeouts=1 -ignore_ooms=1 -max_total_time="$FUZZ_SECONDS" -max_len=65536 \
    -rss_limit_mb=2048 -timeout=10 -artifact_prefix="$work/artifacts/" >"$work/fuzz.log" 2>&1 || true
  echo "fuzz: libhdf5 findings: $(ls "$work/artifacts" | grep -c '^crash-' || true) crashes," \
    "$(ls "$work/artifacts" | grep -c '^timeout-' || true) hangs," \
    "$(ls "$work/artifacts" | grep -c '^oom-' || true) runaway allocations (artifacts in $work/artifacts)"
  exit 0
fi
cmake --build "$FUZZ_DIR" --target kiln_load_fuzzer -j"$JOBS"

fuzzer="$FUZZ_DIR/tests/fuzz/kiln_load_fuzzer"
work="$FUZZ_DIR/fuzz"
seeds="$work/seeds"      # rewritten every run, from the models this kiln saves
corpus="$work/corpus"    # what the fuzzer found interesting; kept between runs
artifacts="$work/artifacts"
rm -rf "$seeds"
mkdir -p "$seeds" "$corpus" "$artifacts"

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}

"$fuzzer" --make-corpus "$seeds"

# ---- fuzz -------------------------------------------------------------------------------------------------
touch "$work/.started"
echo "fuzz: fuzzing for ${FUZZ_SECONDS}s (log: $work/fuzz.log)"
status=0
"$fuzzer" "$corpus" "$seeds" -max_total_time="$FUZZ_SECONDS" -max_len=65536 -rss_limit_mb=2048 -timeout=10 \
  -print_final_stats=1 -artifact_prefix="$artifacts/" 2>&1 | tee "$work/fuzz.log" || status=$?
found=$(find "$artifacts" -type f -newer "$work/.started")

if [ "$status" -ne 0 ] || [ -n "$found" ]; then
  echo "fuzz: the fuzzer found a problem (exit status $status); reproducers:" >&2
  printf '%s\n' "$found" | while read -r file; do echo "  $file"; done >&2
  echo "fuzz: replay one with: $fuzzer <file>" >&2
  exit 1
fi
echo "fuzz: no crash in ${FUZZ_SECONDS}s"
