#!/usr/bin/env bash
# Installs the Debian 12 packages kiln builds and tests with. Idempotent: when every package is
# already installed it does nothing (no apt-get update, no network).
set -euo pipefail

packages=(
  libxtensor-dev libxtensor-blas-dev libxsimd-dev libopenblas-dev
  catch2 libcereal-dev rapidjson-dev zlib1g-dev libcli11-dev cmake g++ make ccache
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$package")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages: ${missing[*]}" >&2
  echo "install-deps: run as root, or: sudo apt-get install ${missing[*]}" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
