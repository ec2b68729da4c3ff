#!/usr/bin/env bash
# Installs Graphviz (Debian's graphviz), which `kiln plot-model` and kiln::plot_model call as the `dot`
# program to draw a model's layer graph. Nothing else in kiln needs it. Idempotent, like install-deps.sh.
set -euo pipefail
source "$(dirname "$0")/apt-install.sh"

apt_install install-graphviz graphviz
