#!/usr/bin/env bash
# Installs the optional benchmark peers: Debian 12's libtorch (the PyTorch C++ API, several hundred MB), and
# the GEMM libraries bench/gemm_bench measures beside OpenBLAS and libxsmm (which kiln itself uses, and
# install-deps.sh installs). kiln depends on none of these; only bench/ links them. Idempotent, like
# install-deps.sh.
set -euo pipefail
source "$(dirname "$0")/apt-install.sh"

apt_install install-peer libtorch-dev
# The GEMM libraries bench/gemm_bench compares with OpenBLAS and libxsmm (scripts/gemm_bench.sh): BLIS, oneDNN.
apt_install install-peer libblis-dev libdnnl-dev
