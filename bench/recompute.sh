#!/usr/bin/env bash
# bench/recompute.sh — what --recompute pointwise and full cost and save
# (docs/benchmarks.md §23): GPT-2 124M (gpt2) and llama-100m, f32 and bf16, one
# rank, 2 microbatches of B sequences of CTX tokens, 1 thread. For each
# model and dtype the three modes run interleaved over ROUNDS rounds (a
# load change hits all three); prints the median step time of steps 2..STEPS
# of every run, the median over the rounds, and the planned activation
# arena and whole-rank peak from `pipit plan --json`. The three modes have
# the same bits (tests/test_remat.c, tests/test_cli_recompute.sh).
# Usage: bench/recompute.sh     env: BUILD=build-bench ROUNDS=3 STEPS=6 CTX=256 B=4 MODELS="gpt2 llama-100m" DTYPES="f32 bf16"
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build-bench} ROUNDS=${ROUNDS:-3} STEPS=${STEPS:-6} CTX=${CTX:-256} B=${B:-4}
MODELS=${MODELS:-gpt2 llama-100m} DTYPES=${DTYPES:-f32 bf16}
source bench/bench_lib.sh
bench_build "$BUILD"
bench_workdir
for model in $MODELS; do
    for dt in $DTYPES; do
        args=(--data corpus.txt --model "$model" --ctx "$CTX" --micro-batch "$B" --microbatches 2 --dtype "$dt")
        declare -A runs=()
        for ((r = 1; r <= ROUNDS; r++)); do
            for mode in none pointwise full; do
                "$PIPIT" train "${args[@]}" --recompute "$mode" --steps "$STEPS" --json >"$mode.$r.log" 2>/dev/null
                runs[$mode]+="$(median_ms "$mode.$r.log") "
            done
        done
        for mode in none pointwise full; do
            "$PIPIT" plan "${args[@]}" --recompute "$mode" --json >"$mode.plan.json" 2>/dev/null
            python3 - "$model" "$dt" "$mode" "${runs[$mode]}" "$mode.plan.json" <<'PYEOF'
import json, statistics, sys
model, dt, mode, runs, path = sys.argv[1:6]
ms = [float(x) for x in runs.split()]
r = json.load(open(path))["ranks"][0]
print("%-10s %-4s %-9s step ms %s  median %.1f   arena %7.1f MiB  rank peak %7.1f MiB" % (
    model, dt, mode, " ".join("%.1f" % x for x in ms), statistics.median(ms), r["arena_bytes"] / 2**20,
    r["memory"]["total"] / 2**20))
PYEOF
        done
        unset runs
    done
done
