#!/usr/bin/env bash
# Installs Debian's Open MPI (4.1.4 on Debian 12) for kiln::distributed and its tests. Idempotent: when both
# packages are installed it does nothing. After it, configure again (cmake finds MPI: KILN_WITH_MPI=AUTO).
set -euo pipefail
source "$(dirname "$0")/apt-install.sh"

apt_install install-mpi libopenmpi-dev openmpi-bin
