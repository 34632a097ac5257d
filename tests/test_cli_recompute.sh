#!/usr/bin/env bash
# test_cli_recompute.sh — `--recompute none|pointwise|full` (and --remat,
# its "full") from the command line: the three give the same losses to
# every printed digit and the same checkpoint bytes (GPT-2 and Llama, 2
# pipeline stages, f32 and bf16); `pipit plan --json` shows pointwise
# below none and full below pointwise on the first stage's rank, by at
# least the hand-counted bytes pointwise stops keeping (Llama: silu(gate)
# and the product, GPT-2: the GELU's output, F wide, a layer and
# microbatch in flight each, less two layer-microbatches' worth); the refusals by message (an unknown mode,
# --remat contradicting --recompute pointwise).
# Usage: test_cli_recompute.sh PIPIT SRCDIR
set -u

CLI_FIXED=1
source "$(dirname "$0")/cli_lib.sh"
cli_setup cli_recompute "${1:-}"
cli_loss_helpers
cli_words_text 3 3000

for model in tiny llama-tiny; do
    for dt in f32 bf16; do
        a=(--model "$model" --data text.txt --ctx 32 --micro-batch 2 --pp 2 --microbatches 2 --steps 3 --dtype "$dt" --json)
        for r in none pointwise full; do
            run "$r.log" "$PIPIT" train "${a[@]}" --recompute "$r" --save "$r.st"
        done
        run remat.log "$PIPIT" train "${a[@]}" --remat --save remat.st
        for r in pointwise full; do
            [ "$(losses none.log)" = "$(losses $r.log)" ] ||
                fail "$model $dt: --recompute $r changed the losses: $(losses $r.log | tr '\n' ' ') vs $(losses none.log | tr '\n' ' ')"
            cmp -s none.st "$r.st" || fail "$model $dt: --recompute $r saved other bytes than --recompute none"
        done
        [ -n "$(losses none.log)" ] || fail "$model $dt: no losses printed"
        cmp -s full.st remat.st || fail "$model $dt: --remat is not --recompute full"
    done
done

# planned activation arena of world rank 0 (the first stage, 2 microbatches
# in flight under 1F1B)
arena() {
    "$PIPIT" plan --data text.txt --model "$1" --ctx 64 --micro-batch 4 --pp 2 --microbatches 4 --recompute "$2" --json |
        $PY -c 'import json,sys; print(json.load(sys.stdin)["ranks"][0]["arena_bytes"])'
}
# --model, the F-wide values per layer pointwise no longer keeps, layers on rank 0, F
for spec in "tiny 1 2 512" "llama-tiny 2 2 352"; do
    set -- $spec
    none=$(arena "$1" none) pw=$(arena "$1" pointwise) full=$(arena "$1" full)
    [ -n "$none" ] && [ -n "$pw" ] && [ -n "$full" ] || { fail "$1: plan --json gave no arena_bytes"; continue; }
    # 2 microbatches in flight x layers x values x B*T*F fp32, less up to
    # two layer-microbatches' worth: a backward's recomputed values, and
    # where the arena's first fit places them
    want=$(( (2 * $3 - 2) * $2 * 4 * 64 * $4 * 4 ))
    echo "$1: arena none $none, pointwise $pw (saves $((none - pw)), at least $want), full $full"
    [ $((none - pw)) -ge "$want" ] || fail "$1: pointwise saves $((none - pw)) bytes of the arena, expected at least $want"
    [ "$full" -lt "$pw" ] || fail "$1: full recompute ($full) not below pointwise ($pw)"
done

expect_fail "bad value 'some' for --recompute: expected none, pointwise or full" \
    "$PIPIT" train --data text.txt --recompute some --steps 1
expect_fail "--remat is --recompute full: it contradicts --recompute pointwise" \
    "$PIPIT" train --data text.txt --remat --recompute pointwise --steps 1

if [ "$failures" -ne 0 ]; then
    echo "test_cli_recompute: $failures failure(s)" >&2
    exit 1
fi
echo "test_cli_recompute: ok"
exit 0
