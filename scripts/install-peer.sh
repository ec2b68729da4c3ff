#!/usr/bin/env bash
# Installs the optional benchmark peer: Debian 12's libtorch (the PyTorch C++ API). kiln itself never
# depends on it; only bench/torch_bench links it. Idempotent: when the packages are already installed
# it does nothing (no apt-get update, no network).
set -euo pipefail

packages=(libtorch-dev)

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
  echo "install-peer: missing packages: ${missing[*]}" >&2
  echo "install-peer: run as root, or: sudo apt-get install ${missing[*]}" >&2
  exit 1
fi

echo "install-peer: installing ${missing[*]} (large: several hundred MB)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}"
