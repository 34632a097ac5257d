#!/usr/bin/env bash
# test_cli_zero.sh — `pipit train --zero N` (ZeRO-2 and ZeRO-3 under the
# pipeline, docs/architecture.md §9): --zero 2 and --zero 3 save the same
# checkpoint bytes and print the same losses as --zero1 at the same --dp
# (f32 1F1B and bf16 ZB-V); a checkpoint saved at --zero 3 --dp 2 resumes
# at --zero1 --dp 2 bit for bit with the uninterrupted run, and at --dp 1
# with the same first loss (the later bits differ by the replicas' sum
# order, as for any change of --dp); --zero 3 --reshard-after-forward (params
# gathered per task) saves the same bytes too; bad --zero values and
# --reshard-after-forward without --zero 3 are refused by name.
# Usage: test_cli_zero.sh PIPIT SRCDIR
set -u

source "$(dirname "$0")/cli_lib.sh"
cli_setup cli_zero "${1:-}"

run() { # run LOG cmd...: stdout to LOG; a failure is reported
    local log=$1
    shift
    "$@" >"$log" 2>"$log.err" || fail "exit $?: $*"$'\n'"$(cat "$log.err")"
}
losses() { grep -o '"loss":[^,]*' "$@" | sed 's/.*://'; }

$PY -c 'import random; r = random.Random(5); w = ["the ", "cat ", "sat ", "on ", "a ", "mat. ", "dog ", "ran "]
open("text.txt", "w").write("".join(r.choice(w) for _ in range(3000)))' || exit 1
MODEL=(--data text.txt --ctx 16 --layers 4 --heads 2 --dim 16 --micro-batch 2 --lr 3e-3 --weight-decay 0.1
       --clip 1.0 --seed 3 --json)

# ---- bad values, each refused with a message before any work
expect_fail "0..3" "$PIPIT" train "${MODEL[@]}" --steps 1 --dp 2 --zero 4
expect_fail "0..3" "$PIPIT" train "${MODEL[@]}" --steps 1 --dp 2 --zero -1
expect_fail "contradicts --zero 2" "$PIPIT" train "${MODEL[@]}" --steps 1 --dp 2 --zero1 --zero 2
expect_fail "needs --dp 2" "$PIPIT" train "${MODEL[@]}" --steps 1 --zero 3
expect_fail "it needs --zero 3 (got --zero 2)" "$PIPIT" train "${MODEL[@]}" --steps 1 --dp 2 --zero 2 --reshard-after-forward
expect_fail "it needs --zero 3 (got --zero 1 from --zero1)" "$PIPIT" train "${MODEL[@]}" --steps 1 --dp 2 --zero1 --reshard-after-forward

# ---- ZeRO-2 / ZeRO-3 == ZeRO-1, bit for bit
for c in "f32 1f1b|--schedule 1f1b --pp 2 --dp 2 --microbatches 4" \
         "bf16 zb-v|--dtype bf16 --schedule zb-v --pp 2 --dp 2 --microbatches 4"; do
    name=${c%%|*} flags=${c#*|}
    # shellcheck disable=SC2086
    run z1.log "$PIPIT" train "${MODEL[@]}" $flags --zero1 --steps 3 --save z1.st
    for z in 2 3 "3 --reshard-after-forward"; do
        t=${z// /} # 2, 3, 3--reshard-after-forward
        # shellcheck disable=SC2086
        run z$t.log "$PIPIT" train "${MODEL[@]}" $flags --zero $z --steps 3 --save z$t.st
        cmp -s z1.st z$t.st || fail "$name: --zero $z saved other bytes than --zero1"
        [ "$(losses z$t.log)" = "$(losses z1.log)" ] || fail "$name: --zero $z losses $(losses z$t.log | tr '\n' ' ') != --zero1's"
    done
done

# ---- layout-free checkpoints: saved at ZeRO-3 D=2, resumed at ZeRO-1 D=2 and at D=1
FLAGS=(--schedule 1f1b --pp 2 --microbatches 4)
run full.log "$PIPIT" train "${MODEL[@]}" "${FLAGS[@]}" --dp 2 --zero1 --steps 3 --save full.st
run a.log "$PIPIT" train "${MODEL[@]}" "${FLAGS[@]}" --dp 2 --zero 3 --steps 2 --save a.st
run b.log "$PIPIT" train --resume a.st --steps 3 --dp 2 --zero1 --save b.st --json
cmp -s full.st b.st || fail "resumed at --zero1 --dp 2: the checkpoint differs from the uninterrupted run's"
[ "$(losses a.log b.log)" = "$(losses full.log)" ] || fail "resumed at --zero1 --dp 2: losses differ"
run c.log "$PIPIT" train --resume a.st --steps 3 --dp 1 --save c.st --json
[ "$(losses c.log)" = "$(losses full.log | tail -1)" ] || fail "resumed at --dp 1: step 3's loss $(losses c.log) != $(losses full.log | tail -1)"

if [ "$failures" -ne 0 ]; then
    echo "test_cli_zero: $failures failure(s)" >&2
    exit 1
fi
echo "test_cli_zero: ok"
