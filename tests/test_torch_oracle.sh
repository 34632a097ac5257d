#!/usr/bin/env bash
# test_torch_oracle.sh — compare `pipit train` with the PyTorch oracle.
#
# Usage: bash tests/test_torch_oracle.sh <pipit binary> <source dir>
#
# Generates a small deterministic English-like text, has pipit write its
# initial GPT-2 weights (--steps 0 --save), trains 5 steps with pipit and
# with tests/gpt2_torch.py from the same weights and settings (AdamW with
# weight decay and clipping, then plain SGD), and requires every step's loss
# to agree to 1e-5 relative and every final parameter to agree to 1e-5
# relative (max |a-b| <= 1e-5 * max(1, max |torch|); at most 0.1% of a
# tensor's elements, min 1, may exceed that by up to 10x with AdamW, which
# amplifies float32 rounding where a gradient is nearly zero).  Exits 77 when
# /usr/bin/python3 cannot import torch.  Tolerances: ORACLE_LOSS_RTOL,
# ORACLE_PARAM_RTOL.  Set ORACLE_KEEP=1 to keep the work directory.
set -u

PIPIT=${1:?usage: test_torch_oracle.sh <pipit binary> <source dir>}
SRC=${2:?usage: test_torch_oracle.sh <pipit binary> <source dir>}
PY=${ORACLE_PYTHON:-/usr/bin/python3}
ORACLE="$SRC/tests/gpt2_torch.py"

if ! [ -x "$PY" ] || ! "$PY" -c 'import torch, numpy' >/dev/null 2>&1; then
    echo "SKIP: $PY cannot import torch and numpy"
    exit 77
fi
if ! [ -x "$PIPIT" ]; then
    echo "FAIL: pipit binary '$PIPIT' is not executable"
    exit 1
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/pipit_oracle.XXXXXX")
cleanup() { if [ "${ORACLE_KEEP:-0}" = 1 ]; then echo "kept $WORK"; else rm -rf "$WORK"; fi; }
trap cleanup EXIT
cd "$WORK" || exit 1

fail() { echo "FAIL: $*"; exit 1; }

# The oracle checks itself first (model vs naive einsum, AdamW, I/O).
"$PY" "$ORACLE" --selftest > selftest.log 2>&1 || { cat selftest.log; fail "oracle selftest"; }

# Deterministic English-like text (~6 KB) from a fixed LCG over a word list.
"$PY" - <<'EOF' || fail "cannot write data"
words = ("the of and to in is was that for it with as on be at by this had not are but from "
         "or have an they which one you were her all she there would their we him been has "
         "when who will more no if out so said what up its about into than them can only "
         "other new some could time these two may then do first any my now such like our "
         "over man me even most made after also did many before must through back years "
         "where much your way well down should because each just those people how too little "
         "state good very make world still own see men work long get here between both life "
         "being under never day same another know while last might us great old year off "
         "come since against go came right used take three pipeline stage gradient").split()
state = 12345
def rnd(n):
    global state
    state = (state * 1103515245 + 12345) % 2147483648
    return (state >> 16) % n
out, line = [], []
while sum(len(s) + 1 for s in out) < 6000:
    n = 4 + rnd(10)
    sent = " ".join(words[rnd(len(words))] for _ in range(n))
    sent = sent[0].upper() + sent[1:] + (". " if rnd(5) else ", ")
    out.append(sent + ("\n" if rnd(4) == 0 else ""))
with open("data.txt", "w") as f:
    f.write("".join(out))
EOF

MODEL=(--ctx 16 --layers 2 --heads 2 --dim 32 --micro-batch 2 --microbatches 2)

"$PIPIT" train --data data.txt "${MODEL[@]}" --steps 0 --save-weights-only --save init.safetensors --seed 1 \
    --data-order sequential > init.log 2>&1 || { cat init.log; fail "pipit could not write initial weights"; }
[ -s init.safetensors ] || fail "pipit wrote no init.safetensors"

# compare <name> <pipit stdout> <torch stdout> <pipit params> <torch params>
compare() {
    "$PY" - "$@" <<'EOF'
import json, os, sys
import numpy as np
sys.path.insert(0, os.path.dirname(os.environ["ORACLE"]))
from gpt2_torch import load_safetensors

name, plog, tlog, pfile, tfile = sys.argv[1:6]
loss_rtol = float(os.environ.get("ORACLE_LOSS_RTOL", "1e-5"))
param_rtol = float(os.environ.get("ORACLE_PARAM_RTOL", "1e-5"))

def losses(path):
    out = {}
    for line in open(path, errors="replace"):
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if "step" in rec and "loss" in rec:
            out[int(rec["step"])] = float(rec["loss"])
    return out

pl, tl = losses(plog), losses(tlog)
bad = 0
if sorted(pl) != sorted(tl) or not tl:
    print(f"[{name}] steps differ: pipit {sorted(pl)} torch {sorted(tl)}")
    bad += 1
for s in sorted(set(pl) & set(tl)):
    a, b = pl[s], tl[s]
    rel = abs(a - b) / max(abs(b), 1e-30)
    ok = rel <= loss_rtol
    print(f"[{name}] step {s}: pipit {a:.9g} torch {b:.9g} rel {rel:.2e} {'ok' if ok else 'MISMATCH'}")
    bad += not ok

pp, _ = load_safetensors(pfile)
tp, _ = load_safetensors(tfile)
if set(pp) != set(tp):
    print(f"[{name}] tensor names differ: only pipit {sorted(set(pp) - set(tp))[:5]}, "
          f"only torch {sorted(set(tp) - set(pp))[:5]}")
    bad += 1
worst = (0.0, None)
first = True
for n in tp:
    if n not in pp:
        continue
    a, b = pp[n].astype(np.float64), tp[n].astype(np.float64)
    if a.shape != b.shape:
        print(f"[{name}] {n}: shape pipit {a.shape} torch {b.shape}")
        bad += 1
        continue
    diff = np.abs(a - b)
    md = float(diff.max()) if diff.size else 0.0
    if not np.all(np.isfinite(a)):
        md = float("inf")
    scale = max(1.0, float(np.abs(b).max()) if b.size else 0.0)
    if md / scale > worst[0]:
        worst = (md / scale, n)
    tol = param_rtol * scale
    nover = int((diff > tol).sum()) + int((~np.isfinite(a)).sum())
    if nover and name == "adamw" and nover <= max(1, diff.size // 1000) and md <= 10 * tol:
        # AdamW divides by sqrt(v): an element whose gradient is nearly zero
        # (cancellation) amplifies float32 rounding; a few such are tolerated.
        i = np.unravel_index(int(np.argmax(diff)), a.shape)
        print(f"[{name}] note: {n}: {nover} element(s) over {tol:.1e}, worst at "
              f"{tuple(int(k) for k in i)}: pipit {a[i]:.9g} torch {b[i]:.9g} diff {md:.3e} (allowed <= 10x)")
    elif nover:
        bad += 1
        if first:
            i = np.unravel_index(int(np.nanargmax(np.where(np.isfinite(diff), diff, np.inf))), a.shape)
            print(f"[{name}] first differing tensor {n} at index {tuple(int(k) for k in i)}: "
                  f"pipit {a[i]:.9g} torch {b[i]:.9g}, max diff {md:.3e} (limit {param_rtol * scale:.3e})")
            first = False
        else:
            print(f"[{name}] also differs: {n} max diff {md:.3e}")
print(f"[{name}] {len(tp)} tensors, worst relative param diff {worst[0]:.3e} ({worst[1]})")
print(f"[{name}] {'PASS' if not bad else 'FAIL'}")
sys.exit(1 if bad else 0)
EOF
}
export ORACLE

status=0
run_case() {
    local name=$1; shift
    "$PIPIT" train --init init.safetensors --data data.txt "${MODEL[@]}" --steps 5 \
        --data-order sequential --json --save-weights-only --save "pipit_$name.safetensors" "$@" \
        > "pipit_$name.log" 2> "pipit_$name.err" \
        || { cat "pipit_$name.log" "pipit_$name.err"; echo "FAIL: pipit train ($name)"; status=1; return; }
    "$PY" "$ORACLE" --init init.safetensors --data data.txt --ctx 16 --heads 2 \
        --micro-batch 2 --microbatches 2 --steps 5 --threads 1 --json \
        --save "torch_$name.safetensors" "$@" > "torch_$name.log" 2>&1 \
        || { cat "torch_$name.log"; echo "FAIL: torch oracle ($name)"; status=1; return; }
    compare "$name" "pipit_$name.log" "torch_$name.log" \
        "pipit_$name.safetensors" "torch_$name.safetensors" || status=1
}

run_case adamw --lr 1e-3 --weight-decay 0.1 --clip 1.0
run_case sgd --optimizer sgd --lr 0.1 --clip 1.0

[ $status = 0 ] && echo "PASS: pipit matches the PyTorch oracle" || echo "FAIL: pipit differs from the PyTorch oracle"
exit $status
