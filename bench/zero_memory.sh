#!/usr/bin/env bash
# bench/zero_memory.sh — what ZeRO-1, 2 and 3 keep at D = 2, measured
# (docs/benchmarks.md §19): bench_zero_memory once per stage (its own
# process, so each peak resident set is its own) on GPT-2 124M's shape
# (L 12, C 768, V 50257) at ctx 128, P = 2 (1F1B) x D = 2 threads, M = 2
# microbatches of 1 sequence, 2 steps. Prints, per stage, the bytes the 4
# world ranks hold between steps (pipit_program_held_bytes) and the
# resident set after compiling, after each step (VmRSS) and at its peak
# (VmHWM); then the planner's per-rank memory at a step's peak and between
# steps (plan JSON, replica 0's: each pipeline rank's world ranks hold the
# same up to whole chunks).
# Usage: bench/zero_memory.sh     env: BUILD=build-bench STAGES="1 2 3" STEPS=2 SIZE="12 768 50257 128"
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-bench} STAGES=${STAGES:-1 2 3} STEPS=${STEPS:-2} SIZE=${SIZE:-12 768 50257 128}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$BUILD" --target bench_zero_memory -- -j2 >/dev/null
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
echo "nproc: $(nproc); $(uptime | sed 's/.*load/load/'); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
for z in $STAGES; do
    # shellcheck disable=SC2086
    "$BUILD/bench_zero_memory" "$z" "$STEPS" $SIZE "$WORK/plan$z.json"
done
python3 - "$WORK" $STAGES <<'PYEOF'
import json, sys
work, stages = sys.argv[1], sys.argv[2:]
MiB = 1048576
print("planner (replica 0), MiB per world rank: stage | peak total, params, grads, moments | between steps params, grads, moments")
for z in stages:
    j = json.load(open(f"{work}/plan{z}.json"))
    for r in j["ranks"]:
        m = r["memory"]
        print(f"ZeRO-{z} stage {r['rank']} | {m['total']/MiB:.1f}, {m['params']/MiB:.1f}, {m['grads']/MiB:.1f}, "
              f"{m['moments']/MiB:.1f} | {r['resident_param_bytes']/MiB:.1f}, {r['resident_grad_bytes']/MiB:.1f}, "
              f"{r['moment_bytes']/MiB:.1f}")
PYEOF
