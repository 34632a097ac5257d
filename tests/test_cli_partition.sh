#!/usr/bin/env bash
# test_cli_partition.sh — `--auto-stages`: plan prints the chosen cuts and
# each stage's predicted cost next to the even split's; train with
# --auto-stages logs the same losses, bit for bit, as the even split (at
# P = 2 and P = 4, with modelled and measured costs) and the final
# checkpoints are byte-identical, and so for interleaved, DualPipeV, ZB-H1,
# GPipe with remat and the zero-bubble family; bad flags, a memory limit nothing meets
# and more stages than cut points exit non-zero with a message.
# Usage: test_cli_partition.sh PIPIT SRCDIR
set -u

source "$(dirname "$0")/cli_lib.sh"
cli_setup cli_partition "${1:-}"

$PY - <<'EOF2' || { echo "cannot write test data"; exit 1; }
import random
r = random.Random(3)
words = ["pipe ", "line ", "stage ", "cut ", "head ", "vocab ", "loss. "]
open("text.txt", "w").write("".join(r.choice(words) for _ in range(3000)))
EOF2

MODEL=(--ctx 8 --heads 2 --dim 16 --micro-batch 2 --vocab 2048 --steps 3 --lr 3e-3)

expect_ok "$PIPIT" plan --data text.txt "${MODEL[@]}" --layers 2 --microbatches 4 --pp 2 --auto-stages
for w in "partition: 2 stages" "stage 1 (rank 1):" "(slowest)" "even split by layers" "rank 1: stages 1"; do
    grep -qF -- "$w" <<<"$OUT" || fail "plan --auto-stages lacks '$w'"$'\n'"$OUT"
done

losses() { grep -o '"loss":[^,]*' <<<"$1"; }
for P in 2 4; do
    LAYERS=(--layers "$P" --microbatches 4) # the even split needs a layer per stage
    expect_ok "$PIPIT" train --data text.txt "${MODEL[@]}" "${LAYERS[@]}" --pp "$P" --json --save even$P.st
    even=$(losses "$OUT")
    for costs in model measured; do
        expect_ok "$PIPIT" train --data text.txt "${MODEL[@]}" "${LAYERS[@]}" --pp "$P" --json --auto-stages \
            --stage-costs "$costs" --save auto$P$costs.st
        [ -n "$even" ] && [ "$(losses "$OUT")" = "$even" ] ||
            fail "P=$P --stage-costs $costs: losses differ from the even split"$'\n'"$even"$'\n'"$(losses "$OUT")"
        cmp -s even$P.st auto$P$costs.st || fail "P=$P --stage-costs $costs: final checkpoint differs from the even split"
    done
done

# other schedules: interleaved (two stages per rank), the V of DualPipeV and ZB-V, B/W split, remat
for sch in "--virtual 2 --schedule interleaved-1f1b" "--schedule dualpipev" "--schedule zb-h1" "--schedule gpipe --remat" \
    "--schedule zb-h2" "--schedule zb-v" "--virtual 2 --schedule interleaved-zb"; do
    # shellcheck disable=SC2086 # $sch is a list of flags
    expect_ok "$PIPIT" train --data text.txt "${MODEL[@]}" --layers 4 --microbatches 4 --pp 2 $sch --json
    even=$(losses "$OUT")
    # shellcheck disable=SC2086
    expect_ok "$PIPIT" train --data text.txt "${MODEL[@]}" --layers 4 --microbatches 4 --pp 2 $sch --json --auto-stages
    [ -n "$even" ] && [ "$(losses "$OUT")" = "$even" ] || fail "$sch: --auto-stages losses differ from the even split"
done

expect_fail "applies to --auto-stages only" "$PIPIT" plan --data text.txt "${MODEL[@]}" --layers 2 --pp 2 --stage-costs model
expect_fail "expected model or measured" "$PIPIT" plan --data text.txt "${MODEL[@]}" --layers 2 --pp 2 --auto-stages --stage-costs fast
expect_fail "smallest feasible limit is" "$PIPIT" plan --data text.txt "${MODEL[@]}" --layers 2 --pp 2 --auto-stages --stage-mem-limit 1000
expect_fail "valid cut point" "$PIPIT" plan --data text.txt "${MODEL[@]}" --layers 2 --pp 32 --microbatches 32 --auto-stages

[ "$failures" -eq 0 ] || exit 1
echo "ok"
