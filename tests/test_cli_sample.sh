#!/usr/bin/env bash
# test_cli_sample.sh — `pipit sample`: deterministic for a seed, different
# for another seed, temperature 0 (argmax) independent of the seed,
# --tokens N prints N bytes for a byte-level model (token ids otherwise),
# and bad input (no --init, bad --top-k / --temperature, a prompt byte
# outside the vocabulary, an empty prompt) exits non-zero with a message.
# Usage: test_cli_sample.sh PIPIT SRCDIR
set -u

source "$(dirname "$0")/cli_lib.sh"
cli_setup cli_sample "${1:-}"

$PY - <<'EOF' || { echo "cannot write test data"; exit 1; }
import random
r = random.Random(7)
words = ["the ", "cat ", "sat ", "on ", "a ", "mat. ", "dog ", "ran "]
open("text.txt", "w").write("".join(r.choice(words) for _ in range(2000)))
EOF

MODEL=(--ctx 16 --layers 1 --heads 2 --dim 32 --micro-batch 4 --lr 3e-3)
"$PIPIT" train --data text.txt "${MODEL[@]}" --steps 30 --save m.st >/dev/null 2>&1 || fail "train (byte-level) failed"
"$PIPIT" train --data text.txt "${MODEL[@]}" --vocab 128 --steps 2 --save v128.st >/dev/null 2>&1 ||
    fail "train (vocab 128) failed"
"$PIPIT" train --data text.txt "${MODEL[@]}" --vocab 300 --steps 2 --save v300.st >/dev/null 2>&1 ||
    fail "train (vocab 300) failed"

S=("$PIPIT" sample --init m.st --prompt "the cat " --tokens 24)
a=$("${S[@]}" --seed 1 | od -An -tx1) || fail "sample --seed 1 failed"
b=$("${S[@]}" --seed 1 | od -An -tx1)
c=$("${S[@]}" --seed 2 | od -An -tx1)
[ -n "$a" ] && [ "$a" = "$b" ] || fail "same seed, different output: '$a' vs '$b'"
[ "$a" != "$c" ] || fail "seeds 1 and 2 gave the same 24 bytes: $a"
n=$("${S[@]}" --seed 3 --top-k 5 --temperature 0.7 | wc -c)
[ "$n" -eq 24 ] || fail "--tokens 24 printed $n bytes"
n=$("$PIPIT" sample --init m.st --prompt "the" --tokens 0 | wc -c)
[ "$n" -eq 0 ] || fail "--tokens 0 printed $n bytes"
g1=$("${S[@]}" --temperature 0 --seed 1 | od -An -tx1)
g2=$("${S[@]}" --temperature 0 --seed 99 | od -An -tx1)
[ -n "$g1" ] && [ "$g1" = "$g2" ] || fail "temperature 0 depends on the seed: '$g1' vs '$g2'"
k1=$("${S[@]}" --top-k 1 --seed 5 | od -An -tx1)
[ "$k1" = "$g1" ] || fail "--top-k 1 differs from argmax: '$k1' vs '$g1'"
# a prompt longer than the window slides (its last T tokens)
n=$("$PIPIT" sample --init m.st --prompt "the cat sat on the mat. the dog ran" --tokens 5 --seed 1 | wc -c)
[ "$n" -eq 5 ] || fail "long prompt: printed $n bytes"
n=$("$PIPIT" sample --init m.st --prompt "the" --ctx 4 --tokens 10 --seed 1 | wc -c)
[ "$n" -eq 10 ] || fail "--ctx 4: printed $n bytes"
# larger vocabularies print token ids
ids=$("$PIPIT" sample --init v300.st --prompt-ids 116,104,101 --tokens 4 --seed 1) || fail "sample --prompt-ids failed"
[[ "$ids" =~ ^[0-9]+\ [0-9]+\ [0-9]+\ [0-9]+$ ]] || fail "vocab 300: expected 4 token ids, got '$ids'"

expect_fail "--init is required" "$PIPIT" sample --prompt "the" --tokens 3
expect_fail "--top-k must be in 0..256" "$PIPIT" sample --init m.st --prompt "the" --top-k -1
expect_fail "--top-k must be in 0..256" "$PIPIT" sample --init m.st --prompt "the" --top-k 257
expect_fail "--temperature must be" "$PIPIT" sample --init m.st --prompt "the" --temperature -1
expect_fail "--tokens must be" "$PIPIT" sample --init m.st --prompt "the" --tokens -2
expect_fail "outside the model's vocabulary of 128" "$PIPIT" sample --init v128.st --prompt $'the \xc8' --tokens 3
expect_fail "prompt is empty" "$PIPIT" sample --init m.st --prompt "" --tokens 3
expect_fail "--prompt" "$PIPIT" sample --init m.st --tokens 3
expect_fail "--ctx must be in 1..16" "$PIPIT" sample --init m.st --prompt "the" --ctx 17
expect_fail "not a list of token ids" "$PIPIT" sample --init v300.st --prompt-ids 1,x
expect_fail "cannot open" "$PIPIT" sample --init nope.st --prompt "the"

if [ "$failures" -ne 0 ]; then
    echo "$failures failure(s)"
    exit 1
fi
echo "ok"
