#!/usr/bin/env bash
# test_cli_ep.sh — expert parallelism from the command line (--ep):
# moe-tiny at --dp 2 --ep 2 and --dp 4 --ep 2 within 1e-6 of --ep 1 at the
# same --dp (losses of 4 steps), the same --ep pipelined (--pp 2: 1f1b,
# gpipe, zb-h1, interleaved, dualpipev, remat; bf16 1f1b) to the same bits
# (losses and checkpoint bytes), --zero 1 and 3 the bytes of --zero 0, its token counts equal to --ep 1's (each replica
# routes its own tokens), a run saved at --ep 2 resumed at --ep 1 = resumed
# at --ep 2 (checkpoints hold whole tensors), and the refusals by message.
# Usage: test_cli_ep.sh PIPIT SRCDIR
set -u

CLI_FIXED=1
source "$(dirname "$0")/cli_lib.sh"
cli_setup cli_ep "${1:-}"
# "step loss" lines, and the counts, of $OUT's --json lines
losses() { $PY -c '
import json,sys
for l in sys.stdin.read().splitlines():
    try: o = json.loads(l)
    except ValueError: continue
    if "step" in o and "loss" in o: print(o["step"], repr(o["loss"]), o.get("moe_counts"))' <<<"$OUT"; }
# whether two loss listings agree within 1e-6 relative, step by step
close() { $PY - "$1" "$2" <<'PYEOF'
import sys
a = [l.split()[:2] for l in sys.argv[1].splitlines()]
b = [l.split()[:2] for l in sys.argv[2].splitlines()]
ok = len(a) == len(b) > 0 and all(x[0] == y[0] and abs(float(x[1]) - float(y[1])) <= 1e-6 * abs(float(x[1])) for x, y in zip(a, b))
sys.exit(0 if ok else 1)
PYEOF
}

cli_words_text 5 2000
A=(train --model moe-tiny --data text.txt --ctx 16 --micro-batch 2 --microbatches 2 --json)

for D in 2 4; do
    expect_ok "$PIPIT" "${A[@]}" --steps 4 --dp $D
    ref=$(losses)
    expect_ok "$PIPIT" "${A[@]}" --steps 4 --dp $D --ep 2
    got=$(losses)
    close "$ref" "$got" || fail "--dp $D --ep 2 vs --ep 1:"$'\n'"$got"$'\n'"vs"$'\n'"$ref"
    # the counts are integer counts of each replica's own router choices
    [ "$(cut -d' ' -f3- <<<"$got" | head -1)" = "$(cut -d' ' -f3- <<<"$ref" | head -1)" ] ||
        fail "--dp $D --ep 2: step 0's token counts differ from --ep 1's"
done
B=(train --model moe-tiny --data text.txt --ctx 16 --micro-batch 2 --microbatches 4 --json) # dualpipev: M >= 2P
expect_ok "$PIPIT" "${B[@]}" --steps 3 --dp 2 --ep 2 --save p1.st
ep2=$(losses)
for s in "1f1b" "gpipe" "zb-h1" "interleaved-1f1b --virtual 2" "dualpipev" "1f1b --remat"; do
    expect_ok "$PIPIT" "${B[@]}" --steps 3 --dp 2 --ep 2 --pp 2 --schedule $s --save p2.st
    [ "$(losses)" = "$ep2" ] || fail "--ep 2 --pp 2 $s differs from --pp 1:"$'\n'"$(losses)"$'\n'"vs"$'\n'"$ep2"
    cmp -s p1.st p2.st || fail "--ep 2 --pp 2 $s: the checkpoint differs from --pp 1's"
done
expect_ok "$PIPIT" "${A[@]}" --steps 2 --dp 2 --ep 2 --dtype bf16 --save b1.st
expect_ok "$PIPIT" "${A[@]}" --steps 2 --dp 2 --ep 2 --dtype bf16 --pp 2 --schedule 1f1b --save b2.st
cmp -s b1.st b2.st || fail "bf16 --ep 2 --pp 2: the checkpoint differs from --pp 1's"

# ZeRO 1 and 3: the expert params' state shards over their --dp / --ep holders; the bytes of --zero 0
expect_ok "$PIPIT" "${A[@]}" --steps 2 --dp 4 --ep 2 --save z0.st
expect_ok "$PIPIT" "${A[@]}" --steps 2 --dp 4 --ep 2 --zero 1 --save z1.st
cmp -s z0.st z1.st || fail "--dp 4 --ep 2 --zero 1: the checkpoint differs from --zero 0's"
expect_ok "$PIPIT" "${A[@]}" --steps 2 --dp 4 --ep 2 --zero 3 --save z3.st
cmp -s z0.st z3.st || fail "--dp 4 --ep 2 --zero 3: the checkpoint differs from --zero 0's"

# saved at --ep 2, resumed at --ep 1 and at --ep 2: the same step 4 within 1e-6
expect_ok "$PIPIT" "${A[@]}" --steps 3 --dp 2 --ep 2 --save ep2.st
expect_ok "$PIPIT" "${A[@]}" --resume ep2.st --steps 5 --dp 2 --ep 2 --save r2.st
r2=$(losses)
expect_ok "$PIPIT" "${A[@]}" --resume ep2.st --steps 5 --dp 2 --save r1.st
r1=$(losses)
close "$r2" "$r1" || fail "resumed at --ep 1:"$'\n'"$r1"$'\n'"vs --ep 2:"$'\n'"$r2"

# overlapped pairs (one microbatch's all-to-all moving while another computes): the bytes of
# --no-a2a-overlap, sequential (B0|F1 ...) and DualPipeV; `plan --json` counts the pairs
M4=(--model moe-tiny --data text.txt --ctx 16 --micro-batch 2 --microbatches 4 --dp 2 --ep 2)
for sched in "" "--pp 2 --schedule dualpipev"; do
    expect_ok "$PIPIT" train "${M4[@]}" --steps 2 $sched --save ov.st
    expect_ok "$PIPIT" train "${M4[@]}" --steps 2 $sched --no-a2a-overlap --save ser.st
    cmp -s ov.st ser.st || fail "--ep 2 $sched: overlapped pairs saved other bytes than --no-a2a-overlap"
    pairs() { "$PIPIT" plan "${M4[@]}" $sched "$@" --json |
        $PY -c 'import json,sys; print(sum(r["overlapped_pairs"] for r in json.load(sys.stdin)["ranks"]))'; }
    [ "$(pairs)" -gt 0 ] || fail "--ep 2 $sched: no overlapped pairs in the plan"
    [ "$(pairs --no-a2a-overlap)" = 0 ] || fail "--ep 2 $sched --no-a2a-overlap: the plan has overlapped pairs"
    expect_ok "$PIPIT" plan "${M4[@]}" $sched
    grep -q "^overlapped pairs: [1-9]" <<<"$OUT" || fail "--ep 2 $sched: pipit plan does not name the overlapped pairs"
done

# refusals
expect_fail "--ep 2 does not divide --dp 3" "$PIPIT" "${A[@]}" --steps 1 --dp 3 --ep 2
expect_fail "--ep 3 does not divide --experts 8" "$PIPIT" "${A[@]}" --steps 1 --dp 3 --ep 3
expect_fail "pass --experts N" "$PIPIT" train --model llama-tiny --data text.txt --steps 1 --dp 2 --ep 2
expect_fail "--ep with --reshard-after-forward" "$PIPIT" "${A[@]}" --steps 1 --dp 2 --ep 2 --zero 3 --reshard-after-forward
expect_fail "--ep must be in 1..64" "$PIPIT" "${A[@]}" --steps 1 --ep 0
expect_fail "expert and tensor parallelism together are not built" "$PIPIT" "${A[@]}" --steps 1 --dp 2 --ep 2 --tp 2

[ "$failures" -eq 0 ] || exit 1
echo "ok: --ep 2 within 1e-6 of --ep 1 at --dp 2 and 4, bitwise across --pp 2 at 5 schedules, remat and bf16, --zero 1 and 3 = --zero 0, overlapped pairs = --no-a2a-overlap, saved at --ep 2 resumed at --ep 1, refusals"
