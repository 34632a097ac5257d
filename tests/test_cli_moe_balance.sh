#!/usr/bin/env bash
# test_cli_moe_balance.sh — `pipit train --balance-bias COEF`, the
# auxiliary-loss-free balance (DeepSeek-V3): each MoE layer's routing bias
# "model.layers.<l>.mlp.route_bias" moves after every step by COEF x
# sign(mean count - count), then loses its mean. Oracles computed here,
# independently of the code under test:
#   - 2 experts, top-1, COEF 100 (softmax scores lie in [0, 1]): while the
#     bias is nonzero every token goes to the favoured expert, so the counts
#     of those steps are known by hand; the bias follows the recurrence
#     from the reported counts, and the checkpoint's bias after 20 steps is
#     that recurrence's, bit for bit (float32);
#   - moe-tiny (8 experts, top-2) with a small COEF: the saved biases after
#     20 steps = the recurrence over the reported counts, bit for bit;
#   - --pp 2 (1f1b) = one rank: the same counts, losses and file;
#   - 12 steps + --resume to 20 = 20 steps, byte for byte (the bias is in
#     the file and --balance-bias in its metadata);
#   - refusals: a negative COEF, --balance-bias without --experts.
# Usage: test_cli_moe_balance.sh PIPIT SRCDIR
set -u

CLI_FIXED=1
source "$(dirname "$0")/cli_lib.sh"
cli_setup cli_moe_balance "${1:-}"

cli_words_text 11 3000

# recur.py FILE COEF TOKENS_X_K [force]: replays the bias from the step
# lines on stdin and compares it with FILE's route_bias tensors; force:
# checks the counts of steps with a nonzero bias (2 experts, top-1).
cat >recur.py <<'EOF2'
import json, struct, sys
path, coef, total = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
force = len(sys.argv) > 4
f32 = lambda x: struct.unpack("<f", struct.pack("<f", x))[0]
steps = [json.loads(l) for l in sys.stdin.read().splitlines() if l.startswith('{"step"')]
assert len(steps) == 20, len(steps)
L, E = len(steps[0]["moe_counts"]), len(steps[0]["moe_counts"][0])
bias = [[0.0] * E for _ in range(L)]
forced = 0
for s in steps:
    for l, c in enumerate(s["moe_counts"]):
        b = bias[l]
        assert sum(c) == total, (c, total)
        if force and b[0] != b[1]:  # every token to the expert the bias favours
            want = [total, 0] if b[0] > b[1] else [0, total]
            assert c == want, ("step", s["step"], "layer", l, c, want, b)
            forced += 1
        nb = [b[e] + coef * ((total > E * c[e]) - (total < E * c[e])) for e in range(E)]
        m = sum(nb) / E
        bias[l] = [f32(x - m) for x in nb]
if force:
    assert forced >= 10, forced
raw = open(path, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
for l in range(L):
    t = head["model.layers.%d.mlp.route_bias" % l]
    s, e = t["data_offsets"]
    got = list(struct.unpack("<%df" % E, raw[8 + n + s:8 + n + e]))
    assert got == bias[l], (l, got, bias[l])
assert head["__metadata__"]["balance_bias"] == repr(coef) or float(head["__metadata__"]["balance_bias"]) == coef
EOF2
recur() { $PY recur.py "$@" <<<"$OUT" || fail "balance bias ($*): $OUT"; }
lines() { grep '^{"step"' <<<"$OUT" | sed 's/"ms":[^,]*,"tokens_per_s":[^,]*,//; s/"gflops":[^,]*,//; s/"bubble":[^,]*,//'; }

two=(--model llama-tiny --layers 2 --experts 2 --top-k 1 --dropless --balance-bias 100 --data text.txt
     --micro-batch 2 --ctx 16 --microbatches 2 --json)
expect_ok "$PIPIT" train "${two[@]}" --steps 20 --save two.st
recur two.st 100 64 force

tiny=(--model moe-tiny --balance-bias 0.001 --data text.txt --micro-batch 2 --ctx 16 --microbatches 2 --json)
expect_ok "$PIPIT" train "${tiny[@]}" --steps 20 --save t20.st
recur t20.st 0.001 128
one=$(lines)
expect_ok "$PIPIT" train "${tiny[@]}" --steps 20 --save p20.st --pp 2 --schedule 1f1b
[ "$(lines | sed 's/"peak_bytes":[^,]*,//')" = "$(sed 's/"peak_bytes":[^,]*,//' <<<"$one")" ] ||
    fail "--pp 2: step lines differ from one rank"
cmp -s t20.st p20.st || fail "--pp 2: the checkpoint differs from one rank's"
expect_ok "$PIPIT" train "${tiny[@]}" --steps 12 --save r.st
expect_ok "$PIPIT" train --resume r.st --steps 20 --json
cmp -s r.st t20.st || fail "12 steps + resume to 20 differs from 20 steps"

expect_fail "--balance-bias must be a number >= 0" "$PIPIT" train --model moe-tiny --balance-bias -1 --data text.txt --steps 1
expect_fail "--balance-bias applies to mixture-of-experts models" "$PIPIT" train --model llama-tiny --balance-bias 0.1 \
    --data text.txt --steps 1

if [ "$failures" -ne 0 ]; then
    echo "test_cli_moe_balance: $failures failure(s)" >&2
    exit 1
fi
echo "test_cli_moe_balance: ok"
exit 0
