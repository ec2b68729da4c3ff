#!/usr/bin/env bash
# Installs the Debian 12 packages kiln builds and tests with. Idempotent: when every package is
# already installed it does nothing (no apt-get update, no network).
set -euo pipefail
source "$(dirname "$0")/apt-install.sh"

apt_install install-deps \
  libxtensor-dev libxtensor-blas-dev libxsimd-dev libopenblas-dev \
  catch2 libcereal-dev rapidjson-dev zlib1g-dev libzip-dev libhdf5-dev libcli11-dev libpcre2-dev libutf8proc-dev libsentencepiece-dev pkg-config cmake g++ make \
  ccache
# libxsmm (JIT kernels for small products) and oneDNN (the larger ones) exist in Debian for amd64 only; elsewhere
# kiln runs those products on OpenBLAS. oneDNN is a speed-up only (KILN_WITH_DNNL=AUTO): should it fail to install,
# kiln builds and runs without it.
if [ "$(dpkg --print-architecture)" = amd64 ]; then
  apt_install install-deps libxsmm-dev
  apt_install install-deps libdnnl-dev ||
    echo "install-deps: oneDNN (libdnnl-dev) not installed: kiln runs its wider products on libxsmm and OpenBLAS" >&2
fi
