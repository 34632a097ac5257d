#!/usr/bin/env bash
# test_cli_moe.sh — mixture of experts from the command line: the moe-tiny
# preset's parameter count against a count written out here, its loss
# falling over a short run, the MoE flags on a Llama (--experts --top-k
# --capacity-factor --dropless --shared-experts --moe-every --router
# --aux-loss) running and pipelined (--pp 2, 1f1b) to the one-rank losses,
# and the refusals by message (top-k > experts, capacity factor <= 0,
# experts <= 0, MoE flags without experts or on GPT-2, a bad router), and
# MoE checkpoints read back: resume bit for bit, eval, sample, --init.
# Usage: test_cli_moe.sh PIPIT SRCDIR
set -u

CLI_FIXED=1
source "$(dirname "$0")/cli_lib.sh"
cli_setup cli_moe "${1:-}"
field() { $PY -c 'import json,sys; print(json.loads(sys.stdin.read().splitlines()[-1])[sys.argv[1]])' "$1" <<<"$OUT"; }
# loss of step N in $OUT (--json lines)
loss_at() { $PY -c '
import json,sys
for l in sys.stdin.read().splitlines():
    try: o = json.loads(l)
    except ValueError: continue
    if o.get("step") == int(sys.argv[1]): print(repr(o["loss"]))' "$1" <<<"$OUT"; }

cli_words_text 3 3000

# ---- moe-tiny: V 256, C 64, L 4, KV 2 of 4 heads, 8 experts of F 144, untied
want=$($PY -c '
V, C, L, H, KV, F, E = 256, 64, 4, 4, 2, 144, 8
D = C // H
attn = 2 * C * C + 2 * C * KV * D
moe = E * C + E * 3 * C * F
print(2 * V * C + L * (attn + moe + 2 * C) + C)')
expect_ok "$PIPIT" plan --model moe-tiny --print-config
[ "$(field params)" = "$want" ] || fail "moe-tiny: $(field params) params, expected $want"
[ "$(field experts)/$(field top-k)" = "8/2" ] || fail "moe-tiny: experts/top-k $(field experts)/$(field top-k)"
# moe-100m: V 50257, C 512, L 8, KV 2 of 8 heads, 8 experts of F 768, top-2, tied; its
# active parameters (embedding, attention, norms, router, 2 of 8 experts) are
# llama-50m's (the same Llama with one MLP of F 1536) plus the routers' E x C
read -r want active <<<"$($PY -c '
V, C, L, H, KV, F, E, K = 50257, 512, 8, 8, 2, 768, 8, 2
D = C // H
attn = 2 * C * C + 2 * C * KV * D
print(V * C + L * (attn + E * C + E * 3 * C * F + 2 * C) + C, V * C + L * (attn + E * C + K * 3 * C * F + 2 * C) + C)')"
expect_ok "$PIPIT" plan --model moe-100m --print-config
[ "$(field params)" = "$want" ] || fail "moe-100m: $(field params) params, expected $want"
[ "$(field experts)/$(field top-k)/$(field ffn-hidden)/$(field tied)" = "8/2/768/True" ] || fail "moe-100m: $OUT"
expect_ok "$PIPIT" plan --model llama-50m --print-config
[ "$(field params)" = "$((active - 8 * 8 * 512))" ] || fail "llama-50m: $(field params) params, moe-100m's active $active less its routers"
[ "$(field ffn-hidden)/$(field kv-heads)" = "1536/2" ] || fail "llama-50m: $OUT"

# ---- it learns: 30 steps of moe-tiny
expect_ok "$PIPIT" train --model moe-tiny --data text.txt --steps 30 --micro-batch 4 --ctx 32 --json
first=$(loss_at 0) last=$(loss_at 29)
$PY -c "import sys; sys.exit(0 if $last < $first - 1.0 else 1)" || fail "moe-tiny loss $first -> $last over 30 steps"

# ---- every flag on a Llama, then the same run pipelined: the same losses
args=(--model llama-tiny --layers 4 --experts 4 --top-k 1 --capacity-factor 1.5 --shared-experts 1 --moe-every 2
      --router sigmoid --aux-loss 0.01 --data text.txt --steps 3 --micro-batch 2 --ctx 32 --microbatches 2 --json)
expect_ok "$PIPIT" train "${args[@]}"
one=$(loss_at 2)
[ -n "$one" ] || fail "no loss at step 2: $OUT"
expect_ok "$PIPIT" train "${args[@]}" --pp 2 --schedule 1f1b
[ "$(loss_at 2)" = "$one" ] || fail "--pp 2 loss $(loss_at 2), one rank $one"
expect_ok "$PIPIT" train --model moe-tiny --dropless --data text.txt --steps 1 --micro-batch 2 --ctx 16

# ---- refusals
expect_fail "--top-k 9 must be in 1..--experts (8)" "$PIPIT" train --model moe-tiny --top-k 9 --data text.txt
expect_fail "--capacity-factor must be a number > 0" "$PIPIT" train --model moe-tiny --capacity-factor 0 --data text.txt
expect_fail "--capacity-factor must be a number > 0" "$PIPIT" train --model moe-tiny --capacity-factor -1 --data text.txt
expect_fail "--experts must be a positive integer" "$PIPIT" train --model llama-tiny --experts 0 --data text.txt
expect_fail "--experts must be a positive integer" "$PIPIT" train --model moe-tiny --experts -3 --data text.txt
expect_fail "--top-k applies to mixture-of-experts models" "$PIPIT" train --model llama-tiny --top-k 2 --data text.txt
expect_fail "--experts applies to Llama models" "$PIPIT" train --model tiny --experts 4 --data text.txt
expect_fail "bad value 'topk' for --router" "$PIPIT" train --model moe-tiny --router topk --data text.txt
expect_fail "--aux-loss must be a number >= 0" "$PIPIT" train --model moe-tiny --aux-loss -1 --data text.txt

# ---- checkpoints round-trip (the MoE fields in the metadata): 4 steps
# saved, resumed to 6 = 6 uninterrupted steps, byte for byte; moe-tiny and
# every flag (sigmoid router, shared expert, every 2nd layer, aux loss)
m=(--model moe-tiny --data text.txt --micro-batch 2 --ctx 16)
expect_ok "$PIPIT" train "${m[@]}" --steps 6 --save m6.st
expect_ok "$PIPIT" train "${m[@]}" --steps 4 --save m.st
expect_ok "$PIPIT" train --resume m.st --steps 6
cmp -s m.st m6.st || fail "moe-tiny: 4 steps + resume to 6 differs from 6 steps"
f=(--model llama-tiny --layers 4 --experts 4 --top-k 1 --capacity-factor 1.5 --shared-experts 1 --moe-every 2
   --router sigmoid --aux-loss 0.01 --data text.txt --micro-batch 2 --ctx 16)
expect_ok "$PIPIT" train "${f[@]}" --steps 3 --save f3.st
expect_ok "$PIPIT" train "${f[@]}" --steps 2 --save f.st
expect_ok "$PIPIT" train --resume f.st --steps 3
cmp -s f.st f3.st || fail "MoE flags: 2 steps + resume to 3 differs from 3 steps"
expect_fail "--router softmax contradicts checkpoint" "$PIPIT" train --resume f.st --steps 4 --router softmax
# eval of the checkpoint = the loss of a training step from it (--init, lr 0, the same first batch)
expect_ok "$PIPIT" eval --init m6.st --data text.txt --ctx 16 --micro-batch 2 --batches 1 --json
ev=$(field loss)
expect_ok "$PIPIT" train --init m6.st --data text.txt --ctx 16 --micro-batch 2 --steps 1 --lr 0 --data-order sequential --json
[ "$(loss_at 0)" = "$ev" ] || fail "eval of the MoE checkpoint $ev, a training step from it $(loss_at 0)"
"$PIPIT" sample --init m6.st --prompt "the " --tokens 8 --seed 4 --no-echo > /dev/null || fail "sample of the MoE checkpoint"
expect_fail "--experts 4 disagrees with checkpoint" "$PIPIT" train --init m6.st --experts 4 --data text.txt --steps 1

if [ "$failures" -ne 0 ]; then
    echo "test_cli_moe: $failures failure(s)" >&2
    exit 1
fi
echo "test_cli_moe: ok"
exit 0
