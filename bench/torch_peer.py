#!/usr/bin/env python3
"""torch_peer: kiln's benchmark peer in Python PyTorch (eager nn.Modules, optionally torch.compile).

A line-for-line port of kiln's bench/torch_bench.cpp (the libtorch C++ peer) for the workloads

    mql5_block, seed_mha, cnn_small, lstm, char_gpt   forward and train_step
    long_mha                                          train_step (forward too), --seq T (default 1024)

with the same models, shapes, losses and optimizers, and bench/bench_common.hpp's timing rule and JSON line.

    torch_peer.py --workload NAME --mode forward|train_step --threads N [--seq T] [--compile]
                    [--iters N] [--warmup N] [--min-time S] [--max-time S] [--min-iters N] [--max-iters N]
                    [--zero-grad zero|none]
    torch_peer.py --all [--threads-list 1,4,16] [--seqs 1024] [timing flags] [--compile]
                    every (workload, mode) for each thread count, each in a fresh process (this script again)
    torch_peer.py --list

Timing (bench_common.hpp's time_steps): `warmup` untimed steps (3), then timed steps until max-iters (500), or
min-time (2 s) and min-iters (20) steps, or max-time (5 s) and 3 steps, whichever comes first; --iters N times
exactly N steps. Reports the median and the minimum of the per-step times (time.perf_counter, monotonic).

Forward: module.eval() under torch.no_grad() (torch::NoGradGuard). Train step: zero_grad, forward, loss, backward,
optimizer step, and the loss read back with .item() (what train_on_batch returns). MSE loss (cnn_small, char_gpt:
cross-entropy on the logits); SGD(lr 0.01) for seed_mha and long_mha, Adam(lr 1e-3, betas 0.9/0.999, eps 1e-7) for
the others. zero_grad zeroes the gradients in place (--zero-grad zero, the default) as libtorch 1.13's C++
Optimizer::zero_grad() does; --zero-grad none sets them to None (Python torch 2.x's default).

Output, one JSON line per row, bench_common.hpp's print_json plus the torch version:
  {"impl":"pytorch","version":"2.x","workload":..,"mode":..,"threads":N,["seq":T,]"ms_median":..,"ms_min":..,
   "iters":..,"peak_rss_mb":..,"baseline_rss_mb":..}
With --compile the impl is "pytorch_compile"; where torch < 2 the row is skipped ("skipped": why, exit 0), and
where compilation fails the row carries "error" (exit 3).
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

# ---- the command line (parsed before torch is imported: --list and --all need no torch) --------------------

WORKLOADS = [
    # name, forward, train_step, has_seq, what (bench_common.hpp's table, the rows this port covers)
    ("seed_mha", True, True, False, "MultiHeadAttention(h=8), TF2 form, on (10,150,512); MSE + SGD"),
    ("mql5_block", True, True, False,
     "Input (64,40,12) -> MHAttention(16, 8) -> Flatten -> Dense(2, tanh); MSE + Adam"),
    ("long_mha", True, True, True, "MultiHeadAttention(8, key_dim 32, bias) self-attention on (4,T,256); MSE + SGD"),
    ("cnn_small", True, True, False,
     "(64,28,28,1) -> Conv2D(32,3,relu) -> BatchNorm -> MaxPool2D -> Conv2D(64,3,relu) -> GAP2D -> Dense(10); "
     "sparse CE (logits) + Adam"),
    ("lstm", True, True, False, "(64,100,32) -> LSTM(128) -> Dense(1); MSE + Adam"),
    ("char_gpt", True, True, False,
     "nanoGPT's CPU shakespeare_char: ids (12,64) -> token + position embedding (65 chars, 128) -> 4 x "
     "TransformerDecoder(512, 4 heads, pre-norm, GELU) -> LayerNorm -> tied head (65); sparse CE (logits) + Adam"),
]
WORKLOAD = {w[0]: w for w in WORKLOADS}
# The rows --all runs: every workload's forward and train step, long_mha's train step only.
ALL_ROWS = [(name, mode) for name, fwd, train, has_seq, _ in WORKLOADS
            for mode, ok in (("forward", fwd and not has_seq), ("train_step", train)) if ok]


def parse_args(argv):
    p = argparse.ArgumentParser(description="kiln's benchmark peer in Python PyTorch (see the module docstring)")
    p.add_argument("--workload")
    p.add_argument("--mode", choices=["forward", "train_step"])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seq", type=int, default=None, help="long_mha's sequence length (default 1024)")
    p.add_argument("--compile", action="store_true", help="wrap the model in torch.compile (torch >= 2)")
    p.add_argument("--zero-grad", choices=["zero", "none"], default="zero",
                   help="zero: gradients zeroed in place (libtorch 1.13's C++ zero_grad); none: set to None")
    p.add_argument("--iters", type=int, default=0)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--min-time", type=float, default=2.0)
    p.add_argument("--max-time", type=float, default=5.0)
    p.add_argument("--min-iters", type=int, default=20)
    p.add_argument("--max-iters", type=int, default=500)
    p.add_argument("--list", action="store_true")
    p.add_argument("--all", action="store_true", help="every (workload, mode) per thread count, fresh processes")
    p.add_argument("--threads-list", default="1,4,16", help="with --all: thread counts, comma-separated")
    p.add_argument("--seqs", default=None, help="with --all: long_mha's sequence lengths (default --seq or 1024)")
    p.add_argument("--child-timeout", type=float, default=300.0, help="with --all: seconds per process")
    a = p.parse_args(argv)
    if a.threads < 1:
        p.error("--threads must be >= 1")
    if not (a.list or a.all):
        if a.workload not in WORKLOAD:
            p.error("--workload must be one of: " + ", ".join(WORKLOAD))
        if a.mode is None:
            p.error("--mode forward|train_step is required with --workload")
        if a.seq is not None and not WORKLOAD[a.workload][3]:
            p.error("--seq applies to long_mha only")
    return a


def timing_flags(a):
    """The flags handed on to child processes in --all mode."""
    flags = ["--warmup", str(a.warmup), "--min-time", repr(a.min_time), "--max-time", repr(a.max_time),
             "--min-iters", str(a.min_iters), "--max-iters", str(a.max_iters), "--zero-grad", a.zero_grad]
    if a.iters:
        flags += ["--iters", str(a.iters)]
    if a.compile:
        flags.append("--compile")
    return flags


def run_all(a):
    threads_list = [int(t) for t in a.threads_list.split(",") if t.strip()]
    seqs = [int(s) for s in (a.seqs or str(a.seq or 1024)).split(",") if s.strip()]
    failures = 0
    for threads in threads_list:
        for name, mode in ALL_ROWS:
            for seq in (seqs if WORKLOAD[name][3] else [None]):
                cmd = [sys.executable, os.path.abspath(__file__), "--workload", name, "--mode", mode,
                       "--threads", str(threads)] + (["--seq", str(seq)] if seq is not None else []) + timing_flags(a)
                try:
                    done = subprocess.run(cmd, stdout=subprocess.PIPE, timeout=a.child_timeout,
                                          universal_newlines=True)
                    sys.stdout.write(done.stdout)
                    rc = done.returncode
                except subprocess.TimeoutExpired:
                    rc = "timeout"
                sys.stdout.flush()
                if rc != 0:
                    failures += 1
                    print("torch_peer: failed (%s): %s" % (rc, " ".join(cmd)), file=sys.stderr)
    return 0 if failures == 0 else 1


# ---- memory (bench_common.hpp's status_mb) ------------------------------------------------------------------

def status_mb(field):
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return float(line.split()[1]) / 1024.0
    except OSError:
        pass
    return 0.0


def set_openblas_threads(n):
    """torch_bench.cpp calls openblas_set_num_threads: Debian's torch runs its GEMMs on OpenBLAS's own pool
    (so do the aarch64 wheels). A no-op where no OpenBLAS is loaded (the x86 wheels use MKL, which
    torch.set_num_threads sets)."""
    import ctypes
    try:
        with open("/proc/self/maps") as f:
            paths = sorted({line.split()[-1] for line in f
                            if "openblas" in line.lower() and line.split()[-1].startswith("/")})
    except OSError:
        return
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for symbol in ("openblas_set_num_threads", "openblas_set_num_threads64_", "scipy_openblas_set_num_threads"):
            fn = getattr(lib, symbol, None)
            if fn is not None:
                fn(ctypes.c_int(n))
                break


# ---- the workload process ---------------------------------------------------------------------------------------

_interop_set = False


def run_one(a):
    import torch  # noqa: E402  (after the command line: --list and --all run without it)

    # Threads first: torch's intra-op pool (OpenMP, and MKL in the wheels), one inter-op thread, OpenBLAS's pool.
    global _interop_set
    torch.set_num_threads(a.threads)
    if not _interop_set:  # torch aborts on a second call in one process (only a caller of main() twice could)
        torch.set_num_interop_threads(1)
        _interop_set = True
    set_openblas_threads(a.threads)

    import torch.nn as nn
    import torch.nn.functional as F

    seq = a.seq if a.seq is not None else 1024
    has_seq = WORKLOAD[a.workload][3]
    impl = "pytorch_compile" if a.compile else "pytorch"

    def emit(fields):
        row = {"impl": impl, "version": torch.__version__, "workload": a.workload, "mode": a.mode,
               "threads": a.threads}
        if has_seq:
            row["seq"] = seq
        row.update(fields)
        print(json.dumps(row, separators=(",", ":")))
        sys.stdout.flush()

    if a.compile:
        major = int(torch.__version__.split(".")[0])
        if major < 2 or not hasattr(torch, "compile"):
            emit({"skipped": "torch.compile needs torch >= 2 (this is %s)" % torch.__version__})
            return 0

    # ---- the layers (torch_bench.cpp's, the same math in the same order) ----

    class MultiHeadSelfAttention(nn.Module):
        """kiln's MultiHeadAttention: Q, K, V and output projections, queries scaled by 1/sqrt(depth)."""

        def __init__(self, features, heads, depth, bias):
            super().__init__()
            self.heads, self.depth = heads, depth
            self.query = nn.Linear(features, heads * depth, bias=bias)
            self.key = nn.Linear(features, heads * depth, bias=bias)
            self.value = nn.Linear(features, heads * depth, bias=bias)
            self.attention_output = nn.Linear(heads * depth, features, bias=bias)

        def split(self, x):  # (B, T, H*D) -> (B, H, T, D)
            return x.view(x.size(0), x.size(1), self.heads, self.depth).transpose(1, 2)

        def forward(self, x):
            q = self.split(self.query(x)) * (1.0 / math.sqrt(float(self.depth)))
            k = self.split(self.key(x))
            v = self.split(self.value(x))
            weights = torch.softmax(torch.matmul(q, k.transpose(-2, -1)), -1)
            context = torch.matmul(weights, v).transpose(1, 2).reshape(x.size(0), x.size(1), self.heads * self.depth)
            return self.attention_output(context)

    class MHAttention(nn.Module):
        """kiln's MHAttention block (layers/mh_attention.hpp)."""

        def __init__(self, window, key_size, heads):
            super().__init__()
            self.heads, self.key_size = heads, key_size
            self.query = nn.Linear(window, heads * key_size)
            self.key = nn.Linear(window, heads * key_size)
            self.value = nn.Linear(window, heads * key_size)
            self.w0 = nn.Linear(heads * key_size, window)
            self.attention_norm = nn.LayerNorm([window], eps=1e-6)
            self.feed_forward_hidden = nn.Linear(window, 4 * window)
            self.feed_forward_output = nn.Linear(4 * window, window)
            self.output_norm = nn.LayerNorm([window], eps=1e-6)

        def split(self, x):
            return x.view(x.size(0), x.size(1), self.heads, self.key_size).transpose(1, 2)

        def forward(self, x):
            q, k, v = self.split(self.query(x)), self.split(self.key(x)), self.split(self.value(x))
            scale = 1.0 / math.sqrt(float(self.key_size))
            weights = torch.softmax(torch.matmul(q, k.transpose(-2, -1)) * scale, -1)
            context = torch.matmul(weights, v).transpose(1, 2).reshape(x.size(0), x.size(1),
                                                                       self.heads * self.key_size)
            attended = self.attention_norm(x + self.w0(context))
            return self.output_norm(attended + self.feed_forward_output(F.silu(self.feed_forward_hidden(attended))))

    class Mql5Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.mh_attention = MHAttention(12, 16, 8)
            self.dense = nn.Linear(40 * 12, 2)

        def forward(self, x):
            return torch.tanh(self.dense(self.mh_attention(x).flatten(1)))

    class CnnSmall(nn.Module):
        """NCHW; BatchNorm2d with Keras's epsilon 1e-3 and momentum 0.01 (Keras's 0.99 for the old statistics)."""

        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 32, 3)
            self.norm = nn.BatchNorm2d(32, eps=1e-3, momentum=0.01)
            self.conv2 = nn.Conv2d(32, 64, 3)
            self.head = nn.Linear(64, 10)

        def forward(self, x):
            h = F.max_pool2d(self.norm(torch.relu(self.conv1(x))), 2)
            return self.head(torch.relu(self.conv2(h)).mean((2, 3)))

    class Lstm(nn.Module):
        """torch's fused LSTM, then a Linear on the last hidden state."""

        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(32, 128, batch_first=True)
            self.head = nn.Linear(128, 1)

        def forward(self, x):
            return self.head(self.lstm(x)[1][0][0])

    class GptBlock(nn.Module):
        """keras-hub's pre-norm TransformerDecoder as kiln runs it: biases, LayerNorm eps 1e-5, exact GELU,
        causal attention with queries scaled by 1/sqrt(32)."""

        def __init__(self):
            super().__init__()
            self.attention_norm = nn.LayerNorm([128], eps=1e-5)
            self.feed_norm = nn.LayerNorm([128], eps=1e-5)
            self.query = nn.Linear(128, 128)
            self.key = nn.Linear(128, 128)
            self.value = nn.Linear(128, 128)
            self.output = nn.Linear(128, 128)
            self.hidden = nn.Linear(128, 512)
            self.out = nn.Linear(512, 128)

        def forward(self, x):
            batch, steps = x.size(0), x.size(1)

            def split(t):
                return t.view(batch, steps, 4, 32).transpose(1, 2)

            a_ = self.attention_norm(x)
            q = split(self.query(a_)) * (1.0 / math.sqrt(32.0))
            k, v = split(self.key(a_)), split(self.value(a_))
            causal = torch.ones((steps, steps), dtype=torch.bool).triu(1)
            weights = torch.softmax(torch.matmul(q, k.transpose(-2, -1)).masked_fill(causal, -1e9), -1)
            h = x + self.output(torch.matmul(weights, v).transpose(1, 2).reshape(batch, steps, 128))
            return h + self.out(F.gelu(self.hidden(self.feed_norm(h))))

    class CharGpt(nn.Module):
        def __init__(self, context=64):
            super().__init__()
            self.tokens = nn.Embedding(65, 128)
            self.positions = nn.Embedding(context, 128)
            self.blocks = nn.Sequential(*[GptBlock() for _ in range(4)])
            self.final_norm = nn.LayerNorm([128], eps=1e-5)

        def logits(self, ids):  # (batch, steps, 65)
            steps = torch.arange(ids.size(1), dtype=torch.long)
            h = self.final_norm(self.blocks(self.tokens(ids) + self.positions(steps)))
            return torch.matmul(h, self.tokens.weight.t())

        def forward(self, ids):
            return self.logits(ids).reshape(-1, 65)

    # ---- the workloads (torch_bench.cpp's make_workload) ----

    def make_workload(name):
        torch.manual_seed(1)

        def uniform(*shape):
            return torch.rand(*shape) * 2 - 1

        # module, x, y, adam, classes (y holds class indices: cross-entropy on logits instead of MSE)
        if name == "seed_mha":
            return MultiHeadSelfAttention(512, 8, 64, False), uniform(10, 150, 512), uniform(10, 150, 512), False, False
        if name == "mql5_block":
            return Mql5Block(), uniform(64, 40, 12), uniform(64, 2), True, False
        if name == "cnn_small":
            return CnnSmall(), uniform(64, 1, 28, 28), torch.randint(0, 10, (64,), dtype=torch.long), True, True
        if name == "lstm":
            return Lstm(), uniform(64, 100, 32), uniform(64, 1), True, False
        if name == "char_gpt":
            return (CharGpt(), torch.randint(0, 65, (12, 64), dtype=torch.long),
                    torch.randint(0, 65, (12 * 64,), dtype=torch.long), True, True)
        assert name == "long_mha"
        return MultiHeadSelfAttention(256, 8, 32, True), uniform(4, seq, 256), uniform(4, seq, 256), False, False

    # torch_bench.cpp's warm_up_libraries: threads, buffers, lazily initialized kernels and the autograd engine
    # started on tiny tensors before the baseline is taken.
    def warm_up_libraries():
        linear = nn.Linear(8, 8)
        norm = nn.LayerNorm([8], eps=1e-6)
        x = torch.rand(2, 4, 8)
        h = norm(x + linear(F.silu(x)))
        s = torch.softmax(torch.matmul(h, h.transpose(-2, -1)) * 0.5, -1)
        loss = F.mse_loss(torch.tanh(torch.matmul(s, h)), x)
        loss.backward()
        torch.optim.SGD(linear.parameters(), lr=0.01).step()
        loss.item()

    # bench_common.hpp's time_steps.
    def time_steps(step):
        for _ in range(a.warmup):
            step()
        times = []
        start = time.perf_counter()
        while True:
            t0 = time.perf_counter()
            step()
            t1 = time.perf_counter()
            times.append((t1 - t0) * 1000.0)
            n = len(times)
            elapsed = t1 - start
            if a.iters > 0:
                if n >= a.iters:
                    break
            elif (n >= a.max_iters or (elapsed >= a.min_time and n >= a.min_iters)
                  or (elapsed >= a.max_time and n >= 3)):
                break
        times.sort()
        n = len(times)
        median = times[n // 2] if n % 2 == 1 else 0.5 * (times[n // 2 - 1] + times[n // 2])
        return median, times[0], n

    warm_up_libraries()
    baseline = status_mb("VmRSS")
    module, x, y, adam, classes = make_workload(a.workload)

    forward = module
    if a.compile:
        try:
            forward = torch.compile(module)
        except Exception as error:  # noqa: BLE001  (reported, not raised)
            emit({"error": "torch.compile: %s: %s" % (type(error).__name__, str(error)[:500])})
            return 3

    if a.mode == "forward":
        module.eval()

        def step():
            with torch.no_grad():
                forward(x)
    else:
        module.train()
        if adam:
            optimizer = torch.optim.Adam(module.parameters(), lr=1e-3, betas=(0.9, 0.999), eps=1e-7)
        else:
            optimizer = torch.optim.SGD(module.parameters(), lr=0.01)
        set_to_none = a.zero_grad == "none"

        def step():
            optimizer.zero_grad(set_to_none=set_to_none)
            output = forward(x)
            loss = F.cross_entropy(output, y) if classes else F.mse_loss(output, y)
            loss.backward()
            optimizer.step()
            loss.item()

    compile_s = None
    if a.compile:
        # The first call compiles (and may fail: no compiler, no network for a cache, an unsupported op): do it
        # here, outside the timed loop, and report its cost; the usual warmup steps follow.
        t0 = time.perf_counter()
        try:
            step()
        except Exception as error:  # noqa: BLE001
            emit({"error": "torch.compile: %s: %s" % (type(error).__name__, str(error).strip()[:500])})
            return 3
        compile_s = time.perf_counter() - t0

    median, minimum, iters = time_steps(step)
    fields = {"ms_median": round(median, 4), "ms_min": round(minimum, 4), "iters": iters,
              "peak_rss_mb": round(status_mb("VmHWM") - baseline, 1), "baseline_rss_mb": round(baseline, 1)}
    if compile_s is not None:
        fields["compile_s"] = round(compile_s, 2)
    if a.zero_grad != "zero" and a.mode == "train_step":
        fields["zero_grad"] = a.zero_grad
    emit(fields)
    return 0


def main(argv):
    a = parse_args(argv)
    if a.list:
        for name, fwd, train, has_seq, what in WORKLOADS:
            modes = ",".join(m for m, ok in (("forward", fwd), ("train_step", train)) if ok)
            print("%-11s %-19s %s%s" % (name, modes, what, " [--seq T, default 1024]" if has_seq else ""))
        return 0
    if a.all:
        return run_all(a)
    try:
        return run_one(a)
    except Exception as error:  # noqa: BLE001
        print("torch_peer: %s: %s" % (type(error).__name__, error), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
