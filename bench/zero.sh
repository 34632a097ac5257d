#!/usr/bin/env bash
# bench/zero.sh — ZeRO-2 and ZeRO-3 step time against ZeRO-1 at D = 2
# (docs/benchmarks.md §19): the same GPT-2 (L 4, C 256, ctx 64, V 256: 3.2M
# params), P = 2 (1F1B), D = 2, M = 4 microbatches of 4 sequences, the three
# stages interleaved over ROUNDS rounds (so a load change hits all three),
# as threads and as 4 MPI processes over shared memory (vader). Prints the
# median step time of steps 2..STEPS of every run, then per stage the
# median over the rounds. The runs have the same bits (tests/test_zero.c).
# "ZeRO-3r" is --zero 3 --reshard-after-forward (params gathered per task).
# NETNS=1 adds P = 1, D = 2 as 2 processes over shared memory (vader) and
# the same across two emulated hosts over TCP (tests/netns_hosts.sh: a veth
# pair between two network namespaces, removed when each run ends; root).
# Usage: bench/zero.sh            env: BUILD=build-bench ROUNDS=3 STEPS=12 MPI=1 SMALL=0 NETNS=0
# (SMALL=1: L 2, C 128, ctx 32, B 2 instead)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-bench} ROUNDS=${ROUNDS:-3} STEPS=${STEPS:-12} MPI=${MPI:-1} NETNS=${NETNS:-0}
NETNS_SH=$(realpath tests/netns_hosts.sh)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
source bench/bench_lib.sh
bench_build "$BUILD"
bench_workdir
SIZE=(--layers 4 --dim 256 --heads 4 --ctx 64 --micro-batch 4)
[ "${SMALL:-0}" = 1 ] && SIZE=(--layers 2 --dim 128 --heads 2 --ctx 32 --micro-batch 2) # 0.4M params
ARGS=(--data corpus.txt "${SIZE[@]}" --pp 2 --dp 2 --microbatches 4 --steps "$STEPS" --json)
ARGS1=(--data "$WORK/corpus.txt" "${SIZE[@]}" --dp 2 --microbatches 4 --steps "$STEPS" --json) # P = 1
declare -A ALL
modes=(threads)
[ "$MPI" = 1 ] && command -v mpirun >/dev/null && modes+=(mpi)
[ "$NETNS" = 1 ] && command -v mpirun >/dev/null && modes+=(vader-p1 tcp-p1)
STAGES=(1 2 3 3r)
for r in $(seq "$ROUNDS"); do
    for mode in "${modes[@]}"; do
        for z in "${STAGES[@]}"; do
            flag=(--zero "${z%r}")
            [ "$z" = 3r ] && flag+=(--reshard-after-forward)
            case $mode in
            threads) "$PIPIT" train "${ARGS[@]}" "${flag[@]}" > run.log 2>/dev/null ;;
            mpi) mpirun -np 4 --bind-to none --mca btl self,vader "$PIPIT" train "${ARGS[@]}" "${flag[@]}" > run.log 2>/dev/null ;;
            vader-p1) mpirun -np 2 --bind-to none --mca btl self,vader "$PIPIT" train "${ARGS1[@]}" "${flag[@]}" > run.log 2>/dev/null ;;
            tcp-p1) "$NETNS_SH" run -np 2 -- "$PIPIT" train "${ARGS1[@]}" "${flag[@]}" > run.log 2>/dev/null ;;
            esac
            ms=$(median_ms run.log)
            echo "round $r $mode ZeRO-$z: $ms ms/step"
            ALL[$mode.$z]="${ALL[$mode.$z]:-} $ms"
        done
    done
done
for mode in "${modes[@]}"; do
    line="$mode:"
    for z in "${STAGES[@]}"; do
        # shellcheck disable=SC2086
        m=$(python3 -c 'import sys,statistics as s; print("%.1f" % s.median(map(float, sys.argv[1:])))' ${ALL[$mode.$z]})
        line+=" ZeRO-$z $m ms"
    done
    echo "$line (median over $ROUNDS rounds)"
done
