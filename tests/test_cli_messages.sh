#!/usr/bin/env bash
# test_cli_messages.sh — what the CLI says about a bad value is the reason:
#   - --kv-heads -1 is not a positive integer (not "heads 4 is not a
#     multiple of kv_heads -1");
#   - --rope-theta 1e-308 is a number (a subnormal double) outside the
#     range --rope-theta takes, and the message says the range; a number no
#     double holds (1e-400, 1e999) is named as such, not "expected a number";
#   - an unknown flag or --config key that is another trainer's name for a
#     pipit flag (--batch-size, n_layer, --max-steps) gets a did-you-mean;
#   - `pipit --help` does not say pipit trains only GPT-2;
#   - `pipit schedule`'s peak live line is a count of activations, without
#     "bytes" that would only repeat the count under unit costs.
# Usage: test_cli_messages.sh PIPIT SRCDIR
set -u

source "$(dirname "$0")/cli_lib.sh"
cli_setup cli_messages "${1:-}"
CLI_FIXED=1

$PY -c 'open("text.txt", "w").write("the cat sat on the mat. " * 100)' || { echo "cannot write test data"; exit 1; }
L=(train --data text.txt --model llama-tiny --steps 1)

# ---- numbers out of their flag's range: the range, not another reason
expect_fail "--kv-heads must be a positive integer" "$PIPIT" "${L[@]}" --kv-heads -1
expect_fail "--kv-heads must be a positive integer" "$PIPIT" "${L[@]}" --kv-heads 0
out=$("$PIPIT" "${L[@]}" --kv-heads -1 2>&1)
grep -q "multiple" <<<"$out" && fail "--kv-heads -1 still gets a divisibility reason: $out"
expect_fail "--kv-heads must be a positive integer" "$PIPIT" "${L[@]}" --config <(echo '{"kv-heads": -2}')
expect_fail "--rope-theta must be a number >= 1" "$PIPIT" "${L[@]}" --rope-theta 1e-308
expect_fail "--rope-theta must be a number >= 1" "$PIPIT" "${L[@]}" --rope-theta 0
out=$("$PIPIT" "${L[@]}" --rope-theta 1e-308 2>&1)
grep -q "expected a number" <<<"$out" && fail "1e-308 is a number: $out"
expect_fail "--norm-eps must be a number > 0" "$PIPIT" "${L[@]}" --norm-eps -1
expect_fail "--multiple-of must be a positive integer" "$PIPIT" "${L[@]}" --ffn-hidden 0 --multiple-of 0
expect_fail "--ffn-hidden must be a positive integer, or 0" "$PIPIT" "${L[@]}" --ffn-hidden -3
# the values the checks let through still train (the boundary of each range)
expect_ok "$PIPIT" "${L[@]}" --kv-heads 1 --rope-theta 1 --ctx 16 --micro-batch 2
expect_fail "bad value '1e-400' for --rope-theta: too close to 0 for a double" "$PIPIT" "${L[@]}" --rope-theta 1e-400
expect_fail "bad value '1e999' for --lr: out of range for a double" "$PIPIT" train --data text.txt --lr 1e999
expect_fail "bad value 'abc' for --lr: expected a number" "$PIPIT" train --data text.txt --lr abc
expect_fail "bad value 'inf' for --lr: expected a number" "$PIPIT" train --data text.txt --lr inf

# ---- other trainers' names for pipit's flags
expect_fail "unknown flag '--batch-size' (see pipit train --help); did you mean '--micro-batch'?" \
    "$PIPIT" train --data text.txt --batch-size 4
expect_fail "did you mean '--micro-batch'?" "$PIPIT" train --data text.txt --batch_size=4
expect_fail "did you mean '--layers'?" "$PIPIT" train --data text.txt --n_layer 2
expect_fail "did you mean '--steps'?" "$PIPIT" train --data text.txt --max-steps 2
expect_fail "did you mean '--lr'?" "$PIPIT" train --data text.txt --learning-rate 1e-3
expect_fail "did you mean '--warmup'?" "$PIPIT" train --data text.txt --warmup-steps 5
expect_fail "did you mean '--microbatches'?" "$PIPIT" train --data text.txt --gradient-accumulation-steps 4
expect_fail "did you mean '--micro-batch'?" "$PIPIT" eval --init x.st --batch-size 4
echo '{"batch_size": 4}' >c.json
expect_fail "unknown key \"batch_size\" for pipit train; did you mean 'micro-batch'?" \
    "$PIPIT" train --data text.txt --config c.json
# a word two candidates share equally is no suggestion (llama-tiny or
# llama-100m?); a typo still is one
out=$("$PIPIT" train --data text.txt --model llama 2>&1)
grep -q "did you mean" <<<"$out" && fail "--model llama: llama-tiny and llama-100m are as close: $out"
expect_fail "did you mean '--heads'?" "$PIPIT" train --data text.txt --haeds 2
expect_fail "did you mean 'interleaved-1f1b'?" "$PIPIT" schedule --schedule 1f1b-interleaved --pp 2 --microbatches 4

# ---- the help says what pipit trains
expect_ok "$PIPIT" --help
grep -q "train GPT-2 on" <<<"$OUT" && fail "pipit --help says it trains GPT-2 only: $OUT"
grep -q "^  train .*Llama" <<<"$OUT" || fail "pipit --help: the train line names no Llama: $OUT"

# ---- schedule's peak: a count of activations, no "bytes" repeating it
expect_ok "$PIPIT" schedule --schedule gpipe --pp 2 --microbatches 3
grep -q "^rank 0: busy 9, bubble 25.0%, peak live 3 (stage, microbatch) activations$" <<<"$OUT" ||
    fail "GPipe P=2 M=3 rank 0 holds 3 activations at its peak: $OUT"
grep -q "bytes" <<<"$OUT" && fail "unit costs print bytes: $OUT"

if [ "$failures" -ne 0 ]; then
    echo "test_cli_messages: $failures failure(s)" >&2
    exit 1
fi
echo "test_cli_messages: ok"
