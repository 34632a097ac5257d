#!/usr/bin/env bash
# test_cli.sh — the `pipit` command line end to end: every bad input (flags,
# values, data files, checkpoints) exits non-zero with a message naming the
# problem and never crashes; --help works; a checkpoint written by train
# (atomically) evaluates to ~ln(256) at init and round-trips through eval
# and train --init; --json output parses. Usage: test_cli.sh PIPIT SRCDIR
set -u

source "$(dirname "$0")/cli_lib.sh"
cli_setup cli "${1:-}"

# ---- data: deterministic English-like text (bytes 32..122)
$PY - <<'EOF' || { echo "cannot write test data"; exit 1; }
import random
r = random.Random(7)
words = ["the ", "cat ", "sat ", "on ", "a ", "mat. ", "dog ", "ran ", "to ", "park, ", "and ", "we ", "saw "]
open("text.txt", "w").write("".join(r.choice(words) for _ in range(3000)))
open("short.txt", "w").write("abc")
EOF

MODEL=(--ctx 16 --layers 1 --heads 2 --dim 32 --micro-batch 2)
TRAIN=("$PIPIT" train --data text.txt "${MODEL[@]}")
EVAL=("$PIPIT" eval --data text.txt --ctx 16 --micro-batch 2 --batches 2)

# ---- help
expect_ok "$PIPIT" --help && grep -q "train" <<<"$OUT" || fail "pipit --help does not list train"
expect_ok "$PIPIT" train --help && grep -q -- "--micro-batch" <<<"$OUT" || fail "train --help lacks --micro-batch"
expect_ok "$PIPIT" eval --help && grep -q -- "--init" <<<"$OUT" || fail "eval --help lacks --init"
expect_fail "unknown command" "$PIPIT" frobnicate
expect_fail "usage" "$PIPIT"

# ---- flags
expect_fail "unknown flag" "${TRAIN[@]}" --steps 1 --bogus
expect_fail "bogus" "${TRAIN[@]}" --steps 1 --bogus
expect_fail "bad value" "${TRAIN[@]}" --steps abc
# ---- size limits (docs/ops.md "Limits")
expect_fail "--microbatches must be at most 16777216" "${TRAIN[@]}" --steps 1 --microbatches 1073741824
expect_fail "--threads must be at most 256" "${TRAIN[@]}" --steps 1 --threads 100000
expect_fail "bad value" "${TRAIN[@]}" --steps 12abc
expect_fail "bad value" "${TRAIN[@]}" --steps 1 --lr fast
expect_fail "bad value" "${TRAIN[@]}" --steps 1 --seed -3
expect_fail "needs a value" "${TRAIN[@]}" --steps
expect_fail "--steps is required" "${TRAIN[@]}"
expect_fail "--data is required" "$PIPIT" train "${MODEL[@]}" --steps 1
expect_fail "--init is required" "$PIPIT" eval --data text.txt --ctx 16 --micro-batch 2 --batches 1
expect_fail "--steps must be" "${TRAIN[@]}" --steps -1
expect_fail "--ctx must be" "$PIPIT" train --data text.txt --ctx 0 --layers 1 --heads 2 --dim 32 --micro-batch 2 --steps 1
expect_fail "divisible" "$PIPIT" train --data text.txt --ctx 16 --layers 1 --heads 3 --dim 32 --micro-batch 2 --steps 1
expect_fail "optimizer" "${TRAIN[@]}" --steps 1 --optimizer lion
expect_fail "data-order" "${TRAIN[@]}" --steps 1 --data-order backwards

# ---- data files
expect_fail "nope.txt" "$PIPIT" train --data nope.txt "${MODEL[@]}" --steps 1
expect_fail "cannot open" "$PIPIT" train --data nope.txt "${MODEL[@]}" --steps 1
expect_fail "too short" "$PIPIT" train --data short.txt "${MODEL[@]}" --steps 1
expect_fail "raise --vocab" "${TRAIN[@]}" --steps 1 --vocab 50
expect_fail "vocabulary has 50" "${TRAIN[@]}" --steps 1 --vocab 50

# ---- checkpoints: initial weights, eval at init
expect_ok "${TRAIN[@]}" --steps 0 --save init.st
[ -s init.st ] || fail "train --steps 0 --save wrote no file"
expect_ok "${EVAL[@]}" --init init.st --json
INIT_JSON=$OUT
$PY - "$INIT_JSON" <<'EOF' || fail "eval at init: bad JSON or loss not near ln(256): $INIT_JSON"
import json, math, sys
lines = [l for l in sys.argv[1].splitlines() if l.strip()]
assert len(lines) == 1, lines
d = json.loads(lines[0])
assert set(d) == {"loss", "tokens"}, d
assert d["tokens"] == 2 * 16 * 2, d
assert abs(d["loss"] - math.log(256)) < 0.1, d
EOF

# ---- train, save, eval agrees with the training loss on the same windows
expect_ok "${TRAIN[@]}" --steps 8 --lr 3e-3 --data-order sequential --json --save-weights-only --save trained.st
TRAIN_JSON=$OUT
$PY -c 'import json,sys; [json.loads(l) for l in sys.stdin]' <<<"$TRAIN_JSON" ||
    fail "train --json output is not JSON lines: $TRAIN_JSON"
$PY - "$TRAIN_JSON" <<'EOF' || fail "train --json lines lack fields or steps: $TRAIN_JSON"
import json, math, sys
rows = [json.loads(l) for l in sys.argv[1].splitlines()]
assert [r["step"] for r in rows] == list(range(8)), rows
for r in rows:
    for k in ("loss", "ms", "tokens_per_s", "grad_norm", "gflops", "peak_bytes"):
        assert k in r, (k, r)
    assert math.isfinite(r["loss"]) and r["grad_norm"] > 0
assert abs(rows[0]["loss"] - math.log(256)) < 0.1, rows[0]
EOF
ls ./*.tmp.* >/dev/null 2>&1 && fail "--save left temporary files: $(ls ./*.tmp.*)"
expect_ok "${EVAL[@]}" --init trained.st --json
TRAINED_JSON=$OUT
# one train step with lr 0 on sequences 0..3 computes the same loss as eval
# over batches 0 and 1 (sequences 0..3, sequential windows)
expect_ok "$PIPIT" train --init trained.st --data text.txt --ctx 16 --micro-batch 2 --microbatches 2 \
    --steps 1 --lr 0 --data-order sequential --json --save-weights-only --save again.st
AGAIN_JSON=$OUT
$PY - "$INIT_JSON" "$TRAINED_JSON" "$AGAIN_JSON" <<'EOF' || fail "train/eval disagree: init $INIT_JSON trained $TRAINED_JSON lr0 $AGAIN_JSON"
import json, sys
init, trained, again = (json.loads(a.splitlines()[-1]) for a in sys.argv[1:])
assert trained["loss"] < init["loss"] - 0.2, (init, trained)  # training helped
assert abs(again["loss"] - trained["loss"]) <= 1e-5 * trained["loss"], (again, trained)
EOF
# lr 0: the weights written back are the weights read
cmp -s trained.st again.st || fail "train --init X --lr 0 --save Y changed the weights (X != Y)"
ls ./*.tmp.* >/dev/null 2>&1 && fail "--save left temporary files: $(ls ./*.tmp.*)"

# ---- malformed checkpoints
head -c 20 init.st >trunc.st
expect_fail "trunc.st" "${EVAL[@]}" --init trunc.st
expect_fail "larger than the file" "${EVAL[@]}" --init trunc.st
head -c $(($(wc -c <init.st) - 100)) init.st >cut.st
expect_fail "cut.st" "${EVAL[@]}" --init cut.st
$PY - <<'EOF'
import struct
h = b'{"wte.weight": {oops'
open("garbage.st", "wb").write(struct.pack("<Q", len(h)) + h)
open("empty.st", "wb").write(b"")
EOF
expect_fail "JSON" "${EVAL[@]}" --init garbage.st
expect_fail "empty.st" "${EVAL[@]}" --init empty.st
expect_fail "missing.st" "${EVAL[@]}" --init missing.st
# explicit flag that disagrees with the file's shapes
expect_fail "disagrees" "$PIPIT" train --init init.st --dim 16 --data text.txt --ctx 16 --micro-batch 2 --steps 1
expect_fail "disagrees" "$PIPIT" train --init init.st --layers 2 --data text.txt --ctx 16 --micro-batch 2 --steps 1
# ctx beyond the checkpoint's wpe rows: names the file's wpe rows, not a
# --max-ctx the user never gave
expect_fail "'wpe.weight' has 16 rows" "$PIPIT" eval --init init.st --data text.txt --ctx 32 --micro-batch 2 --batches 1
out=$("$PIPIT" eval --init init.st --data text.txt --ctx 32 --micro-batch 2 --batches 1 2>&1)
grep -q -- "--max-ctx" <<<"$out" && fail "--ctx beyond wpe blames --max-ctx: $out"
expect_fail "--max-ctx 8 is smaller than --ctx 16" "$PIPIT" train --data text.txt "${MODEL[@]}" --max-ctx 8 --steps 1

# hand-written checkpoints: GPT-2 pieces missing, or one tensor's shape wrong
$PY - <<'EOF'
import json, struct

def write(path, tensors, meta):
    hdr, data, off = {}, b"", 0
    for name, (shape, vals) in tensors.items():
        b = struct.pack("<%df" % len(vals), *vals)
        hdr[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + len(b)]}
        off += len(b)
        data += b
    hdr["__metadata__"] = meta
    h = json.dumps(hdr).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + data)

def read(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    hdr = json.loads(raw[8:8 + n])
    # what is written back is no longer the file pipit wrote: without its checksums
    meta = {k: v for k, v in hdr.pop("__metadata__", {}).items() if not k.startswith("crc32c")}
    out = {}
    for name, t in hdr.items():
        a, b = t["data_offsets"]
        blob = raw[8 + n + a:8 + n + b]
        out[name] = (t["shape"], list(struct.unpack("<%df" % (len(blob) // 4), blob)))
    return out, meta

z = lambda n: [0.0] * n
write("wtewpe.st", {"wte.weight": ([256, 32], z(256 * 32)), "wpe.weight": ([16, 32], z(16 * 32))}, {"heads": "2"})
t, meta = read("init.st")
del t["h.0.mlp.c_fc.bias"]
write("nobias.st", t, meta)
t, meta = read("init.st")
shape, vals = t["h.0.mlp.c_fc.weight"]
t["h.0.mlp.c_fc.weight"] = ([shape[1], shape[0]], vals)  # same bytes, transposed shape
write("badshape.st", t, meta)
t, meta = read("init.st")
del meta["heads"]
write("noheads.st", t, meta)
t, meta = read("init.st")
write("roundtrip.st", t, meta)
for i, bad in enumerate(["abc", "2x", " 2", "+2", "-2", "0", "99999999999999999999"]):
    t, meta = read("init.st")
    meta["heads"] = bad
    write("heads_%d.st" % i, t, meta)
EOF
for i in 0 1 2 3 4 5 6; do
    expect_fail "checkpoint 'heads_$i.st': metadata 'heads'" "${EVAL[@]}" --init heads_$i.st
done
expect_fail "missing" "${EVAL[@]}" --init wtewpe.st
expect_fail "h.0.mlp.c_fc.bias" "${EVAL[@]}" --init nobias.st
expect_fail "missing" "${EVAL[@]}" --init nobias.st
expect_fail "h.0.mlp.c_fc.weight" "${EVAL[@]}" --init badshape.st
expect_fail "expected \[32,128\]" "${EVAL[@]}" --init badshape.st
expect_fail "--heads" "${EVAL[@]}" --init noheads.st
expect_ok "${EVAL[@]}" --init noheads.st --heads 2 --json
expect_fail "disagrees" "${EVAL[@]}" --init init.st --heads 4
expect_ok "${EVAL[@]}" --init init.st --heads 2
# a checkpoint re-encoded by an independent writer loads to the same loss
# (without pipit's checksums: loaded with a note saying so)
expect_ok "${EVAL[@]}" --init roundtrip.st --json
[ "${OUT##*$'\n'}" = "$INIT_JSON" ] || fail "re-encoded checkpoint evaluates differently: $OUT vs $INIT_JSON"
grep -q "note: --init 'roundtrip.st' carries no checksums" <<<"$OUT" || fail "no note on a file without checksums: $OUT"
# vocab of the checkpoint too small for the data
$PY - <<'EOF'
import struct
open("lowbytes.txt", "wb").write(bytes((i * 7) % 40 + 10 for i in range(2000)))
EOF
expect_ok "$PIPIT" train --data lowbytes.txt --vocab 50 "${MODEL[@]}" --steps 0 --save v50.st
expect_fail "raise --vocab" "${EVAL[@]}" --init v50.st
expect_ok "$PIPIT" eval --init v50.st --data lowbytes.txt --ctx 16 --micro-batch 2 --batches 1 --json

# ---- pipelines: a built-in schedule exported and fed back
PTRAIN=("$PIPIT" train --data text.txt --ctx 16 --layers 2 --heads 2 --dim 32 --micro-batch 2)
expect_ok "$PIPIT" schedule --schedule 1f1b --pp 2 --microbatches 2 --format file
printf '%s\n' "$OUT" > exported.sched
expect_ok "${PTRAIN[@]}" --steps 2 --microbatches 2 --schedule exported.sched --json
FILE_JSON=$OUT
expect_ok "${PTRAIN[@]}" --steps 2 --microbatches 2 --pp 2 --schedule 1f1b --json
LOSS_FILE=$(printf '%s\n' "$FILE_JSON" | $PY -c 'import sys,json; print([json.loads(l)["loss"] for l in sys.stdin])')
LOSS_BUILTIN=$(printf '%s\n' "$OUT" | $PY -c 'import sys,json; print([json.loads(l)["loss"] for l in sys.stdin])')
[ "$LOSS_FILE" = "$LOSS_BUILTIN" ] || fail "schedule file and built-in give different losses: $LOSS_FILE vs $LOSS_BUILTIN"
expect_fail "written for 2 microbatches" "${PTRAIN[@]}" --steps 1 --microbatches 3 --schedule exported.sched
expect_fail "has 2 ranks" "${PTRAIN[@]}" --steps 1 --microbatches 2 --schedule exported.sched --pp 3
printf 'stages: 0 1\nF0.0 F0.1 BW0.0 BW0.1\nF1.0 F1.1 BW1.1 BW1.0\n' > broken.sched
expect_fail "BW1" "${PTRAIN[@]}" --steps 1 --microbatches 2 --schedule broken.sched
expect_fail "unknown" "$PIPIT" schedule --schedule 1f1b --pp 2 --microbatches 2 --bogus 1
expect_fail "needs M" "$PIPIT" schedule --schedule dualpipev --pp 2 --microbatches 2
# the zero-bubble family by name: grids with the papers' peaks, constraints, a real step
expect_ok "$PIPIT" schedule --schedule zb-h2 --pp 4 --microbatches 8
grep -q "rank 0: busy 24, bubble 11.1%, peak live 7 (stage, microbatch) activations$" <<<"$OUT" || fail "zb-h2 P=4 M=8: rank 0 should hold 2P-1 = 7: $OUT"
expect_ok "$PIPIT" schedule --schedule zb-v --pp 4 --microbatches 8
grep -q "step time 51, bubble 5.9%" <<<"$OUT" || fail "zb-v P=4 M=8: step (P-1) + 6M = 51: $OUT"
expect_fail "zb-v needs V=2" "$PIPIT" schedule --schedule zb-v --pp 2 --virtual 3 --microbatches 4
expect_fail "interleaved-zb needs V >= 2" "$PIPIT" schedule --schedule interleaved-zb --pp 2 --virtual 1 --microbatches 4
expect_fail "multiple of its number of rounds" "$PIPIT" schedule --schedule interleaved-zb --pp 4 --microbatches 9
# controllable memory (the fork's unit-cost makespans 53 and 59 at P=4 M=8; in flight (P+2)/2 = 3 and (P+4)/3 = 2)
expect_ok "$PIPIT" schedule --schedule v-half --pp 4 --microbatches 8
grep -q "step time 53, bubble 9.4%" <<<"$OUT" || fail "v-half P=4 M=8: the fork's step is 53: $OUT"
grep -q "^peak in flight per rank (live activations / V=2, in microbatches): 3 3 3 3$" <<<"$OUT" || fail "v-half P=4: 3 in flight: $OUT"
expect_ok "$PIPIT" schedule --schedule v-min --pp 4 --microbatches 8
grep -q "step time 59, bubble 18.6%" <<<"$OUT" || fail "v-min P=4 M=8: the fork's step is 59: $OUT"
grep -q "^peak in flight per rank (live activations / V=2, in microbatches): 2 2 2 2$" <<<"$OUT" || fail "v-min P=4: 2 in flight: $OUT"
expect_fail "v-min needs V=2" "$PIPIT" schedule --schedule v-min --pp 2 --virtual 1 --microbatches 4
for sched in zb-h2 zb-v interleaved-zb v-half v-min; do
    expect_ok "$PIPIT" train --data text.txt --ctx 16 --layers 4 --heads 2 --dim 32 --micro-batch 2 \
        --pp 2 --schedule "$sched" --microbatches 4 --steps 2
    grep -q "^step    1  loss" <<<"$OUT" || fail "$sched trains no second step: $OUT"
done
expect_ok "$PIPIT" plan --data text.txt --ctx 16 --layers 2 --heads 2 --dim 32 --micro-batch 2 --microbatches 2 --pp 2 --schedule zb-h1
printf '%s\n' "$OUT" | grep -q "planned peak activations" || fail "pipit plan prints no planned memory"
# one flag parser for every command: --flag=value works for schedule as for train and eval
expect_ok "$PIPIT" schedule --schedule=1f1b --pp=2 --microbatches=4
printf '%s\n' "$OUT" | grep -q "rank 1" || fail "schedule --pp=2 prints no grid for rank 1"
expect_ok "$PIPIT" schedule --schedule 1f1b --pp=2 --microbatches 2 --format=file
[ "$OUT" = "$(cat exported.sched)" ] || fail "schedule --pp=2 --format=file differs from --pp 2 --format file"
expect_fail "bad value" "$PIPIT" schedule --schedule 1f1b --pp=two --microbatches 2
expect_fail "needs a value" "$PIPIT" schedule --schedule 1f1b --microbatches 2 --pp
expect_fail "unknown flag" "$PIPIT" eval --ctx=4 --bogus=1
# plan --json is real JSON, one entry per rank; plan --help is plan's own
expect_ok "$PIPIT" plan --data text.txt --ctx 16 --layers 2 --heads 2 --dim 32 --micro-batch 2 --microbatches 2 --pp 2 --json
printf '%s\n' "$OUT" | $PY -m json.tool >/dev/null || fail "plan --json is not JSON: $OUT"
printf '%s\n' "$OUT" | $PY -c 'import json,sys; d=json.load(sys.stdin); assert len(d["ranks"]) == 2 and all(r["arena_bytes"] > 0 for r in d["ranks"]), d' ||
    fail "plan --json: expected 2 ranks with arena_bytes"
expect_ok "$PIPIT" plan --help
grep -q "usage: pipit plan" <<<"$OUT" || fail "plan --help does not describe plan: $OUT"
grep -q -- "--verbose" <<<"$OUT" || fail "plan --help lacks --verbose"
# plan takes a train command line as is (train-only flags are accepted and ignored)
expect_ok "$PIPIT" plan --data text.txt --ctx 16 --layers 2 --heads 2 --dim 32 --micro-batch 2 --steps 3 --lr 1e-3
expect_fail "unknown flag" "$PIPIT" plan --data text.txt --ctx 16 --layers 2 --heads 2 --dim 32 --micro-batch 2 --bogus

# ---- resume: 2 steps + 2 resumed steps == 4 steps, byte for byte, also
# when the second half runs on another pipeline layout
RT=("${PTRAIN[@]}" --microbatches 2 --lr 1e-3 --seed 5 --data-order random)
expect_ok "${RT[@]}" --steps 4 --save-weights-only --save full.st
expect_ok "${RT[@]}" --steps 2 --save half.st --save-optimizer half.opt
expect_ok "${RT[@]}" --steps 2 --init half.st --init-optimizer half.opt --save-weights-only --save resumed.st
cmp -s full.st resumed.st || fail "resumed training differs from uninterrupted training"
expect_ok "${RT[@]}" --steps 2 --init half.st --init-optimizer half.opt --save-weights-only --save resumed_pp.st --pp 2 --schedule zb-h1
cmp -s full.st resumed_pp.st || fail "resumed on 2 ranks differs from uninterrupted training"
expect_fail "needs --init" "${RT[@]}" --steps 1 --init-optimizer half.opt
expect_fail "optimizer state 'half.st'" "${RT[@]}" --steps 1 --init half.st --init-optimizer half.st
[ -z "$(ls ./*.tmp.* 2>/dev/null)" ] || fail "temporary files left behind"

# ---- timelines: a Chrome trace (JSON) and SVG pictures, simulated and measured
expect_ok "${PTRAIN[@]}" --steps 1 --microbatches 2 --pp 2 --schedule 1f1b --trace step.json
$PY -c 'import json,sys; d=json.load(open("step.json")); assert sum(e["ph"]=="X" for e in d["traceEvents"]) == 8' ||
    fail "trace: expected 8 task slices (2 ranks x 4 tasks)"
expect_ok "${PTRAIN[@]}" --steps 1 --microbatches 2 --pp 2 --schedule 1f1b --trace step.svg
[ "$(grep -c '<rect' step.svg)" -ge 8 ] || fail "SVG timeline lacks task boxes"
expect_ok "$PIPIT" schedule --schedule zb-h1 --pp 2 --microbatches 4 --format svg
[ "$(printf '%s' "$OUT" | grep -c "<title>")" -eq 24 ] || fail "simulated SVG: expected 24 task boxes (F, B and W of 2 stages x 4 microbatches)"

# a schedule name that is neither built in nor a file lists the names
expect_fail "unknown schedule 'zbh1'" "$PIPIT" schedule --schedule zbh1 --pp 2 --microbatches 4
expect_fail "gpipe, 1f1b, eager-1f1b" "$PIPIT" schedule --schedule zbh1 --pp 2 --microbatches 4
expect_fail "or a schedule file" "${PTRAIN[@]}" --steps 1 --microbatches 2 --pp 2 --schedule zbh1
# an SVG title holding a path with XML's special characters stays well-formed
SDIR="a&b<c>'\"d"
mkdir -p "$SDIR" && "$PIPIT" schedule --schedule 1f1b --pp 2 --microbatches 4 --format file >"$SDIR/s&<.txt" ||
    fail "schedule --format file"
"$PIPIT" schedule --schedule "$SDIR/s&<.txt" --format svg >amp.svg 2>&1 || fail "svg of a schedule file: $(cat amp.svg)"
$PY -c "import xml.dom.minidom,sys; xml.dom.minidom.parse(sys.argv[1])" amp.svg || fail "SVG with '&<' in its title does not parse"
grep -q "s&amp;&lt;.txt" amp.svg || fail "SVG title lacks the escaped path"
"$PIPIT" schedule --schedule 1f1b --pp 2 --microbatches 4 --format svg >plain.svg &&
    $PY -c "import xml.dom.minidom,sys; xml.dom.minidom.parse(sys.argv[1])" plain.svg || fail "plain SVG does not parse"
# finite costs whose simulated sums overflow: an error naming the costs
expect_fail "costs are too large" "$PIPIT" schedule --schedule 1f1b --pp 2 --microbatches 2 --costs 1e308,1e308,1e308
# plurals: a schedule file written for one microbatch
"$PIPIT" schedule --schedule 1f1b --pp 2 --microbatches 1 --format file >one.sched || fail "one.sched"
expect_fail "for 1 microbatch, but" "${PTRAIN[@]}" --steps 1 --microbatches 2 --schedule one.sched

# ---- --fused-head (the fused LM head + cross-entropy, default off): the
# same training as the matmul head on the tiny preset, per step within 1e-6
# (f32) and one bf16 unit 2^-8 (bf16; measured ~4e-5 on the AVX2 EPYC), a
# smaller planned f32 arena than without it (the [B*T, V] logits never
# stored), kept by --resume (a contradicting flag refused), and eval of a
# checkpoint with either head agrees within 1e-6
# (also where the planner writes the head's dW into the accumulator: the
# tied GPT-2 and the untied llama-tiny on 2 x 2 ranks, 2 microbatches)
for hc in "f32" "bf16" "f32 --pp 2 --tp 2 --microbatches 2" "f32 --model llama-tiny --pp 2 --tp 2 --microbatches 2"; do
    # shellcheck disable=SC2206
    hv=($hc)
    HT=("$PIPIT" train --data text.txt --steps 4 --data-order sequential --dtype "${hv[@]}" --json)
    expect_ok "${HT[@]}" && H0=$OUT
    expect_ok "${HT[@]}" --fused-head && H1=$OUT
    $PY - "$H0" "$H1" "${hv[0]}" <<'EOF' || fail "--fused-head --dtype $hc trains otherwise than the matmul head: $H0 vs $H1"
import json, sys
a, b = ([json.loads(l)["loss"] for l in x.splitlines() if l.startswith('{"step"')] for x in sys.argv[1:3])
tol = 1e-6 if sys.argv[3] == "f32" else 2.0**-8
assert len(a) == len(b) == 4, (a, b)
for x, y in zip(a, b):
    assert abs(x - y) <= tol * abs(x), (sys.argv[3], a, b)
EOF
done
arena() { # arena ARGS...: rank 0's planned activation arena (bytes)
    "$PIPIT" plan --data text.txt "$@" --json | $PY -c 'import json,sys; d=json.load(sys.stdin); print(d["ranks"][0]["arena_bytes"])'
}
# (the tiny preset at vocab 4096: at least the f32 logits, B*T*V*4 bytes, saved)
A0=$(arena --vocab 4096) A1=$(arena --vocab 4096 --fused-head)
[ -n "$A0" ] && [ -n "$A1" ] && [ $((A0 - A1)) -ge $((8 * 64 * 4096 * 4)) ] ||
    fail "plan --fused-head: arena $A1 bytes, not one [B*T, V] f32 logits below the matmul head's $A0"
expect_ok "$PIPIT" train --data text.txt --steps 2 --fused-head --save fh.st
expect_ok "$PIPIT" train --resume fh.st --steps 3 --print-config
grep -q '"fused-head":true' <<<"$OUT" || fail "--resume does not keep --fused-head: $OUT"
expect_ok "$PIPIT" train --data text.txt --steps 2 --save mh.st
expect_fail "--fused-head 1 contradicts checkpoint 'mh.st' (fused_head 0)" "$PIPIT" train --resume mh.st --steps 3 --fused-head
expect_ok "$PIPIT" eval --init fh.st --data text.txt --batches 2 --json && E0=$OUT
expect_ok "$PIPIT" eval --init fh.st --data text.txt --batches 2 --json --fused-head && E1=$OUT
$PY - "$E0" "$E1" <<'EOF' || fail "eval --fused-head differs from eval: $E0 vs $E1"
import json, sys
a, b = (json.loads(x.splitlines()[-1])["loss"] for x in sys.argv[1:3])
assert abs(a - b) <= 1e-6 * abs(a), (a, b)
EOF

# ---- save to an unwritable place fails cleanly
expect_fail "no-such-dir" "${TRAIN[@]}" --steps 0 --save "$TMP/no-such-dir/x.st"

if [ "$failures" -ne 0 ]; then
    echo "test_cli: $failures failure(s)" >&2
    exit 1
fi
echo "test_cli: ok"
exit 0
