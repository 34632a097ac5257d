#!/usr/bin/env bash
# bench/run.sh — builds pipit (Release) and runs the benchmarks of
# docs/benchmarks.md: one-rank train step against the best-configured peers
# (Debian's torch with tuned malloc and OpenMP, PyPI torch 2.x, JAX) and the
# OpenBLAS sgemm ceiling, then pipeline bubble / overhead for every built-in
# schedule, then PyTorch's own pipelining (torch.distributed.pipelining).
#
# Usage: bench/run.sh [--quick] [--peers]
#   --quick   fewer steps, small model only (smoke test)
#   --peers   the peer comparisons only (parts 1 and 3; bench/peers.sh)
#   env: BUILD=build-bench                    build folder
#        DEBIAN_PY=/usr/bin/python3           Debian's python3-torch
#        PEERS_PY=/tmp/venv-peers/bin/python  a venv with PyPI torch 2.x and jax;
#                                             also runs torch.distributed.pipelining
#   A peer that is missing is skipped with the command that installs it.
# The machine may be shared: every number is a median over several steps;
# the load average is printed at the start and the end.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-bench}
export DEBIAN_PY=${DEBIAN_PY:-${TORCH_PY:-/usr/bin/python3}}
export PEERS_PY=${PEERS_PY:-${TORCH_PP_PY:-/tmp/venv-peers/bin/python}}
QUICK=0 PEERS=0
for a in "$@"; do
    case $a in
    --quick) QUICK=1 ;;
    --peers) PEERS=1 ;;
    *) echo "usage: bench/run.sh [--quick] [--peers]" >&2; exit 2 ;;
    esac
done

cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" >/dev/null

echo "== machine"
echo "nproc: $(nproc); cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')"
echo "start: $(date -u '+%F %T UTC'); $(uptime | sed 's/.*load/load/')"
echo "git: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src include bench || echo ' (+ uncommitted changes)')"

# ---------------------------------------------------------------- 1. step
echo
echo "== 1. train step, one rank: pipit vs the best-configured peers (bench/peers.py)"
QF=()
((QUICK)) && QF=(--quick)
python3 bench/peers.py --build "$BUILD" "${QF[@]}"

# ------------------------------------------------------------ 2. pipeline
if ! ((PEERS)); then
    echo
    echo "== 2. pipeline schedules, P=2 (bench_pipeline)"
    if ((QUICK)); then "$BUILD"/bench_pipeline 3 1; else "$BUILD"/bench_pipeline 9 2; fi
fi

# ------------------------------------------- 3. torch.distributed.pipelining
echo
echo "== 3. PyTorch pipelining (torch.distributed.pipelining, gloo, CPU, 2 processes x 1 thread)"
if ! [[ -x $PEERS_PY ]] || ! "$PEERS_PY" -c 'import torch.distributed.pipelining' 2>/dev/null; then
    echo "  skipped: $PEERS_PY has no torch.distributed.pipelining (needs torch >= 2.4)."
    echo "  To enable: python3 -m venv /tmp/venv-peers && /tmp/venv-peers/bin/pip install torch jax numpy"
else
    if ((QUICK)); then "$PEERS_PY" bench/torch_pipelining.py 3 1; else "$PEERS_PY" bench/torch_pipelining.py 9 2; fi
fi
echo
echo "end: $(date -u '+%F %T UTC'); $(uptime | sed 's/.*load/load/')"
