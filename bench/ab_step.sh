#!/usr/bin/env bash
# bench/ab_step.sh — two pipit binaries (e.g. main's and a branch's) on the
# same train step, interleaved A, B, A, B, ... so that load which comes and
# goes on a shared machine falls on both alike. Per run: the median wall ms
# of the steps after the first, and the CPU ms per step from the process's
# task-clock ((run of S+2 steps - run of 2 steps) / S), which other
# processes taking the core do not inflate (at 1 thread; with more, it also
# counts a team's barrier spinning). Prints both medians and B's speedup.
#
# Usage: bench/ab_step.sh OLD NEW [runs=5] [-- train flags]
#   default flags: the GPT-2 124M step of docs/benchmarks.md §5
#   (--model gpt2 --ctx 64 --micro-batch 4 --threads 1) on DATA
#   env: DATA (a text file; default: this repository's README.md),
#        STEPS (timed steps per run, default 4)
set -euo pipefail
[[ $# -ge 2 ]] || { sed -n '2,16p' "$0"; exit 2; }
OLD=$1 NEW=$2
shift 2
RUNS=5
if [[ $# -gt 0 && $1 != -- ]]; then RUNS=$1; shift; fi
[[ ${1:-} == -- ]] && shift
FLAGS=("$@")
[[ ${#FLAGS[@]} -gt 0 ]] || FLAGS=(--model gpt2 --ctx 64 --micro-batch 4 --threads 1)
DATA=${DATA:-$(cd "$(dirname "$0")/.." && pwd)/README.md}
STEPS=${STEPS:-4}
for b in "$OLD" "$NEW"; do [[ -x $b ]] || { echo "ab_step: $b is not an executable" >&2; exit 2; }; done
command -v perf >/dev/null || { echo "ab_step: needs perf (linux-perf) for the CPU time" >&2; exit 2; }

median() { sort -n | awk '{a[NR] = $1} END {if (NR) print a[int((NR + 1) / 2)]}'; }
# wall: median step ms after the first; cpu: task-clock ms of the run
run() {
    local bin=$1 steps=$2 out
    out=$(perf stat -x, -e task-clock "$bin" train --data "$DATA" --seed 7 --steps "$steps" "${FLAGS[@]}" 2>&1) ||
        { echo "ab_step: $bin failed: $out" >&2; exit 1; }
    local wall cpu
    wall=$(awk '/^step/ && $2 > 0 {for (i = 1; i < NF; i++) if ($(i + 1) == "ms") print $i}' <<<"$out" | median)
    cpu=$(awk -F, '/task-clock/ {print $1}' <<<"$out")
    echo "$wall $cpu"
}
declare -A WALL CPU
for r in $(seq "$RUNS"); do
    for b in "$OLD" "$NEW"; do
        read -r wall cpu_long < <(run "$b" $((STEPS + 2)))
        read -r _ cpu_short < <(run "$b" 2)
        cpu=$(awk -v a="$cpu_long" -v b="$cpu_short" -v s="$STEPS" 'BEGIN {printf "%.1f", (a - b) / s}')
        WALL[$b]+="$wall " CPU[$b]+="$cpu "
        echo "run $r  $b  wall ${wall} ms/step  cpu ${cpu} ms/step"
    done
done
med() { tr ' ' '\n' <<<"$1" | grep . | median; }
wo=$(med "${WALL[$OLD]}") wn=$(med "${WALL[$NEW]}") co=$(med "${CPU[$OLD]}") cn=$(med "${CPU[$NEW]}")
echo "median wall: old $wo new $wn ms/step -> $(awk -v a="$wo" -v b="$wn" 'BEGIN {printf "%.3f", a / b}')x"
echo "median cpu:  old $co new $cn ms/step -> $(awk -v a="$co" -v b="$cn" 'BEGIN {printf "%.3f", a / b}')x"
