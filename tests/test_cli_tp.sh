#!/usr/bin/env bash
# test_cli_tp.sh — `pipit train --tp T` end to end (threads; test_mpi_tp.sh
# runs the same meshes under mpirun): the losses of T = 2 and T = 4 follow
# T = 1's to 1e-5 relative for GPT-2 and Llama; a training checkpoint saved
# under P2 x T2 x D1 resumes under P4 x T2 (the same T and D: the
# uninterrupted run's bits, losses and checkpoint) and under P1 x T1 x D2
# (the first resumed loss equal to 1e-6, the next ones to 1e-5: only the
# order of the row-parallel and data-parallel sums changes); `pipit plan`
# shows the all-reduces and the per-rank memory; --print-config has "tp";
# every refusal names the flag and the value.
# Usage: test_cli_tp.sh PIPIT SRCDIR
set -u

source "$(dirname "$0")/cli_lib.sh"
cli_setup cli_tp "${1:-}"

cli_loss_helpers # run, losses, close (cli_lib.sh)

$PY - <<'EOF' || { echo "cannot write test data"; exit 1; }
import random
r = random.Random(7)
words = ["the ", "cat ", "sat ", "on ", "a ", "mat. ", "dog ", "ran ", "to ", "park, ", "and ", "we ", "saw "]
open("text.txt", "w").write("".join(r.choice(words) for _ in range(4000)))
EOF
BASE=(--data text.txt --ctx 16 --layers 4 --heads 4 --dim 32 --micro-batch 2 --lr 3e-3 --seed 3)
GPT2=("${BASE[@]}" --json)
LLAMA_BASE=(--data text.txt --model llama-tiny --ctx 16 --layers 4 --dim 32 --ffn-hidden 48 --micro-batch 2 --lr 3e-3
            --seed 3 --json)
LLAMA=("${LLAMA_BASE[@]}" --kv-heads 4)

# ---- T > 1 follows T = 1 (rounding of the split sums only)
for m in GPT2 LLAMA; do
    declare -n model=$m
    run t1.log "$PIPIT" train "${model[@]}" --microbatches 2 --steps 4
    for T in 2 4; do
        run "t$T.log" "$PIPIT" train "${model[@]}" --tp "$T" --microbatches 2 --steps 4
        close t1.log "t$T.log" 1e-5 "$m --tp $T vs --tp 1"
    done
    unset -n model
done

# ---- checkpoints across meshes: saved under P2 x T2 x D1
MESH=(--pp 2 --tp 2 --microbatches 4)
run full.log "$PIPIT" train "${GPT2[@]}" "${MESH[@]}" --steps 4 --save full.st
run part.log "$PIPIT" train "${GPT2[@]}" "${MESH[@]}" --steps 2 --save part.st
# P4 x T2 x D1: same T and D, so the uninterrupted run's bits
cp part.st p4.st
run p4.log "$PIPIT" train --resume p4.st --steps 4 --pp 4 --tp 2 --json
[ "$(losses p4.log | tr '\n' ' ')" = "$(losses full.log | tail -2 | tr '\n' ' ')" ] ||
    fail "resume P4 x T2: losses $(losses p4.log | tr '\n' ' ') vs $(losses full.log | tail -2 | tr '\n' ' ')"
cmp -s p4.st full.st || fail "resume P4 x T2: the checkpoint differs from the uninterrupted run's"
# P1 x T1 x D2 (2 microbatches each: the file's global batch of 4)
cp part.st d2.st
run d2.log "$PIPIT" train --resume d2.st --steps 4 --tp 1 --dp 2 --json
grep -q -- "--dp 2 x --microbatches 2 keeps its global batch of 4" d2.log d2.log.err || fail "resume D2: no resume line"
losses full.log | tail -2 > want.txt
[ "$(losses d2.log | wc -l)" = 2 ] || fail "resume P1 x T1 x D2: $(losses d2.log | wc -l) steps"
$PY - "$(losses d2.log | head -1)" "$(sed -n 1p want.txt)" 1e-6 <<'EOF' || fail "resume P1 x T1 x D2: first loss $(losses d2.log | head -1) vs $(sed -n 1p want.txt)"
import sys
a, b, tol = map(float, sys.argv[1:])
sys.exit(0 if abs(a - b) <= tol * abs(b) else 1)
EOF
$PY - "$(losses d2.log | tail -1)" "$(sed -n 2p want.txt)" 1e-5 <<'EOF' || fail "resume P1 x T1 x D2: second loss $(losses d2.log | tail -1) vs $(sed -n 2p want.txt)"
import sys
a, b, tol = map(float, sys.argv[1:])
sys.exit(0 if abs(a - b) <= tol * abs(b) else 1)
EOF

# ---- plan and print-config
expect_ok "$PIPIT" plan "${BASE[@]}" --pp 2 --tp 2 --microbatches 2
grep -q "each rank's program runs on 2 tensor-parallel ranks" <<<"$OUT" || fail "plan: no T line"
grep -q "TP    all-reduce sum node" <<<"$OUT" || fail "plan: no tensor-parallel all-reduce"
grep -q "held per world rank: parameters" <<<"$OUT" || fail "plan: no per-rank memory"
expect_ok "$PIPIT" train "${GPT2[@]}" --tp 2 --steps 1 --print-config
grep -q '"tp": *2' <<<"$OUT" || fail "print-config: no \"tp\": 2 in $OUT"

# ---- refusals, by flag and value
expect_fail "--tp 3 does not divide --heads 4" "$PIPIT" train "${GPT2[@]}" --tp 3 --steps 1
expect_fail "--tp must be >= 1" "$PIPIT" train "${GPT2[@]}" --tp 0 --steps 1
expect_fail "--tp must be at most 64" "$PIPIT" train "${GPT2[@]}" --tp 65 --steps 1
expect_fail "--tp 4 does not divide --vocab 258" "$PIPIT" train "${GPT2[@]}" --vocab 258 --tp 4 --steps 1
expect_fail "--tp 4 does not divide --kv-heads 2" "$PIPIT" train "${LLAMA_BASE[@]}" --kv-heads 2 --tp 4 --steps 1
expect_fail "--auto-stages cuts a graph without tensor parallelism" "$PIPIT" train "${GPT2[@]}" --pp 2 --tp 2 \
    --auto-stages --steps 1

echo "$((failures == 0 ? 1 : 0)) passed, $((failures == 0 ? 0 : 1)) failed"
[ "$failures" -eq 0 ]
