#!/usr/bin/env bash
# test_cli_presets.sh — driving pipit like nanoGPT: `pipit train --data FILE`
# alone works (the tiny preset), --model presets have GPT-2's parameter
# counts (--print-config: nothing is built; its output is a --config file),
# precedence defaults < preset <
# --config < flags, unknown config keys are errors naming them, --version,
# "did you mean" for commands, flags and schedules, --log-every, and the lr
# schedule flags: the lr in the step lines follows the formula, a constant
# schedule writes the same checkpoint as no schedule, byte for byte.
# Usage: test_cli_presets.sh PIPIT SRCDIR
set -u

CLI_FIXED=1 # expected words are fixed strings
source "$(dirname "$0")/cli_lib.sh"
cli_setup cli_presets "${1:-}"
# field NAME: the value of NAME in the JSON object $OUT (its last line)
field() { $PY -c 'import json,sys; print(json.loads(sys.stdin.read().splitlines()[-1])[sys.argv[1]])' "$1" <<<"$OUT"; }

$PY - <<'EOF'
import random
r = random.Random(3)
words = ["the ", "cat ", "sat ", "on ", "a ", "mat. ", "dog ", "ran ", "to ", "park, "]
open("text.txt", "w").write("".join(r.choice(words) for _ in range(3000)))
EOF

# ---- presets: GPT-2's parameter counts (tied head), without building anything
for pair in tiny:834304 gpt2:124439808 gpt2-medium:354823168 gpt2-large:774030080 gpt2-xl:1557611200; do
    m=${pair%%:*} want=${pair##*:}
    expect_ok "$PIPIT" plan --model "$m" --print-config || continue
    [ "$(field params)" = "$want" ] || fail "--model $m: $(field params) params, expected $want"
done
expect_ok "$PIPIT" train --model gpt2 --print-config
[ "$(field layers)/$(field heads)/$(field dim)/$(field ctx)/$(field vocab)" = "12/12/768/1024/50257" ] ||
    fail "--model gpt2 sizes: $OUT"
expect_ok "$PIPIT" train --model gpt2-xl --layers 2 --print-config # a flag overrides the preset's field
[ "$(field layers)/$(field heads)/$(field dim)" = "2/25/1600" ] || fail "--model gpt2-xl --layers 2: $OUT"
expect_fail "did you mean 'gpt2'" "$PIPIT" train --data text.txt --model gpt3

# ---- `pipit train --data FILE` just works: the tiny preset, 100 steps (shortened here)
expect_ok "$PIPIT" train --data text.txt --print-config
[ "$(field ctx)/$(field layers)/$(field heads)/$(field dim)/$(field micro-batch)/$(field steps)/$(field lr)" = \
    "64/4/4/128/8/100/0.001" ] || fail "defaults are not the tiny preset: $OUT"
expect_ok "$PIPIT" train --data text.txt --steps 2 --ctx 32 --micro-batch 2 --json
[ "$(grep -c '"step"' <<<"$OUT")" -eq 2 ] || fail "train --data with defaults: $OUT"

# ---- --config: precedence defaults < preset < config < flags; errors name the key
cat > c.json <<'EOF'
{"model": "gpt2", "layers": 3, "lr": 0.002, "lr-schedule": "cosine", "warmup": 2, "remat": true, "seed": 9}
EOF
expect_ok "$PIPIT" train --config c.json --print-config
[ "$(field model)/$(field layers)/$(field dim)/$(field lr)/$(field lr-schedule)/$(field warmup)" = \
    "gpt2/3/768/0.002/cosine/2" ] || fail "config over preset: $OUT"
expect_ok "$PIPIT" train --config c.json --layers 5 --lr 1e-4 --model gpt2-medium --print-config
[ "$(field model)/$(field layers)/$(field dim)/$(field lr)" = "gpt2-medium/5/1024/0.0001" ] ||
    fail "flags over config: $OUT"
# --print-config writes what --config reads: the same settings come back
for args in "--model gpt2" "--data text.txt --lr-schedule cosine --warmup 3 --steps 10 --pp 2 --schedule 1f1b --clip 1" \
            "--config c.json --virtual 2 --seed 12345 --weight-decay 0.1"; do
    # shellcheck disable=SC2086
    expect_ok "$PIPIT" train $args --print-config
    printf '%s\n' "$OUT" >printed.json
    expect_ok "$PIPIT" train --config printed.json --print-config
    [ "$OUT" = "$(cat printed.json)" ] || fail "--print-config of '$args' read back by --config: $OUT"$'\n'"$(cat printed.json)"
done
echo '{"layerz": 3}' > bad.json
expect_fail "unknown key \"layerz\"" "$PIPIT" train --data text.txt --config bad.json
expect_fail "did you mean 'layers'" "$PIPIT" train --data text.txt --config bad.json
echo '{"layers": "three"}' > badtype.json
expect_fail "\"layers\" must be an integer" "$PIPIT" train --data text.txt --config badtype.json
echo '{"layers": 3' > broken.json
expect_fail "malformed JSON" "$PIPIT" train --data text.txt --config broken.json
echo '[1, 2]' > array.json
expect_fail "expected a JSON object" "$PIPIT" train --data text.txt --config array.json
expect_fail "cannot open" "$PIPIT" train --data text.txt --config nope.json
printf '{"ctx": 16, "micro-batch": 2, "steps": 2, "json": true, "data": "text.txt"}' > run.json
expect_ok "$PIPIT" train --config run.json
[ "$(grep -c '"step"' <<<"$OUT")" -eq 2 ] || fail "a config that sets --data and --steps: $OUT"

# ---- --version, did you mean
expect_ok "$PIPIT" --version
grep -Eq '^pipit [0-9]+\.[0-9]+\.[0-9]+ \((MPI built in|no MPI), (CUDA built in|no CUDA)\)$' <<<"$OUT" || fail "--version: $OUT"
V1=$OUT
expect_ok "$PIPIT" version
[ "$OUT" = "$V1" ] || fail "pipit version differs from --version: $OUT"
expect_fail "did you mean 'train'" "$PIPIT" traim
expect_fail "did you mean '--lr'" "$PIPIT" train --data text.txt --lrr 1
expect_fail "did you mean '1f1b'" "$PIPIT" train --data text.txt --steps 1 --pp 2 --schedule 1fb1
expect_fail "did you mean '1f1b'" "$PIPIT" schedule --schedule 1fb1 --pp 2 --microbatches 2
expect_fail "did you mean 'cosine'" "$PIPIT" train --data text.txt --steps 1 --lr-schedule cosin

# ---- --log-every: steps 0, K, 2K, ... and the last
SMALL=(--data text.txt --ctx 16 --layers 1 --heads 2 --dim 32 --micro-batch 2)
expect_ok "$PIPIT" train "${SMALL[@]}" --steps 7 --log-every 3 --json
STEPS=$($PY -c 'import json,sys; print([json.loads(l)["step"] for l in sys.stdin])' <<<"$OUT")
[ "$STEPS" = "[0, 3, 6]" ] || fail "--log-every 3 of 7 steps printed $STEPS"
expect_ok "$PIPIT" train "${SMALL[@]}" --steps 5 --log-every 3 --json
STEPS=$($PY -c 'import json,sys; print([json.loads(l)["step"] for l in sys.stdin])' <<<"$OUT")
[ "$STEPS" = "[0, 3, 4]" ] || fail "--log-every 3 of 5 steps printed $STEPS (the last always)"
expect_fail "--log-every must be >= 1" "$PIPIT" train "${SMALL[@]}" --steps 1 --log-every 0

# ---- the lr schedule through the CLI: nanoGPT's formula in the "lr" field
for kind in cosine linear; do
    expect_ok "$PIPIT" train "${SMALL[@]}" --steps 12 --lr 1e-3 --lr-schedule $kind --warmup 3 --min-lr 1e-4 \
        --decay-steps 10 --json || continue
    $PY - "$kind" "$OUT" <<'EOF' || fail "--lr-schedule $kind: lr does not follow the formula: $OUT"
import json, math, sys
kind, rows = sys.argv[1], [json.loads(l) for l in sys.argv[2].splitlines()]
lr, mn, K, N = 1e-3, 1e-4, 3, 10
assert len(rows) == 12, rows
for r in rows:
    it = r["step"]  # 0-based step = nanoGPT's it
    if it < K: want = lr * (it + 1) / K
    elif it > N: want = mn
    else:
        x = (it - K) / (N - K)
        c = 0.5 * (1 + math.cos(math.pi * x)) if kind == "cosine" else 1 - x
        want = mn + c * (lr - mn)
    assert abs(r["lr"] - want) <= 1e-9 * lr, (r, want)
EOF
done
expect_ok "$PIPIT" train "${SMALL[@]}" --steps 2 --lr 5e-4
grep -q "lr 5.0000e-04" <<<"$OUT" || fail "the text step line lacks the lr: $OUT"
expect_fail "--decay-steps and --min-lr apply to --lr-schedule cosine or linear" "$PIPIT" train "${SMALL[@]}" --steps 2 --min-lr 1e-5
expect_fail "--decay-steps 3 must be greater than --warmup 3" "$PIPIT" train "${SMALL[@]}" --steps 5 --lr-schedule cosine --warmup 3 --decay-steps 3
expect_fail "--warmup must be >= 0" "$PIPIT" train "${SMALL[@]}" --steps 5 --warmup -1
expect_fail "lower --warmup or pass --decay-steps" "$PIPIT" train "${SMALL[@]}" --steps 3 --lr-schedule cosine --warmup 3

# a constant schedule (explicit or not) writes the bits of a run without one
expect_ok "$PIPIT" train "${SMALL[@]}" --steps 3 --lr 1e-3 --save plain.st
expect_ok "$PIPIT" train "${SMALL[@]}" --steps 3 --lr 1e-3 --lr-schedule constant --save const.st
cmp -s plain.st const.st || fail "--lr-schedule constant changed the checkpoint"
expect_ok "$PIPIT" train "${SMALL[@]}" --steps 3 --lr 1e-3 --lr-schedule cosine --save cos.st
cmp -s plain.st cos.st && fail "--lr-schedule cosine wrote the constant run's checkpoint"

if [ "$failures" -ne 0 ]; then
    echo "test_cli_presets: $failures failure(s)" >&2
    exit 1
fi
echo "test_cli_presets: ok"
exit 0
