#!/usr/bin/env bash
# test_mpi_cp_mem.sh — context parallelism is what lets a long sequence
# fit: at --ctx 1024 a one-rank Llama needs ~12 MiB (10 MiB of it the
# activation arenas), so --mem-limit 8 MB refuses it and the refusal names
# the activations and --cp; under mpirun the same limit per process admits
# --cp 4 (each process holds 1/4 of the sequence's activations), it trains,
# its peak bytes per rank stay under the limit, and its losses follow the
# one-rank run without the limit to 1e-6 relative.
# Usage: test_mpi_cp_mem.sh PIPIT_CLI SOURCE_DIR   (exit 77: skipped)
set -u
source "$(dirname "$0")/mpi_lib.sh"
mpi_setup "$1" "$2" mpi_cp_mem
LIMIT=8000000
LONG=(--data corpus.txt --model llama-tiny --ctx 1024 --layers 2 --dim 64 --heads 4 --ffn-hidden 128 --kv-heads 2
      --micro-batch 1 --lr 3e-3 --seed 3 --steps 2 --json)

"$CLI" train "${LONG[@]}" --mem-limit "$LIMIT" > one.log 2> one.err && fail "--cp 1 fits $LIMIT bytes: the test needs a longer --ctx"
grep -q "activation arenas" one.err || fail "the refusal at --cp 1 does not name the activations: $(cat one.err)"
grep -qF -- "--cp C" one.err || fail "the refusal at --cp 1 does not suggest --cp: $(cat one.err)"
mpi 4 self,vader "$CLI" train "${LONG[@]}" --cp 4 --mem-limit "$LIMIT" > cp4.log 2> cp4.err ||
    fail "--cp 4 under mpirun: $(tail -3 cp4.err)"
"$CLI" train "${LONG[@]}" --no-mem-check > ref.log 2> ref.err || fail "the one-rank run without the limit: $(cat ref.err)"
python3 - "$LIMIT" cp4.log ref.log <<'PY' || fail "--cp 4 within $LIMIT bytes: see above"
import json, sys
limit = int(sys.argv[1])
cp4 = [json.loads(l) for l in open(sys.argv[2]) if l.startswith("{")]
ref = [json.loads(l) for l in open(sys.argv[3]) if l.startswith("{")]
ok = len(cp4) == len(ref) == 2
for a, b in zip(cp4, ref):
    ok &= abs(a["loss"] - b["loss"]) <= 1e-6 * abs(b["loss"])
    ok &= 0 < a["peak_bytes"] < limit
    print("step %d: --cp 4 loss %.8f (peak %d bytes/rank) vs one rank %.8f" % (a["step"], a["loss"], a["peak_bytes"], b["loss"]))
sys.exit(0 if ok else 1)
PY
mpi_done
