#!/usr/bin/env bash
# test_cli_moe_counts.sh — `pipit train --json` reports each MoE layer's
# tokens per expert (moe_counts, summed over the step's microbatches and
# replicas) and max / mean (moe_imbalance). Oracles: hand-computed cases
# (top-k = experts: every expert gets every token; one expert gets them
# all), conservation (each layer's counts add up to tokens x top-k), the
# imbalance recomputed here from the counts, and the counts of one rank
# equal to those of --pp 2 (1f1b, gpipe) and of --dp 2 (a token's choices
# depend on its own sequence only); a dense model reports none.
# Usage: test_cli_moe_counts.sh PIPIT SRCDIR
set -u

CLI_FIXED=1
source "$(dirname "$0")/cli_lib.sh"
cli_setup cli_moe_counts "${1:-}"

cli_words_text 5 2000

# check OUT LAYERS EXPERTS TOPK TOKENS [EXACT]: every step line's counts
# well formed and conserved, the imbalance max*E/sum; EXACT (a python
# list per layer) = the counts every step must have. Prints all steps'
# counts (for comparing runs).
cat >check.py <<'EOF2'
import json, sys
layers, E, k, tokens = (int(a) for a in sys.argv[1:5])
exact = json.loads(sys.argv[5]) if len(sys.argv) > 5 else None
steps = [json.loads(l) for l in sys.stdin.read().splitlines() if l.startswith('{"step"')]
assert steps, "no step lines"
for s in steps:
    c, imb = s["moe_counts"], s["moe_imbalance"]
    assert len(c) == layers and len(imb) == layers, (len(c), len(imb))
    for row, x in zip(c, imb):
        assert len(row) == E and all(isinstance(v, int) and v >= 0 for v in row), row
        assert sum(row) == tokens * k, (row, tokens * k)
        assert abs(x - max(row) * E / sum(row)) <= 1e-8 * x, (x, row)
    if exact is not None:
        assert c == exact, (c, exact)
print(json.dumps([s["moe_counts"] for s in steps]))
EOF2
check() { $PY check.py "$@" <<<"$OUT" || fail "counts: $OUT"; }

base=(--model llama-tiny --layers 2 --data text.txt --steps 3 --micro-batch 2 --ctx 16 --json)
# top-k = experts: each token picks every expert once: 2 x 16 x 2 = 64 tokens each
expect_ok "$PIPIT" train "${base[@]}" --experts 4 --top-k 4 --dropless --microbatches 2
check 2 4 4 64 '[[64,64,64,64],[64,64,64,64]]' >/dev/null
# one expert takes every token; --moe-every 2: layer 1 only
expect_ok "$PIPIT" train "${base[@]}" --experts 1 --top-k 1 --moe-every 2
check 1 1 1 32 '[[32]]' >/dev/null

# moe-tiny (8 experts, top-2, 4 layers): a real routing, the same at every layout
run=(--model moe-tiny --data text.txt --steps 4 --micro-batch 2 --ctx 16 --json)
expect_ok "$PIPIT" train "${run[@]}" --microbatches 4
one=$(check 4 8 2 128)
echo "$one" | $PY -c 'import json,sys; c=json.load(sys.stdin); assert any(len(set(r)) > 1 for s in c for r in s), c' ||
    fail "moe-tiny: every expert got the same count: $one"
expect_ok "$PIPIT" train "${run[@]}" --microbatches 4 --pp 2 --schedule 1f1b
[ "$(check 4 8 2 128)" = "$one" ] || fail "--pp 2 1f1b counts differ from one rank: $OUT"
expect_ok "$PIPIT" train "${run[@]}" --microbatches 4 --pp 2 --schedule gpipe --threads 2
[ "$(check 4 8 2 128)" = "$one" ] || fail "--pp 2 gpipe counts differ from one rank: $OUT"
expect_ok "$PIPIT" train "${run[@]}" --microbatches 2 --dp 2
[ "$(check 4 8 2 128)" = "$one" ] || fail "--dp 2 counts differ from one rank: $OUT"

# a dense model: no MoE fields
expect_ok "$PIPIT" train --model llama-tiny --layers 2 --data text.txt --steps 1 --micro-batch 2 --ctx 16 --json
case "$OUT" in *moe_counts*) fail "a dense model reported moe_counts: $OUT" ;; esac
# without --json the run still trains
expect_ok "$PIPIT" train --model moe-tiny --data text.txt --steps 1 --micro-batch 2 --ctx 16

if [ "$failures" -ne 0 ]; then
    echo "test_cli_moe_counts: $failures failure(s)" >&2
    exit 1
fi
echo "test_cli_moe_counts: ok"
exit 0
