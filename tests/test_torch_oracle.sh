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
"$PY" "$SRC/tests/oracle_text.py" || fail "cannot write data"

MODEL=(--ctx 16 --layers 2 --heads 2 --dim 32 --micro-batch 2 --microbatches 2)

"$PIPIT" train --data data.txt "${MODEL[@]}" --steps 0 --save-weights-only --save init.safetensors --seed 1 \
    --data-order sequential > init.log 2>&1 || { cat init.log; fail "pipit could not write initial weights"; }
[ -s init.safetensors ] || fail "pipit wrote no init.safetensors"

# compare <name> <pipit stdout> <torch stdout> <pipit params> <torch params>
compare() { "$PY" "$SRC/tests/oracle_compare.py" "$@"; }

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
