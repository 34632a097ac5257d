#!/usr/bin/env bash
# test_cli_docs.sh — packed documents from the command line (--doc-sep ID,
# --doc-pos-reset; docs/architecture.md section 13): with separators in
# the data the losses differ from a run without the flag (GPT-2 and
# Llama, and the position reset differs again on GPT-2; --pp 2 and
# --auto-stages give the one-rank losses); a separator that
# never occurs gives exactly the losses of a run without the flag (one
# document per sequence is plain attention, bit for bit; eval too); eval
# takes a checkpoint's setting unless the flags override it; the
# refusals by message (ID outside the vocabulary, --doc-pos-reset without
# --doc-sep); --print-config carries the setting; a --doc-sep checkpoint
# resumes with it (4 + 2 steps = 6 steps, byte for byte).
# Usage: test_cli_docs.sh PIPIT SRCDIR
set -u

CLI_FIXED=1
source "$(dirname "$0")/cli_lib.sh"
cli_setup cli_docs "${1:-}"
# the losses of every step in $OUT (--json lines), one per line
losses() { $PY -c '
import json,sys
for l in sys.stdin.read().splitlines():
    try: o = json.loads(l)
    except ValueError: continue
    if "step" in o and "loss" in o: print(repr(o["loss"]))' <<<"$OUT"; }

cli_words_text 5 3000
grep -q '#' text.txt && fail "text.txt holds '#' (35): the no-separator case needs a token that never occurs"
DOT=46 NONE=35 # '.' ends many documents; '#' never occurs

for model in tiny llama-tiny; do
    a=(--model "$model" --data text.txt --ctx 32 --micro-batch 2 --steps 3 --json)
    expect_ok "$PIPIT" train "${a[@]}"; plain=$(losses)
    [ "$(wc -l <<<"$plain")" = 3 ] || fail "$model: expected 3 losses, got: $plain"
    expect_ok "$PIPIT" train "${a[@]}" --doc-sep $NONE; none=$(losses)
    [ "$none" = "$plain" ] || fail "$model: --doc-sep $NONE (never in the data) changed the losses: $none vs $plain"
    expect_ok "$PIPIT" train "${a[@]}" --doc-sep $DOT; dot=$(losses)
    [ -n "$dot" ] && [ "$dot" != "$plain" ] || fail "$model: --doc-sep $DOT gave the losses of plain attention: $dot"
    if [ "$model" = tiny ]; then
        expect_ok "$PIPIT" train "${a[@]}" --doc-sep $DOT --doc-pos-reset; reset=$(losses)
        [ -n "$reset" ] && [ "$reset" != "$dot" ] || fail "GPT-2: --doc-pos-reset did not change the losses: $reset"
        expect_ok "$PIPIT" train "${a[@]}" --doc-sep $NONE --doc-pos-reset; r0=$(losses)
        [ "$r0" = "$plain" ] || fail "GPT-2: --doc-pos-reset without a separator in the data changed the losses"
    else # RoPE is relative: nothing to reset, the same losses
        expect_ok "$PIPIT" train "${a[@]}" --doc-sep $DOT --doc-pos-reset; reset=$(losses)
        [ "$reset" = "$dot" ] || fail "Llama: --doc-pos-reset changed the losses: $reset vs $dot"
    fi
done

# ---- every stage reads the documents: --pp 2 (and --auto-stages) = one rank, bit for bit
p=(--data text.txt --ctx 32 --micro-batch 2 --microbatches 2 --steps 2 --json --doc-sep $DOT --doc-pos-reset)
expect_ok "$PIPIT" train "${p[@]}"; one=$(losses)
expect_ok "$PIPIT" train "${p[@]}" --pp 2; [ "$(losses)" = "$one" ] || fail "--doc-sep --pp 2: not the one-rank losses"
expect_ok "$PIPIT" train "${p[@]}" --pp 2 --auto-stages
[ "$(losses)" = "$one" ] || fail "--doc-sep --pp 2 --auto-stages: not the one-rank losses"

# ---- refusals
expect_fail "--doc-sep 256 is outside the vocabulary" "$PIPIT" train --data text.txt --doc-sep 256
expect_fail "--doc-sep -1 is outside the vocabulary" "$PIPIT" train --data text.txt --doc-sep -1
expect_fail "--doc-sep 300 is outside the vocabulary" "$PIPIT" train --model llama-tiny --data text.txt --doc-sep 300
expect_fail "--doc-pos-reset restarts the positions at each document: it needs --doc-sep" "$PIPIT" train \
    --data text.txt --doc-pos-reset

# ---- --print-config: printed, and read back by --config (below)
c=(--data text.txt --ctx 32 --micro-batch 2 --doc-sep $DOT --doc-pos-reset --data-order sequential)
expect_ok "$PIPIT" train "${c[@]}" --print-config
grep -q "\"doc-sep\":$DOT" <<<"$OUT" || fail "--print-config lacks \"doc-sep\":$DOT: $OUT"
grep -q '"doc-pos-reset":true' <<<"$OUT" || fail "--print-config lacks \"doc-pos-reset\":true: $OUT"
printf '%s\n' "$OUT" > docs.json
expect_ok "$PIPIT" train --data text.txt --print-config
grep -q '"doc-sep"' <<<"$OUT" && fail "--print-config without --doc-sep prints it: $OUT"

# ---- checkpoints: 4 steps saved, resumed to 6 = 6 steps with --doc-sep, byte for byte
expect_ok "$PIPIT" train "${c[@]}" --steps 6 --save d6.st
expect_ok "$PIPIT" train "${c[@]}" --steps 4 --save d.st
expect_ok "$PIPIT" train --resume d.st --steps 6
cmp -s d.st d6.st || fail "--doc-sep: 4 steps + resume to 6 differs from 6 steps (the setting not kept?)"
expect_ok "$PIPIT" train --config docs.json --steps 6 --save c6.st
cmp -s c6.st d6.st || fail "--config of --print-config's output: not the --doc-sep run"

# ---- eval: the checkpoint's --doc-sep and --doc-pos-reset unless the flags say otherwise
e=(eval --init d6.st --data text.txt --batches 2 --json)
expect_ok "$PIPIT" "${e[@]}"; e_ckpt=$OUT
expect_ok "$PIPIT" "${e[@]}" --doc-sep $DOT --doc-pos-reset
[ "$OUT" = "$e_ckpt" ] || fail "eval of a --doc-sep $DOT --doc-pos-reset checkpoint: $e_ckpt, not its settings' $OUT"
expect_ok "$PIPIT" "${e[@]}" --doc-sep $DOT
[ "$OUT" != "$e_ckpt" ] || fail "eval --doc-sep $DOT (no position reset): the loss with the checkpoint's reset"
expect_ok "$PIPIT" "${e[@]}" --doc-sep $NONE; e_none=$OUT
[ "$e_none" != "$e_ckpt" ] || fail "eval --doc-sep $NONE: the loss of the checkpoint's separator"
expect_ok "$PIPIT" train --data text.txt --ctx 32 --micro-batch 2 --steps 1 --save plain.st
expect_ok "$PIPIT" eval --init plain.st --data text.txt --batches 2 --json; e_plain=$OUT
expect_ok "$PIPIT" eval --init plain.st --data text.txt --batches 2 --json --doc-sep $NONE
[ "$OUT" = "$e_plain" ] || fail "eval --doc-sep $NONE (never in the data): $OUT, not plain attention's $e_plain"
expect_fail "--doc-sep 999 is outside the vocabulary" "$PIPIT" eval --init d6.st --data text.txt --doc-sep 999

if [ "$failures" -ne 0 ]; then
    echo "test_cli_docs: $failures failure(s)" >&2
    exit 1
fi
echo "test_cli_docs: ok"
exit 0
