# kiln: the two commands a fresh Debian 12 machine needs are `make demo` and `make test`.
BUILD_DIR    ?= build
SANITIZE_DIR ?= build-sanitize
FUZZ_DIR     ?= build-fuzz
FUZZ_SECONDS ?= 60
BENCH_QUICK  ?=
THREADS      ?=
JOBS         ?= 2
CMAKE_FLAGS  ?=

.PHONY: all deps oracles build demo test ops-table sanitize fuzz bench install-peer docs clean

all: build

deps:
	@bash scripts/install-deps.sh

$(BUILD_DIR)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)

build: deps $(BUILD_DIR)/CMakeCache.txt
	cmake --build $(BUILD_DIR) -j$(JOBS)

# The demo: first a CNN against its baselines on held-out handwritten digits (saved, reloaded, plotted), then the
# attention model on real stock data; their .kiln, .csv and .svg files land in $(BUILD_DIR).
demo: build
	cd $(BUILD_DIR) && ./examples/digits_demo && ./examples/stock_attention

# The reference implementations the tests compare with (js-tiktoken for the tokenizers), installed once.
oracles:
	@bash scripts/install-test-oracles.sh

test: build oracles
	cd $(BUILD_DIR) && ctest --output-on-failure -j$(JOBS)

# docs/ops.md, the table of gradients (every op's backward rule, the ops it makes, its float64 gradient check),
# made again from the code and the gradient checks; the test ops_table_is_current says when it is due.
ops-table: build
	cmake -DTESTS=$(BUILD_DIR)/tests/kiln_tests -DCLI=$(BUILD_DIR)/cli/kiln -DSOURCE_DIR=$(CURDIR) \
	      -DWORK_DIR=$(BUILD_DIR)/tests/ops-table -DWRITE=ON -P tests/check_ops_table.cmake

# Debug + AddressSanitizer + UBSan build of the library and tests, run under CTest.
sanitize: deps oracles
	cmake -S . -B $(SANITIZE_DIR) -DCMAKE_BUILD_TYPE=Debug -DKILN_SANITIZE=ON \
	      -DKILN_BUILD_EXAMPLES=OFF -DKILN_BUILD_BENCH=OFF $(CMAKE_FLAGS)
	cmake --build $(SANITIZE_DIR) -j$(JOBS)
	cd $(SANITIZE_DIR) && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
	      ctest --output-on-failure -j$(JOBS)

# libFuzzer on the model file loader (clang + ASan + UBSan, in $(FUZZ_DIR)) for $(FUZZ_SECONDS) seconds;
# fails when it finds a crash, whose reproducer lands in $(FUZZ_DIR)/fuzz/artifacts. Installs clang if needed.
fuzz: deps
	FUZZ_DIR=$(FUZZ_DIR) FUZZ_SECONDS=$(FUZZ_SECONDS) JOBS=$(JOBS) CMAKE_FLAGS="$(CMAKE_FLAGS)" bash scripts/fuzz.sh

# kiln against libtorch (the optional peer: make install-peer) and raw OpenBLAS, as one table; about 10 minutes
# on 2 cores. BENCH_QUICK=1 runs a subset in about a minute.
bench: build
	BENCH_QUICK=$(BENCH_QUICK) BENCH_THREADS="$(THREADS)" JOBS=$(JOBS) bash scripts/bench.sh $(BUILD_DIR)

# The benchmark's peer: Debian's libtorch-dev (large; needs root). kiln itself never uses it.
install-peer:
	@bash scripts/install-peer.sh

# The API reference (Doxygen, from the public headers and docs/) in build-docs/html; fails on any warning.
# Installs doxygen if needed.
docs:
	@bash scripts/docs.sh

clean:
	rm -rf $(BUILD_DIR) $(SANITIZE_DIR) $(FUZZ_DIR) build-docs
