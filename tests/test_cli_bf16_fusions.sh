#!/usr/bin/env bash
# test_cli_bf16_fusions.sh — `pipit plan` counts the bf16 GEMM fusions of
# each rank (docs/architecture.md "Precision"), text and --json, against a
# count by hand for the tiny GPT-2 (4 layers): per microbatch 16 linear
# layers with a bias (qkv, attention projection, MLP in and out), each
# BIAS_ADD in its matmul's epilogue, and 17 weight gradients (those 16
# weights and the tied head's wte) written by their GEMMs into fp32
# accumulators; none in f32. With --pp 2 the head's stage has the head's
# gradient; the two ranks' counts add up to one rank's. Training with the
# fusions still follows the plan: a 3-step bf16 run at --pp 2 writes the
# checkpoint bytes of --pp 1 (the fusions are the same on every layout).
# Usage: test_cli_bf16_fusions.sh PIPIT SRCDIR
set -u

source "$(dirname "$0")/cli_lib.sh"
cli_setup cli_bf16_fusions "${1:-}"
head -c 100000 "${2:?usage: test_cli_bf16_fusions.sh PIPIT SRCDIR}/README.md" >text.txt

counts() { # JSON on stdin -> "epi wgrad" summed over ranks
    $PY -c '
import json, sys
d = json.load(sys.stdin)
r = d["ranks"]
print(sum(x["bias_epilogues"] for x in r), sum(x["fp32_weight_gradients"] for x in r))'
}

M=2
for pp in 1 2; do
    for dt in bf16 f32; do
        expect_ok "$PIPIT" plan --model tiny --data text.txt --dtype $dt --microbatches $M --pp $pp --json || continue
        got=$(counts <<<"$OUT")
        want="$((16 * M)) $((17 * M))"
        [ "$dt" = f32 ] && want="0 0"
        [ "$got" = "$want" ] || fail "plan --dtype $dt --pp $pp: fusions (bias epilogues, fp32 weight gradients) $got, by hand $want"
    done
done
expect_ok "$PIPIT" plan --model tiny --data text.txt --dtype bf16 --microbatches $M
grep -q "bf16 GEMM fusions: $((16 * M)) with the bias in the epilogue, $((17 * M)) writing" <<<"$OUT" ||
    fail "plan text lacks the fusion line: $OUT"

# the same bits on both layouts
for pp in 1 2; do
    expect_ok "$PIPIT" train --model tiny --data text.txt --dtype bf16 --microbatches $M --pp $pp --steps 3 \
        --save ck$pp.ckpt
done
cmp -s ck1.ckpt ck2.ckpt || fail "bf16 --pp 2 checkpoint differs from --pp 1's"

[ "$failures" -eq 0 ] || { echo "test_cli_bf16_fusions: $failures failure(s)"; exit 1; }
echo "test_cli_bf16_fusions: ok"
