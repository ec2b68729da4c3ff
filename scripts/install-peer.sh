#!/usr/bin/env bash
# Installs the optional benchmark peers: Debian 12's libtorch (the PyTorch C++ API, several hundred MB) and
# PyTorch for Python, and
# the GEMM libraries bench/gemm_bench measures beside OpenBLAS and libxsmm (which kiln itself uses, and
# install-deps.sh installs). kiln depends on none of these; only bench/ links them. Idempotent, like
# install-deps.sh.
set -euo pipefail
source "$(dirname "$0")/apt-install.sh"

apt_install install-peer libtorch-dev
# PyTorch in Python, for bench/torch_peer.py (eager nn.Modules): Debian's is the same 1.13 as libtorch-dev, but a
# machine with PyTorch 2 in its python3 runs the same script, and make bench reports it beside libtorch.
apt_install install-peer python3-torch
# The GEMM libraries bench/gemm_bench compares with OpenBLAS and libxsmm (scripts/gemm_bench.sh): BLIS, oneDNN.
apt_install install-peer libblis-dev libdnnl-dev
