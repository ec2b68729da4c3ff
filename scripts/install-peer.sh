#!/usr/bin/env bash
# Installs the optional benchmark peers: Debian 12's libtorch (the PyTorch C++ API, several hundred MB), and
# the GEMM libraries bench/gemm_bench measures beside OpenBLAS. kiln itself depends on none of them; only
# bench/ links them. Idempotent, like install-deps.sh.
set -euo pipefail
source "$(dirname "$0")/apt-install.sh"

apt_install install-peer libtorch-dev
# The GEMM libraries bench/gemm_bench compares with OpenBLAS (scripts/gemm_bench.sh): BLIS, libxsmm, oneDNN.
apt_install install-peer libblis-dev libxsmm-dev libdnnl-dev
