#!/usr/bin/env bash
# Installs the optional benchmark peer: Debian 12's libtorch (the PyTorch C++ API, several hundred MB).
# kiln itself never depends on it; only bench/torch_bench links it. Idempotent, like install-deps.sh.
set -euo pipefail
source "$(dirname "$0")/apt-install.sh"

apt_install install-peer libtorch-dev
