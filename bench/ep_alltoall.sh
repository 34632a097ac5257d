#!/usr/bin/env bash
# bench/ep_alltoall.sh — expert parallelism's all-to-all (pipit's MPI
# transport, pipit__transport_alltoall: what --ep runs) against raw
# MPI_Alltoall of the same bytes, over shared memory (btl self,vader) and
# TCP on loopback (btl self,tcp), 2 processes (and 4 with NP=4), each
# network ROUNDS times, the networks interleaved (bench/bench_alltoall.c:
# per size the median of REPS alternating repetitions). Prints every run's
# summary line, then per network and size the median ratio pipit / raw of
# the rounds and their spread (min-max).
#
# Usage: bench/ep_alltoall.sh [BUILD=build] (env: ROUNDS=3 REPS=9 NP=2)
set -euo pipefail
BUILD=${1:-build}
ROUNDS=${ROUNDS:-3} REPS=${REPS:-9} NP=${NP:-2}
[[ -x $BUILD/bench_alltoall ]] || { echo "ep_alltoall: build $BUILD/bench_alltoall first (ninja -C $BUILD bench_alltoall)" >&2; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN=(mpirun --oversubscribe --bind-to none -np "$NP" --mca pml ob1)
echo "nproc: $(nproc); $(uptime | sed 's/.*load/load/'); $(mpirun --version | head -1); np $NP"
LOG=$(mktemp)
trap 'rm -f "$LOG"' EXIT
for r in $(seq "$ROUNDS"); do
    for net in vader tcp; do
        extra=()
        [[ $net == tcp ]] && extra=(--mca btl_tcp_if_include lo)
        out=$("${MPIRUN[@]}" --mca btl "self,$net" "${extra[@]}" "$BUILD/bench_alltoall" "$REPS")
        echo "== round $r $net ($(uptime | sed 's/.*load average: //'))"
        echo "$out"
        echo "$net $(grep '^summary' <<<"$out")" >> "$LOG"
    done
done
echo
echo "pipit / raw MPI_Alltoall bandwidth, median of $ROUNDS rounds (min-max), np $NP:"
python3 - "$LOG" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    net, _, *kv = line.split()
    for k, v in zip(kv[::2], kv[1::2]):
        rows.setdefault((net, k), []).append(float(v))
for (net, k), v in rows.items():
    print(f"{net:6s} {k:5s} {statistics.median(v):.3f} ({min(v):.3f}-{max(v):.3f})")
PY
