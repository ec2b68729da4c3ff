#!/usr/bin/env bash
# `make docs`: the API reference from the public headers' /// comments, with the README and the guides in
# docs/ as its pages, into build-docs/html (open build-docs/html/index.html). Installs Debian's doxygen when
# it is missing (as root). Fails, listing them, on any warning: an undocumented public declaration, a
# broken reference, a malformed command; the warnings are also in build-docs/warnings.txt.
set -euo pipefail

cd "$(dirname "$0")/.."
source scripts/apt-install.sh
if ! apt_install docs doxygen; then
  echo "docs: make docs needs doxygen" >&2
  exit 1
fi

rm -rf build-docs
mkdir -p build-docs
if ! doxygen docs/Doxyfile || [ -s build-docs/warnings.txt ]; then
  echo "docs: doxygen warned ($(wc -l < build-docs/warnings.txt) lines); first ones:" >&2
  head -n 40 build-docs/warnings.txt >&2
  exit 1
fi
echo "docs: build-docs/html/index.html"
