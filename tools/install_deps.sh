#!/usr/bin/env bash
# Installs pipit's Debian packages (build tools, OpenBLAS, cJSON, and
# PyTorch + numpy for the independent oracle test). Skips apt when all are
# present; uses sudo when not root. What the hygiene tests need: binutils
# (nm, objdump: test_exports), pkg-config (test_installed_example, and
# pipit.pc's Requires.private), python3 (test_layout, the CLI test); Open
# MPI (the MPI transport and its tests), iproute2 (`ip netns`: emulated hosts);
# clang with its libFuzzer and sanitizer runtimes (the fuzzing pass).
set -euo pipefail
PKGS="build-essential clang libclang-rt-14-dev binutils cmake ninja-build pkg-config libopenblas-dev libcjson-dev python3 python3-numpy python3-torch openmpi-bin libopenmpi-dev iproute2"
missing=""
for p in $PKGS; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
  SUDO=""
  [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update
  $SUDO apt-get install -y $missing
fi
