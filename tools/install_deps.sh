#!/usr/bin/env bash
# Installs pipit's Debian packages. Two lists:
#   MAIN_PKGS  build and run pipit (examples/quickstart.sh, the README's main
#              job): the compiler, CMake + Ninja, pkg-config (pipit.pc),
#              OpenBLAS, cJSON, oneDNN (the bf16 matmul), Open MPI (the
#              MPI transport; optional for the build, part of running
#              pipit on several machines);
#   TEST_PKGS  only the tests and CI need (.ci/run): python3 (the CLI tests,
#              test_layout), numpy + PyTorch (the independent oracle),
#              pytest (the Python binding's tests, tests/python),
#              clang with its libFuzzer and sanitizer runtimes (the fuzzing
#              pass), binutils (nm, objdump: test_exports), iproute2 (`ip
#              netns`: emulated hosts), bsdutils (script(1): a terminal for
#              the progress bar test).
# Usage: install_deps.sh          everything (.ci/run)
#        install_deps.sh --main   MAIN_PKGS only (examples/quickstart.sh)
#        install_deps.sh --print main|test|all   print a list, install nothing
# Skips apt when all are present; uses sudo when not root. .ci/check_deps.sh
# checks that each job's commands and libraries come from its list.
set -euo pipefail
MAIN_PKGS="build-essential cmake ninja-build pkg-config libopenblas-dev libcjson-dev libdnnl-dev openmpi-bin libopenmpi-dev"
TEST_PKGS="python3 python3-numpy python3-torch python3-pytest clang libclang-rt-14-dev binutils iproute2 bsdutils"
case "${1:-}" in
    --print)
        case "${2:-}" in
            main) echo "$MAIN_PKGS" ;;
            test) echo "$TEST_PKGS" ;;
            all) echo "$MAIN_PKGS $TEST_PKGS" ;;
            *) echo "usage: install_deps.sh --print main|test|all" >&2; exit 2 ;;
        esac
        exit 0 ;;
    --main) PKGS=$MAIN_PKGS ;;
    "") PKGS="$MAIN_PKGS $TEST_PKGS" ;;
    *) echo "usage: install_deps.sh [--main | --print main|test|all]" >&2; exit 2 ;;
esac
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
