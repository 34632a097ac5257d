#!/usr/bin/env bash
# bench/mpi.sh — the many-process numbers of docs/benchmarks.md §4, in one
# run: the raw MPI ping-pong against pipit's MPI transport (bench_transport:
# zero-copy sends, 8 B to 64 MiB, shared memory and TCP), then the train
# step of the same model with P=2 as threads and as two MPI processes, then
# data parallelism: the share of a D=2 step spent in the gradient exchange,
# with the exchange overlapped (the default: every param's reduce-scatter
# leaves as soon as its gradient is final, during the backward) and
# serialised (PIPIT_BENCH_DP_SERIAL=1: after the loop, each param's exchange
# complete before the next param's starts). The last line sums up the
# transport against raw MPI (bandwidth ratios pipit / raw at 1 MiB and
# 64 MiB, 8-byte latency pipit - raw in µs):
#   transport vs raw MPI: vader 1M R 64M R lat8 +L; tcp 1M R 64M R lat8 +L
#
# Usage: bench/mpi.sh [--quick]       env: BUILD=build-bench
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-bench}
QUICK=0
[[ ${1:-} == --quick ]] && QUICK=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" >/dev/null
PIPIT=$BUILD/pipit
MPIRUN=(mpirun --bind-to none)

echo "== machine"
echo "nproc: $(nproc); $(uptime | sed 's/.*load/load/'); $(mpirun --version | head -1)"
echo "git: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src include || echo ' (+ uncommitted src changes)')"

REPS=$((QUICK ? 2 : 5))
echo
echo "== 4a. ping-pong: raw MPI vs pipit's transport"
PINGPONG=$(mktemp)
trap 'rm -f "$PINGPONG"' EXIT
"${MPIRUN[@]}" -np 2 --mca pml ob1 --mca btl self,vader "$BUILD/bench_transport" "$REPS" | sed 's/^/vader  /' |
    tee -a "$PINGPONG"
"${MPIRUN[@]}" -np 2 --mca pml ob1 --mca btl self,tcp --mca btl_tcp_if_include lo "$BUILD/bench_transport" "$REPS" |
    sed 's/^/tcp    /' | tee -a "$PINGPONG"
# "NET summary lat8 D 64K R 1M R 64M R" -> "NET 1M R 64M R lat8 +L"
summary() { awk -v net="$1" '$1 == net && $2 == "summary" { printf "%s 1M %s 64M %s lat8 %s", net, $8, $10, $4 }' "$PINGPONG"; }

CORPUS=$(mktemp)
trap 'rm -f "$CORPUS" "$PINGPONG"' EXIT
cat README.md docs/*.md src/*/*.c > "$CORPUS"
STEPS=$((QUICK ? 6 : 20))
MODEL=(--data "$CORPUS" --ctx 64 --layers 4 --heads 4 --dim 128 --micro-batch 4 --steps "$STEPS" --json)

# median ms over the steps after the first two
median_ms() { grep -o '"ms":[0-9.]*' "$1" | cut -d: -f2 | tail -n +3 | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

echo
echo "== 4b. train step, P=2 1F1B M=8: threads vs MPI processes (median of $((STEPS - 2)) steps, ms)"
T=$(mktemp) && M=$(mktemp)
for round in 1 2; do
    "$PIPIT" train "${MODEL[@]}" --pp 2 --microbatches 8 > "$T"
    "${MPIRUN[@]}" -np 2 --mca btl self,vader "$PIPIT" train "${MODEL[@]}" --pp 2 --microbatches 8 > "$M" ||
        { echo "round $round: the MPI run failed"; exit 1; }
    echo "round $round: threads $(median_ms "$T")  mpi(vader) $(median_ms "$M")  ratio $(echo "$(median_ms "$M") / $(median_ms "$T")" | bc -l | cut -c1-5)"
done

echo
echo "== 4c. data parallelism, D=2 x P=1, M=4 per replica: the gradient exchange's share of the step"
for mode in overlapped serial; do
    env_=()
    [[ $mode == serial ]] && env_=(-x PIPIT_BENCH_DP_SERIAL=1)
    "${MPIRUN[@]}" -np 2 --mca btl self,vader "${env_[@]}" "$PIPIT" train "${MODEL[@]}" --dp 2 --microbatches 4 \
        --profile > "$M" 2> "$T.prof" || { echo "$mode: the run failed: $(grep -v '^ ' "$T.prof" | tail -3)"; exit 1; }
    dp=$(grep -E '^  dp ' "$T.prof" | awk '{s += $(NF-2)} END {printf "%.3f", s}')
    total=$(grep 'in instructions' "$T.prof" | awk '{print $(NF-3)}')
    echo "$mode: step $(median_ms "$M") ms; rank 0 spent ${dp} s of ${total} s of instructions in dp exchange" \
         "($(echo "100 * $dp / $total" | bc -l | cut -c1-4) %)"
done
"$PIPIT" train "${MODEL[@]}" --microbatches 4 > "$T"
echo "one replica alone (D=1, M=4, same per-replica work): step $(median_ms "$T") ms"
rm -f "$T" "$M" "$T.prof"

echo
echo "transport vs raw MPI: $(summary vader); $(summary tcp)"
