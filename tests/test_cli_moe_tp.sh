#!/usr/bin/env bash
# test_cli_moe_tp.sh — mixture of experts with tensor parallelism from the
# command line (each expert's hidden width over the --tp ranks, the router
# replicated): moe-tiny at --tp 2 and --tp 2 --sp against --tp 1 (the
# losses within 1e-5 relative: the sums over the ranks round apart), the
# sigmoid router dropless with a shared expert and the balance bias too,
# a checkpoint saved at --tp 2 resumed at --tp 1 to the losses of the
# uninterrupted --tp 2 run, and --ep with --tp refused by message.
# Usage: test_cli_moe_tp.sh PIPIT SRCDIR
set -u

CLI_FIXED=1
source "$(dirname "$0")/cli_lib.sh"
cli_setup cli_moe_tp "${1:-}"
# loss of step N in $OUT (--json lines)
loss_at() { $PY -c '
import json,sys
for l in sys.stdin.read().splitlines():
    try: o = json.loads(l)
    except ValueError: continue
    if o.get("step") == int(sys.argv[1]): print(repr(o["loss"]))' "$1" <<<"$OUT"; }
# close A B WHAT: |A - B| <= 1e-5 |B|
close() { $PY -c "import sys; a, b = float('$1'), float('$2'); sys.exit(0 if abs(a - b) <= 1e-5 * abs(b) else 1)" 2>/dev/null ||
    fail "$3: loss $1, expected $2 (within 1e-5 relative)"; }

cli_words_text 3 3000

m=(--model moe-tiny --data text.txt --micro-batch 2 --ctx 16 --microbatches 2 --json)
s=(--model llama-tiny --layers 2 --experts 4 --top-k 2 --dropless --shared-experts 1 --router sigmoid
   --aux-loss 0.01 --balance-bias 0.001 --data text.txt --micro-batch 2 --ctx 16 --microbatches 2 --json)
for name in m s; do
    declare -n a=$name
    expect_ok "$PIPIT" train "${a[@]}" --steps 3
    one=$(loss_at 2)
    [ -n "$one" ] || fail "$name: no loss at step 2: $OUT"
    expect_ok "$PIPIT" train "${a[@]}" --steps 3 --tp 2
    close "$(loss_at 2)" "$one" "$name --tp 2"
    expect_ok "$PIPIT" train "${a[@]}" --steps 3 --tp 2 --sp
    close "$(loss_at 2)" "$one" "$name --tp 2 --sp"
    unset -n a
done
expect_ok "$PIPIT" train "${m[@]}" --steps 3 --tp 2 --pp 2 --schedule 1f1b
p1f1b=$(loss_at 2)
expect_ok "$PIPIT" train "${m[@]}" --steps 3 --tp 2 --pp 2 --schedule gpipe
[ "$(loss_at 2)" = "$p1f1b" ] || fail "--tp 2 --pp 2: gpipe loss $(loss_at 2), 1f1b $p1f1b (bitwise)"

# ---- a checkpoint saved at --tp 2 resumes at --tp 1 (the layout is free)
expect_ok "$PIPIT" train "${m[@]}" --steps 5 --tp 2
want=$(loss_at 4)
expect_ok "$PIPIT" train "${m[@]}" --steps 3 --tp 2 --save t2.st
expect_ok "$PIPIT" train --resume t2.st --steps 5 --json
close "$(loss_at 4)" "$want" "saved at --tp 2, resumed at --tp 1"

expect_fail "--ep with --tp 2: expert and tensor parallelism together are not built" \
    "$PIPIT" train "${m[@]}" --steps 1 --dp 2 --ep 2 --tp 2

if [ "$failures" -ne 0 ]; then
    echo "test_cli_moe_tp: $failures failure(s)" >&2
    exit 1
fi
echo "test_cli_moe_tp: ok"
exit 0
