#!/usr/bin/env bash
# test_cli_data.sh — `pipit` data flags end to end: a flag given twice is an
# error naming both values; --data lists and globs (sorted by path; one file
# exactly as before; no match names the pattern); --data-format u16 reads
# nanoGPT's headerless train.bin (auto refuses it, naming the fix);
# --val-data / --val-split with --eval-every print val loss lines (text and
# JSON) without changing the training losses; eval and validation refuse to
# wrap around a short file. Usage: test_cli_data.sh PIPIT SRCDIR
set -u

CLI_FIXED=1 # expected words are fixed strings
source "$(dirname "$0")/cli_lib.sh"
cli_setup cli_data "${1:-}"

$PY - <<'PYEOF' || { echo "cannot write test data"; exit 1; }
import random, struct, os
r = random.Random(7)
words = ["the ", "cat ", "sat ", "on ", "a ", "mat. ", "dog ", "ran ", "to ", "park, "]
text = "".join(r.choice(words) for _ in range(3000))
open("text.txt", "w").write(text)
os.mkdir("parts")
# the same text in three pieces, each a multiple of T = 16 tokens plus one
open("parts/p2.txt", "w").write(text[:1601])
open("parts/p0.txt", "w").write(text[1601:3202])
open("parts/p1.txt", "w").write(text[3202:4803])
open("short.txt", "w").write("x" * 40)  # T = 16: 2 windows
toks = [r.randrange(300) for _ in range(3000)]
open("train.bin", "wb").write(struct.pack("<%dH" % len(toks), *toks))  # nanoGPT: no header
hdr = struct.pack("<3i", 20240520, 1, len(toks)) + bytes(1024 - 12)
open("shard.bin", "wb").write(hdr + struct.pack("<%dH" % len(toks), *toks))  # llm.c shard
PYEOF

MODEL=(--ctx 16 --layers 1 --heads 2 --dim 32 --micro-batch 2)
TRAIN=("$PIPIT" train "${MODEL[@]}")

# ---- a flag given twice
expect_fail "--data given twice ('text.txt' and 'other.txt')" "${TRAIN[@]}" --data text.txt --steps 1 --data other.txt
expect_fail "--steps given twice ('1' and '2')" "${TRAIN[@]}" --data text.txt --steps 1 --steps=2
expect_fail "--json given twice" "${TRAIN[@]}" --data text.txt --steps 1 --json --json
expect_fail "--batches given twice" "$PIPIT" eval --init x.st --data text.txt --batches 1 --batches 1
expect_fail "--pp given twice" "$PIPIT" schedule --pp 2 --pp 4 --microbatches 4

# ---- several files: sorted by path, whatever order the list gives
expect_ok "${TRAIN[@]}" --data 'parts/*.txt' --steps 3 --data-order sequential --json
GLOB=$OUT
expect_ok "${TRAIN[@]}" --data parts/p1.txt,parts/p2.txt,parts/p0.txt --steps 3 --data-order sequential --json
[ "$(grep -o '"loss":[^,]*' <<<"$OUT")" = "$(grep -o '"loss":[^,]*' <<<"$GLOB")" ] ||
    fail "a list and a glob of the same files train differently"$'\n'"$GLOB"$'\n'"$OUT"
# the first file in path order is p0 = text[1601:3202]: its windows come first
printf '%s' "$(head -c 3202 text.txt | tail -c 1601)" > p0_alone.txt
expect_ok "${TRAIN[@]}" --data p0_alone.txt --steps 3 --data-order sequential --json
[ "$(grep -o '"loss":[^,]*' <<<"$OUT")" = "$(grep -o '"loss":[^,]*' <<<"$GLOB")" ] ||
    fail "the glob does not start with the path-sorted first file"
expect_fail "no file matches the pattern 'nothing/*.txt'" "${TRAIN[@]}" --data 'nothing/*.txt' --steps 1
expect_fail "listed twice" "${TRAIN[@]}" --data 'parts/*.txt,parts/p0.txt' --steps 1
expect_fail "short.txt" "$PIPIT" train --data parts/p0.txt,short.txt --ctx 64 --layers 1 --heads 2 --dim 32 \
    --micro-batch 2 --steps 1
expect_fail "differ in kind" "${TRAIN[@]}" --data text.txt,shard.bin --vocab 300 --steps 1

# ---- --data-format u16 (nanoGPT's train.bin)
expect_fail "--data-format u16" "${TRAIN[@]}" --data train.bin --vocab 300 --steps 1
expect_fail "train.bin" "${TRAIN[@]}" --data train.bin --vocab 300 --steps 1
expect_ok "${TRAIN[@]}" --data train.bin --data-format u16 --vocab 300 --steps 2 --json
grep -q '"step":1' <<<"$OUT" || fail "u16 training printed no step 1: $OUT"
expect_fail "holds token" "${TRAIN[@]}" --data train.bin --data-format u16 --steps 1
expect_fail "bad value 'u32' for --data-format" "${TRAIN[@]}" --data train.bin --data-format u32 --steps 1

# ---- validation
expect_ok "${TRAIN[@]}" --data text.txt --steps 4 --data-order sequential --json
PLAIN=$OUT
expect_ok "${TRAIN[@]}" --data text.txt --steps 4 --data-order sequential --json --val-data parts/p1.txt \
    --eval-every 2 --eval-batches 3
VAL=$OUT
[ "$(grep -c '"val_loss"' <<<"$VAL")" = 2 ] || fail "--eval-every 2 over 4 steps: expected 2 val lines"$'\n'"$VAL"
grep -q '^{"step":1,"val_loss":[0-9.e+-]*,"val_tokens":96}$' <<<"$VAL" || fail "val JSON line: $VAL"
[ "$(grep -v val_loss <<<"$VAL" | grep -o '"loss":[^,]*')" = "$(grep -o '"loss":[^,]*' <<<"$PLAIN")" ] ||
    fail "validation changed the training losses"$'\n'"$PLAIN"$'\n'"$VAL"
# the val loss at the end equals eval of the saved model on the same windows
expect_ok "${TRAIN[@]}" --data text.txt --steps 3 --data-order sequential --val-data parts/p1.txt --eval-batches 2 \
    --save v.st
grep -q "^step    2  val loss " <<<"$OUT" || fail "no val loss line at the end: $OUT"
VLOSS=$(sed -n 's/^step    2  val loss \([0-9.]*\).*/\1/p' <<<"$OUT")
expect_ok "$PIPIT" eval --init v.st --data parts/p1.txt --ctx 16 --micro-batch 2 --batches 2
ELOSS=$(sed -n 's/^eval loss \([0-9.]*\).*/\1/p' <<<"$OUT")
$PY -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(abs(a - b) > 1e-4)" "$VLOSS" "$ELOSS" ||
    fail "val loss $VLOSS != eval loss $ELOSS"
# --val-split: the tail of --data
expect_ok "${TRAIN[@]}" --data text.txt --steps 2 --val-split 0.1 --json
grep -q '"val_loss"' <<<"$OUT" || fail "--val-split printed no val loss: $OUT"
expect_fail "--val-split must be between 0 and 1" "${TRAIN[@]}" --data text.txt --steps 1 --val-split 1.5
expect_fail "alternatives" "${TRAIN[@]}" --data text.txt --steps 1 --val-split 0.1 --val-data text.txt
expect_fail "--eval-every needs validation data" "${TRAIN[@]}" --data text.txt --steps 1 --eval-every 2
expect_fail "has only 2 distinct sequences" "${TRAIN[@]}" --data text.txt --steps 1 --val-data short.txt \
    --eval-batches 2
expect_ok "${TRAIN[@]}" --data text.txt --steps 1 --val-data short.txt # default: as many batches as fit
grep -q "val loss .* over 32 tokens" <<<"$OUT" || fail "short val file, default batches: $OUT"

# plan takes a train command line as is (validation flags accepted, ignored)
expect_ok "$PIPIT" plan --data text.txt "${MODEL[@]}" --steps 2 --val-split 0.1 --eval-every 1 --eval-batches 1

# ---- eval does not wrap around a short file
expect_ok "${TRAIN[@]}" --data text.txt --steps 0 --save init.st
expect_fail "has only 2 distinct sequences of T+1 = 17 tokens" "$PIPIT" eval --init init.st --data short.txt \
    --ctx 16 --micro-batch 2 --batches 2
expect_fail "pass --batches 1 or fewer" "$PIPIT" eval --init init.st --data short.txt --ctx 16 --micro-batch 2 \
    --batches 2
expect_ok "$PIPIT" eval --init init.st --data short.txt --ctx 16 --micro-batch 2 --batches 1
expect_ok "$PIPIT" eval --init init.st --data 'parts/*.txt' --ctx 16 --micro-batch 2 --batches 3 --json

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "test_cli_data: ok"
