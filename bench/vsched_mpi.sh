#!/usr/bin/env bash
# bench/vsched_mpi.sh — V-Half and V-Min against 1F1B (and ZB-V) measured on
# 2 MPI processes (P = 2, one pipeline rank each, shared memory: vader),
# docs/benchmarks.md §18: per schedule the median step time of steps 2..N
# and tokens/s, the planner's per-rank peak (`pipit plan`, fullest rank) and
# each process's measured peak RSS, the schedules interleaved over ROUNDS
# rounds so a load change hits all of them. The same GPT-2 and global batch
# for all (micro-batch MB, M microbatches); at P = 2 the schedules' peak
# in-flight microbatches are all 2 ((P+2)//2 = (P+4)//3 = P), so equal
# memory is the same micro-batch size (the planned peaks are printed to
# show how equal). The runs have the same bits (tests/test_vsched.c).
# Usage: bench/vsched_mpi.sh    env: BUILD=build ROUNDS=2 STEPS=8 MB=2 M=8
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build} ROUNDS=${ROUNDS:-2} STEPS=${STEPS:-8} MB=${MB:-2} M=${M:-8}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
PIPIT=$(realpath "$BUILD/pipit")
source bench/bench_lib.sh
bench_workdir
ARGS=(--data corpus.txt --layers 4 --dim 128 --heads 4 --ctx 128 --micro-batch "$MB" --microbatches "$M" --pp 2)
SCHEDS=(1f1b v-half v-min zb-v)
stats() { # stats LOG: median ms of steps >= 2, tokens/s at that median
    python3 -c 'import json,sys,statistics as s
v=[json.loads(l) for l in open(sys.argv[1]) if l.startswith("{")]
ms=s.median(d["ms"] for d in v if d.get("step",0)>=2 and "ms" in d)
tok=[d["tokens_per_s"] for d in v if d.get("step",0)>=2 and "tokens_per_s" in d]
print("%.1f %.0f" % (ms, s.median(tok)))' "$1"
}
declare -A MS TOK RSS
PLAN=()
for s in "${SCHEDS[@]}"; do # the planner's fullest rank: total and activations (MiB)
    PLAN+=("$s $("$PIPIT" plan "${ARGS[@]}" --schedule "$s" 2>/dev/null |
        sed -n "s/memory per world rank at a step's peak: \([0-9.]*\) MiB = activations \([0-9.]*\).*/\1 \2/p" |
        sort -n | tail -1)")
done
for r in $(seq "$ROUNDS"); do
    for s in "${SCHEDS[@]}"; do
        mpirun -np 2 --bind-to none --mca btl self,vader /usr/bin/time -f "maxrss %M" "$PIPIT" train "${ARGS[@]}" \
            --schedule "$s" --steps "$STEPS" --json > run.log 2> run.err
        read -r ms tok <<<"$(stats run.log)"
        rss=$(sed -n 's/^maxrss //p' run.err | sort -n | tail -1)
        echo "round $r $s: $ms ms/step, $tok tokens/s, peak RSS of the larger process $((rss / 1024)) MiB"
        MS[$s]="${MS[$s]:-} $ms" TOK[$s]="${TOK[$s]:-} $tok" RSS[$s]="${RSS[$s]:-} $rss"
    done
done
med() { python3 -c 'import sys,statistics as s; print("%.1f" % s.median(map(float, sys.argv[1:])))' "$@"; }
echo "| schedule | step ms (median of rounds) | tokens/s | planned peak MiB, fullest rank (activations) | measured peak RSS MiB, larger process |"
echo "|---|---|---|---|---|"
for i in "${!SCHEDS[@]}"; do
    s=${SCHEDS[$i]}
    read -r _ tot act <<<"${PLAN[$i]}"
    # shellcheck disable=SC2086
    echo "| $s | $(med ${MS[$s]}) | $(med ${TOK[$s]}) | $tot ($act) | $(python3 -c 'import sys; print("%.1f" % (float(sys.argv[1]) / 1024))' "$(med ${RSS[$s]})") |"
done
