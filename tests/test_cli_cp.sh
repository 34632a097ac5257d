#!/usr/bin/env bash
# test_cli_cp.sh — `pipit train --cp C` end to end (threads): the losses of
# C = 2 and C = 4 follow C = 1's to 1e-5 relative over 4 AdamW steps for
# GPT-2 and Llama (GQA, with --tp 2 and --pp 2 too); at a fixed C the
# 1F1B and GPipe pipelines give the same bits; a training checkpoint saved
# at --cp 2 resumes at --cp 1 with its first loss equal to the
# uninterrupted run's to 1e-6 (parameters are replicated over C: the file
# does not depend on it); every refusal names the flag and the value.
# Packed documents (--doc-sep) under --cp follow one rank; pipit eval --cp
# gives --cp 1's loss, and so does train --cp's validation (--val-data,
# --val-split).
# Usage: test_cli_cp.sh PIPIT SRCDIR
set -u

source "$(dirname "$0")/cli_lib.sh"
cli_setup cli_cp "${1:-}"

cli_loss_helpers # run, losses, close (cli_lib.sh)
refused() { # refused NEEDLE cmd...: a non-zero exit whose message has NEEDLE
    local needle=$1
    shift
    "$@" >ref.log 2>&1 && fail "accepted: $*"
    grep -qF -- "$needle" ref.log || fail "refusal of '$*' lacks '$needle': $(cat ref.log)"
}

cli_words_text 7 4000
GPT2=(--data text.txt --ctx 16 --layers 2 --heads 4 --dim 32 --micro-batch 2 --lr 3e-3 --seed 3 --json
      --microbatches 2)
LLAMA=(--data text.txt --model llama-tiny --ctx 16 --layers 2 --dim 32 --ffn-hidden 48 --kv-heads 2 --micro-batch 2
       --lr 3e-3 --seed 3 --json --microbatches 2)

# ---- C > 1 follows C = 1 (rounding of the split sums only)
for m in GPT2 LLAMA; do
    declare -n model=$m
    run c1.log "$PIPIT" train "${model[@]}" --steps 4
    run c2.log "$PIPIT" train "${model[@]}" --steps 4 --cp 2
    close c1.log c2.log 1e-5 "$m --cp 2 vs --cp 1"
    run c4.log "$PIPIT" train "${model[@]}" --steps 4 --cp 4 --pp 2
    close c1.log c4.log 1e-5 "$m --cp 4 --pp 2 vs --cp 1"
    run g.log "$PIPIT" train "${model[@]}" --steps 4 --cp 4 --pp 2 --schedule gpipe
    [ "$(losses g.log | tr '\n' ' ')" = "$(losses c4.log | tr '\n' ' ')" ] ||
        fail "$m --cp 4 --pp 2: gpipe $(losses g.log | tr '\n' ' ') vs 1f1b $(losses c4.log | tr '\n' ' ')"
    unset -n model
done
run t2.log "$PIPIT" train "${LLAMA[@]}" --steps 4 --cp 2 --tp 2
run t1.log "$PIPIT" train "${LLAMA[@]}" --steps 4 --tp 2
close t1.log t2.log 1e-5 "llama --cp 2 --tp 2 vs --tp 2"

# ---- checkpoints do not depend on C: saved at --cp 2, resumed at --cp 1
run full.log "$PIPIT" train "${GPT2[@]}" --cp 2 --steps 3 --save full.st
run part.log "$PIPIT" train "${GPT2[@]}" --cp 2 --steps 2 --save part.st
run res.log "$PIPIT" train --resume part.st --steps 3 --json
$PY - "$(losses res.log | head -1)" "$(losses full.log | tail -1)" 1e-6 <<'EOF' ||
import sys
a, b, tol = map(float, sys.argv[1:])
sys.exit(0 if abs(a - b) <= tol * abs(b) else 1)
EOF
    fail "resume at --cp 1: loss $(losses res.log | head -1) vs $(losses full.log | tail -1)"

# ---- packed documents under CP (--doc-sep): the ids gathered with k and v,
# the mask across chunks. 32 (space) ends a document every few tokens, so
# documents cross the chunks' boundaries; --cp 2 --dp 2 follows one rank
# on the same data (its 4 microbatches); 3 never occurs: --cp 2's bits.
# GPT-2's --doc-pos-reset positions are computed on whole sequences and
# sliced like the tokens.
ONE=(--microbatches 4)
CP=(--microbatches 2 --cp 2 --dp 2)
for m in GPT2 LLAMA; do
    declare -n model=$m
    base=("${model[@]:0:${#model[@]}-2}") # without its final "--microbatches 2"
    run d1.log "$PIPIT" train "${base[@]}" --steps 4 "${ONE[@]}" --doc-sep 32
    run d2.log "$PIPIT" train "${base[@]}" --steps 4 "${CP[@]}" --doc-sep 32
    close d1.log d2.log 1e-5 "$m --cp 2 --dp 2 --doc-sep 32 vs one rank"
    run n0.log "$PIPIT" train "${model[@]}" --steps 4 --cp 2
    run n1.log "$PIPIT" train "${model[@]}" --steps 4 --cp 2 --doc-sep 3
    [ "$(losses n0.log | tr '\n' ' ')" = "$(losses n1.log | tr '\n' ' ')" ] ||
        fail "$m --cp 2 --doc-sep 3 (never in the data): $(losses n1.log | tr '\n' ' ') vs $(losses n0.log | tr '\n' ' ')"
    [ "$(losses d2.log | tr '\n' ' ')" != "$(losses n0.log | tr '\n' ' ')" ] || fail "$m: --doc-sep 32 masked nothing"
    unset -n model
done
run r1.log "$PIPIT" train "${GPT2[@]}" --steps 4 --doc-sep 46 --doc-pos-reset
run r2.log "$PIPIT" train "${GPT2[@]}" --steps 4 --cp 2 --doc-sep 46 --doc-pos-reset
close r1.log r2.log 1e-5 "GPT-2 --cp 2 --doc-sep 46 --doc-pos-reset vs --cp 1"
run r0.log "$PIPIT" train "${GPT2[@]}" --steps 4 --cp 2 --doc-sep 46
[ "$(losses r0.log | tr '\n' ' ')" != "$(losses r2.log | tr '\n' ' ')" ] || fail "--doc-pos-reset changed nothing"

# ---- pipit eval --cp: the same mean loss as --cp 1, plain and packed
for sep in "" "--doc-sep 32"; do
    run e1.log "$PIPIT" eval --init full.st --data text.txt --json $sep
    for c in 2 4; do
        run e2.log "$PIPIT" eval --init full.st --data text.txt --json --cp $c $sep
        close e1.log e2.log 1e-6 "eval --cp $c $sep vs --cp 1"
    done
done

# ---- train --cp's validation: each validation batch cut over C as a step's
# is. --lr 0 keeps the runs' parameters equal, so their val losses differ
# by the rounding of the split sums only: --cp 1's to 1e-6, plain, packed
# (--doc-sep 32) and --val-split, Llama with --pp 2 and --dp 2 too (the
# same G = 2 validation microbatches); with a real --lr they follow --cp 1
# as the training losses do (1e-5).
vlosses() { grep -o '"val_loss":[^,]*' "$1" | cut -d: -f2; }
vclose() { # vclose A B TOL WHAT: two val losses each, B's within TOL relative of A's
    $PY - "$3" <(vlosses "$1") <(vlosses "$2") <<'EOF' || fail "$4: $(vlosses "$1" | tr '\n' ' ') vs $(vlosses "$2" | tr '\n' ' ')"
import sys
tol = float(sys.argv[1])
a = [float(x) for x in open(sys.argv[2])]
b = [float(x) for x in open(sys.argv[3])]
sys.exit(0 if len(a) == 2 and len(a) == len(b) and all(abs(x - y) <= tol * abs(x) for x, y in zip(a, b)) else 1)
EOF
}
VAL=(--steps 2 --eval-every 1 --eval-batches 2)
G0=("${GPT2[@]/#3e-3/0}") # --lr 0
for v in "--val-data text.txt" "--val-data text.txt --doc-sep 32" "--val-split 0.2"; do
    run v1.log "$PIPIT" train "${G0[@]}" "${VAL[@]}" $v
    run v2.log "$PIPIT" train "${G0[@]}" "${VAL[@]}" $v --cp 2
    vclose v1.log v2.log 1e-6 "GPT-2 val loss --cp 2 $v vs --cp 1"
done
base=("${LLAMA[@]:0:${#LLAMA[@]}-2}") # without its final "--microbatches 2"
base=("${base[@]/#3e-3/0}")           # --lr 0
run v1.log "$PIPIT" train "${base[@]}" "${VAL[@]}" --microbatches 2 --val-data text.txt --doc-sep 32
run v2.log "$PIPIT" train "${base[@]}" "${VAL[@]}" --microbatches 1 --dp 2 --cp 2 --pp 2 --val-data text.txt --doc-sep 32
vclose v1.log v2.log 1e-6 "Llama val loss --cp 2 --pp 2 --dp 2 --doc-sep 32 vs --cp 1"
run v1.log "$PIPIT" train "${GPT2[@]}" --steps 2 --eval-every 1 --val-data text.txt
run v2.log "$PIPIT" train "${GPT2[@]}" --steps 2 --eval-every 1 --val-data text.txt --cp 2
vclose v1.log v2.log 1e-5 "GPT-2 val loss --cp 2 vs --cp 1 after AdamW steps"

# ---- refusals
refused "--ctx 12 is not a multiple of 8" "$PIPIT" train --data text.txt --ctx 12 --layers 2 --heads 4 --dim 32 --steps 1 --cp 4
refused "--cp must be in 1..64" "$PIPIT" train "${GPT2[@]}" --steps 1 --cp 0

echo "$((failures == 0 ? 1 : 0)) passed, $((failures == 0 ? 0 : 1)) failed"
[ "$failures" -eq 0 ]
