#!/usr/bin/env bash
# test_cli_sp.sh — `pipit train --tp T --sp` end to end (threads;
# test_mpi_sp.sh runs it under mpirun): GPT-2 and Llama at P = 2 print the
# losses of the same run without --sp (to 1e-6 relative; tests/test_sp.c
# holds the library to the bits and 1e-6), the same losses under two
# schedules at a fixed T; `pipit plan --json` counts fewer activation bytes
# on every rank with --sp (the admission adds the same blocks) and shows
# the all-gathers and reduce-scatters (the backward gathering each
# gathered input again: Megatron's re-gather); with --cp 2 too, --sp keeps the
# losses of the run without it; each refusal names its flags.
# Usage: test_cli_sp.sh PIPIT SRCDIR
set -u

source "$(dirname "$0")/cli_lib.sh"
cli_setup cli_sp "${1:-}"

cli_loss_helpers # run, losses, close (cli_lib.sh)

cli_words_text 7 4000 || { echo "cannot write test data"; exit 1; }
GPT2=(--data text.txt --ctx 16 --layers 4 --heads 4 --dim 32 --micro-batch 2 --lr 3e-3 --seed 3 --json)
LLAMA=(--data text.txt --model llama-tiny --ctx 16 --layers 4 --dim 32 --ffn-hidden 48 --kv-heads 2 --micro-batch 2
       --lr 3e-3 --seed 3 --json)
MESH=(--pp 2 --tp 2 --microbatches 4 --steps 3)

for m in GPT2 LLAMA; do
    declare -n model=$m
    run tp.log "$PIPIT" train "${model[@]}" "${MESH[@]}"
    run sp.log "$PIPIT" train "${model[@]}" "${MESH[@]}" --sp
    close tp.log sp.log 1e-6 "$m --sp vs --tp 2 alone"
    run zb.log "$PIPIT" train "${model[@]}" "${MESH[@]}" --sp --schedule zb-h1
    diff <(losses sp.log) <(losses zb.log) >/dev/null || fail "$m --sp: 1f1b and zb-h1 print other losses"
    unset -n model
done
# SP composes with context parallelism: each of the C ranks' 2L tokens is
# cut over T again (Llama: GQA and CP's RoPE; GPT-2: fed global positions)
for m in GPT2 LLAMA; do
    declare -n model=$m
    run cp.log "$PIPIT" train "${model[@]}" "${MESH[@]}" --cp 2
    run cpsp.log "$PIPIT" train "${model[@]}" "${MESH[@]}" --cp 2 --sp
    close cp.log cpsp.log 1e-6 "$m --cp 2 --sp vs --cp 2 alone"
    unset -n model
done

# ---- the plan: fewer activation bytes per rank, the sequence collectives
PLAN=(--data text.txt --ctx 16 --layers 4 --heads 4 --dim 32 --micro-batch 2 --pp 2 --tp 2 --microbatches 2)
run p0.json "$PIPIT" plan "${PLAN[@]}" --json
run p1.json "$PIPIT" plan "${PLAN[@]}" --json --sp
$PY - p0.json p1.json <<'PYEOF' || fail "plan --sp: $(cat p.out)"
import json, sys
a, b = (json.load(open(f)) for f in sys.argv[1:3])
for r0, r1 in zip(a["ranks"], b["ranks"]):
    x0, x1 = r0["memory"]["activations"], r1["memory"]["activations"]
    print(f"rank {r0['rank']}: activations {x0:.0f} -> {x1:.0f} bytes with --sp")
    assert 0 < x1 < x0, (x0, x1)
    assert r1["memory"]["params"] == r0["memory"]["params"]
PYEOF
run p1.txt "$PIPIT" plan "${PLAN[@]}" --sp --verbose
grep -q "TP    all-gather node" p1.txt || fail "plan --sp: no all-gather"
grep -q "TP    reduce-scatter node" p1.txt || fail "plan --sp: no reduce-scatter"
# the backward gathers each gathered input again (OPF_REFETCH) beside the
# all-gathers that are the reduce-scatters' VJPs: per task, backward
# all-gathers >= forward all-gathers + forward reduce-scatters
$PY - p1.txt <<'PYEOF' || fail "plan --sp: the backward does not re-gather"
import re, sys
count, task = {}, None
for line in open(sys.argv[1]):
    m = re.match(r"\s+task (F|BW|B|W)(\d+)\.", line)
    if m:
        task = (m.group(1)[0], m.group(2))
        continue
    m = re.search(r"TP    (all-gather|reduce-scatter) node", line)
    if m and task:
        key = (task[0], task[1], m.group(1))
        count[key] = count.get(key, 0) + 1
stages = {k[1] for k in count}
assert stages, "no tasks"
for s in stages:
    fg, fs = count.get(("F", s, "all-gather"), 0), count.get(("F", s, "reduce-scatter"), 0)
    bg = count.get(("B", s, "all-gather"), 0) + count.get(("W", s, "all-gather"), 0)
    print(f"stage {s}: forward {fg} all-gathers + {fs} reduce-scatters, backward {bg} all-gathers")
    assert fg > 0 and bg >= fg + fs, (s, fg, fs, bg)
PYEOF

# ---- refusals
expect_fail "it needs --tp 2 or more (got --tp 1)" "$PIPIT" train "${GPT2[@]}" --sp --steps 1
expect_fail "--sp: --tp 4 does not divide --ctx 18" "$PIPIT" train --data text.txt --ctx 18 --layers 4 --heads 4 --dim 32 \
    --tp 4 --sp --steps 1
# MoE layers run with --sp (against --tp 1: tests/test_cli_moe_tp.sh)
expect_ok "$PIPIT" train "${LLAMA[@]}" --experts 4 --tp 2 --sp --steps 1

[ "$failures" -eq 0 ] && echo "test_cli_sp: ok"
[ "$failures" -eq 0 ]
