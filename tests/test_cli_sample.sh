#!/usr/bin/env bash
# test_cli_sample.sh — `pipit sample`: deterministic for a seed, different
# for another seed, temperature 0 (argmax) independent of the seed,
# --tokens N prints the prompt then N bytes for a byte-level model (token
# ids otherwise; --no-echo: the N alone), and bad input (no --init, bad
# --top-k / --top-p / --temperature, a prompt byte outside the vocabulary,
# an empty prompt) exits non-zero with a message. The KV cache gives the
# tokens of --no-kv-cache (the window run again for every token) for GPT-2
# and for Llama with grouped-query attention, greedy and sampled, across
# the end of the window; --top-p keeps the most likely tokens (a tiny P is
# argmax); with --tokenizer the prompt's tokens condition the model (the
# output of --prompt is that of --prompt-ids of its encoding, not of its
# bytes); a tokenizer with gaps in its ids never has a gap drawn and a
# prompt id without a text is refused before anything is printed.
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

S=("$PIPIT" sample --init m.st --prompt "the cat " --tokens 24 --no-echo)
a=$("${S[@]}" --seed 1 | od -An -tx1) || fail "sample --seed 1 failed"
b=$("${S[@]}" --seed 1 | od -An -tx1)
c=$("${S[@]}" --seed 2 | od -An -tx1)
[ -n "$a" ] && [ "$a" = "$b" ] || fail "same seed, different output: '$a' vs '$b'"
[ "$a" != "$c" ] || fail "seeds 1 and 2 gave the same 24 bytes: $a"
n=$("${S[@]}" --seed 3 --top-k 5 --temperature 0.7 | wc -c)
[ "$n" -eq 24 ] || fail "--tokens 24 printed $n bytes"
n=$("$PIPIT" sample --init m.st --prompt "the" --tokens 0 --no-echo | wc -c)
[ "$n" -eq 0 ] || fail "--tokens 0 --no-echo printed $n bytes"
# the prompt first, then the same 24 bytes
e=$("$PIPIT" sample --init m.st --prompt "the cat " --tokens 24 --seed 1 | od -An -v -tx1 | tr -d ' \n')
want=$( (printf 'the cat '; "${S[@]}" --seed 1) | od -An -v -tx1 | tr -d ' \n')
[ -n "$e" ] && [ "$e" = "$want" ] || fail "echo: '$e' is not the prompt then the 24 bytes ('$want')"
n=$("$PIPIT" sample --init m.st --prompt "the" --tokens 0 | wc -c)
[ "$n" -eq 3 ] || fail "--tokens 0 printed $n bytes, not the prompt's 3"
g1=$("${S[@]}" --temperature 0 --seed 1 | od -An -tx1)
g2=$("${S[@]}" --temperature 0 --seed 99 | od -An -tx1)
[ -n "$g1" ] && [ "$g1" = "$g2" ] || fail "temperature 0 depends on the seed: '$g1' vs '$g2'"
k1=$("${S[@]}" --top-k 1 --seed 5 | od -An -tx1)
[ "$k1" = "$g1" ] || fail "--top-k 1 differs from argmax: '$k1' vs '$g1'"
# a prompt longer than the window slides (its last T tokens)
n=$("$PIPIT" sample --init m.st --prompt "the cat sat on the mat. the dog ran" --tokens 5 --seed 1 --no-echo | wc -c)
[ "$n" -eq 5 ] || fail "long prompt: printed $n bytes"
n=$("$PIPIT" sample --init m.st --prompt "the" --ctx 4 --tokens 10 --seed 1 --no-echo | wc -c)
[ "$n" -eq 10 ] || fail "--ctx 4: printed $n bytes"
# larger vocabularies print token ids, the prompt's first
ids=$("$PIPIT" sample --init v300.st --prompt-ids 116,104,101 --tokens 4 --seed 1) || fail "sample --prompt-ids failed"
[[ "$ids" =~ ^116\ 104\ 101\ [0-9]+\ [0-9]+\ [0-9]+\ [0-9]+$ ]] || fail "vocab 300: expected 3 + 4 token ids, got '$ids'"
new=$("$PIPIT" sample --init v300.st --prompt-ids 116,104,101 --tokens 4 --seed 1 --no-echo)
[ "$new" = "${ids#116 104 101 }" ] || fail "vocab 300 --no-echo: '$new', not the last 4 of '$ids'"

# ---- the KV cache gives the tokens of the window run again for every token
# (a prompt of 8 and 30 tokens pass the window of 16: the cache, then the window)
"$PIPIT" train --data text.txt --model llama-tiny --ctx 16 --layers 2 --heads 4 --kv-heads 2 --dim 32 \
    --micro-batch 4 --lr 3e-3 --steps 30 --save llama.st >/dev/null 2>&1 || fail "train (llama, GQA) failed"
for m in m.st llama.st; do
    for how in "--seed 1" "--seed 2 --temperature 0.7 --top-k 5 --top-p 0.9" "--temperature 0"; do
        a=$("$PIPIT" sample --init $m --prompt "the cat " --tokens 30 $how | od -An -tx1)
        b=$("$PIPIT" sample --init $m --prompt "the cat " --tokens 30 $how --no-kv-cache | od -An -tx1)
        [ -n "$a" ] && [ "$a" = "$b" ] || fail "$m $how: the KV cache gives '$a', --no-kv-cache '$b'"
    done
done
# a prompt longer than the window (--ctx 4): the window alone
a=$("$PIPIT" sample --init llama.st --prompt "the cat sat on" --ctx 4 --tokens 6 --seed 3 | od -An -tx1)
b=$("$PIPIT" sample --init llama.st --prompt "the cat sat on" --ctx 4 --tokens 6 --seed 3 --no-kv-cache | od -An -tx1)
[ -n "$a" ] && [ "$a" = "$b" ] || fail "--ctx 4: the KV cache gives '$a', --no-kv-cache '$b'"

# ---- --top-p: a tiny P keeps the most likely token alone (argmax); a seed reproduces a draw
p=$("${S[@]}" --top-p 1e-9 --seed 7 | od -An -tx1)
[ "$p" = "$g1" ] || fail "--top-p 1e-9 differs from argmax: '$p' vs '$g1'"
p1=$("${S[@]}" --top-p 0.8 --seed 7 | od -An -tx1)
p2=$("${S[@]}" --top-p 0.8 --seed 7 | od -An -tx1)
[ -n "$p1" ] && [ "$p1" = "$p2" ] || fail "--top-p 0.8: the same seed, different output: '$p1' vs '$p2'"
p3=$("${S[@]}" --top-p 1 --seed 7 | od -An -tx1)
p4=$("${S[@]}" --seed 7 | od -An -tx1)
[ "$p3" = "$p4" ] || fail "--top-p 1 is not the default: '$p3' vs '$p4'"

# ---- --tokenizer: the prompt's tokens condition the model, not its bytes
"$PIPIT" tokenize --train 300 --data text.txt --out tm >/dev/null 2>&1 || fail "tokenize failed"
"$PIPIT" train --data 'tm/train_*.bin' --vocab 300 --ctx 16 --layers 1 --heads 2 --dim 32 --micro-batch 4 \
    --steps 30 --lr 3e-3 --save tm.st >/dev/null 2>&1 || fail "train (tokenized) failed"
printf 'the cat ' >p.txt
"$PIPIT" tokenize --tokenizer tm --data p.txt --out pe >/dev/null 2>&1 || fail "tokenize p.txt failed"
enc=$($PY -c '
import struct
raw = open("pe/train_000000.bin", "rb").read()
n = struct.unpack("<3i", raw[:12])[2]
print(",".join(map(str, struct.unpack(f"<{n}H", raw[1024:1024 + 2 * n]))))')
bytes=116,104,101,32,99,97,116,32
[ -n "$enc" ] && [ "$enc" != "$bytes" ] || fail "the tokenizer merged nothing in 'the cat ': '$enc'"
T=("$PIPIT" sample --init tm.st --tokenizer tm --tokens 24 --seed 3 --no-echo)
a=$("${T[@]}" --prompt "the cat " | od -An -tx1)
b=$("${T[@]}" --prompt-ids "$enc" | od -An -tx1)
c=$("${T[@]}" --prompt-ids "$bytes" | od -An -tx1)
[ -n "$a" ] && [ "$a" = "$b" ] || fail "--prompt 'the cat ' ('$a') is not --prompt-ids $enc, its tokens ('$b')"
[ "$a" != "$c" ] || fail "--prompt 'the cat ' gives the output of its bytes as ids ($bytes: '$c')"
e=$("$PIPIT" sample --init tm.st --tokenizer tm --tokens 0 --prompt "the cat ")
[ "$e" = "the cat " ] || fail "--tokenizer: the echo is '$e'"

# ---- a tokenizer with gaps (ids 256..399 have no token): never drawn; a
# prompt id without a text is refused before anything is printed
$PY - <<'EOF' || fail "cannot write gaps.json"
import json
bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
cs, k = bs[:], 0
for b in range(256):
    if b not in bs:
        bs.append(b); cs.append(256 + k); k += 1
ch = {b: chr(c) for b, c in zip(bs, cs)}
vocab = {ch[b]: b for b in range(256)}
vocab["th"] = 400
json.dump({"version": "1.0", "added_tokens": [], "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
           "decoder": {"type": "ByteLevel"}, "model": {"type": "BPE", "vocab": vocab, "merges": ["t h"]}},
          open("gaps.json", "w"))
EOF
"$PIPIT" train --data text.txt "${MODEL[@]}" --vocab 512 --steps 2 --save v512.st >/dev/null 2>&1 ||
    fail "train (vocab 512) failed"
"$PIPIT" sample --init v512.st --tokenizer gaps.json --prompt "the cat" --tokens 100 --seed 1 --temperature 2 \
    --no-echo >gaps.out 2>gaps.err || fail "gaps: exit $?: $(cat gaps.err)"
n=$(wc -c <gaps.out)
[ "$n" -ge 100 ] || fail "gaps: 100 tokens printed $n bytes"
expect_fail "prompt token 1 (id 300) has no text in --tokenizer 'gaps.json'" \
    "$PIPIT" sample --init v512.st --tokenizer gaps.json --prompt-ids 400,300 --tokens 3
[ -z "$("$PIPIT" sample --init v512.st --tokenizer gaps.json --prompt-ids 400,300 --tokens 3 2>/dev/null)" ] ||
    fail "gaps: a refused prompt printed something"

expect_fail "--init is required" "$PIPIT" sample --prompt "the" --tokens 3
expect_fail "--top-k must be in 0..256" "$PIPIT" sample --init m.st --prompt "the" --top-k -1
expect_fail "--top-k must be in 0..256" "$PIPIT" sample --init m.st --prompt "the" --top-k 257
expect_fail "--temperature must be" "$PIPIT" sample --init m.st --prompt "the" --temperature -1
for p in 0 1.5 -0.5; do
    CLI_FIXED=1 expect_fail "--top-p must be in (0, 1] (got $p)" "$PIPIT" sample --init m.st --prompt "the" --top-p $p
done
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
