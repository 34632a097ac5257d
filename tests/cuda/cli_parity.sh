#!/usr/bin/env bash
# tests/cuda/cli_parity.sh PIPIT [DATA] — every mesh axis and model kind of
# the CLI on --device cuda against the same run on the cpu: the losses of a
# few AdamW steps must agree to rounding (1e-4 relative in f32, 4e-3 in
# bf16: the GEMMs sum in other orders, nothing else differs). Needs a GPU
# (bench/gpu.sh runs it as its "parity" phase); prints one line per
# configuration (ok / DIFFERS / FAILED with pipit's message / refused: what
# the cuda backend refuses by design, "... cpu backend only", with the
# reason) and exits 1 if any configuration differs or fails on cuda but
# not on cpu. DEVICE=cpu
# compares the cpu with itself (a check of the script, no GPU needed).
set -uo pipefail
PIPIT=${1:?usage: cli_parity.sh PIPIT [DATA]}
DATA=${2:-}
DEVICE=${DEVICE:-cuda}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pipit_cli_parity.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
if [ -z "$DATA" ]; then
    DATA=$WORK/text.txt
    python3 -c "
import random
r = random.Random(3)
w = ['the ', 'cat ', 'sat ', 'on ', 'a ', 'mat. ', 'dog ', 'ran ', 'to ', 'park, ', 'and ', 'we ', 'saw ']
open('$DATA', 'w').write(''.join(r.choice(w) for _ in range(4000)))"
fi
# name | flags (the tiny presets, 3 steps, fixed seed)
CONFIGS=(
    "gpt2 tiny|--model tiny"
    "gpt2 tiny bf16|--model tiny --dtype bf16"
    "gpt2 pp 2 1f1b|--model tiny --pp 2 --schedule 1f1b --microbatches 4"
    "gpt2 pp 2 zb-v|--model tiny --pp 2 --schedule zb-v --microbatches 4"
    "gpt2 tp 2|--model tiny --tp 2"
    "gpt2 tp 2 sp|--model tiny --tp 2 --sp"
    "gpt2 dp 2 zero 1|--model tiny --dp 2 --zero 1"
    "gpt2 dp 2 zero 3|--model tiny --dp 2 --zero 3"
    "gpt2 fused head|--model tiny --fused-head"
    "gpt2 documents|--model tiny --doc-sep 32"
    "llama tiny|--model llama-tiny"
    "llama cp 2|--model llama-tiny --cp 2"
    "llama cp 2 documents|--model llama-tiny --cp 2 --doc-sep 32"
    "moe tiny|--model moe-tiny"
    "moe tiny dp 2 ep 2|--model moe-tiny --dp 2 --ep 2"
    "moe dualpipev ep 2 pairs|--model moe-tiny --pp 2 --schedule dualpipev --dp 2 --ep 2 --microbatches 4"
    "llama recompute pointwise|--model llama-tiny --pp 2 --microbatches 2 --recompute pointwise"
    "gpt2 recompute pointwise bf16|--model tiny --recompute pointwise --dtype bf16"
    "moe tiny bf16|--model moe-tiny --dtype bf16"
)
losses() { # the per-step losses of pipit train --json, one per line
    python3 -c "
import json, sys
for l in open(sys.argv[1]):
    if l.startswith('{'):
        d = json.loads(l)
        if 'loss' in d and 'step' in d: print(repr(d['loss']))" "$1"
}
bad=0
printf '%-24s %-8s %s\n' configuration result detail
for c in "${CONFIGS[@]}"; do
    name=${c%%|*}
    read -r -a flags <<<"${c#*|}"
    tol=1e-4
    [[ " ${flags[*]} " == *" bf16 "* ]] && tol=4e-3
    for dev in cpu cuda; do
        timeout 300 "$PIPIT" train --data "$DATA" "${flags[@]}" --steps 3 --seed 5 --json \
            --device "$([ $dev = cpu ] && echo cpu || echo "$DEVICE")" >"$WORK/$dev.json" 2>"$WORK/$dev.err"
        echo $? >"$WORK/$dev.rc"
    done
    if [ "$(cat "$WORK/cpu.rc")" != 0 ]; then
        printf '%-24s %-8s %s\n' "$name" skipped "cpu refuses: $(tail -1 "$WORK/cpu.err")"
        continue
    fi
    if [ "$(cat "$WORK/cuda.rc")" != 0 ]; then
        if grep -q "cpu backend only" "$WORK/cuda.err"; then # a refusal by design, with its reason
            printf '%-24s %-8s %s\n' "$name" refused "$(tail -1 "$WORK/cuda.err")"
        else
            printf '%-24s %-8s %s\n' "$name" FAILED "$(tail -1 "$WORK/cuda.err")"
            bad=1
        fi
        continue
    fi
    verdict=$(python3 - "$tol" <(losses "$WORK/cpu.json") <(losses "$WORK/cuda.json") <<'PY'
import sys
tol = float(sys.argv[1])
a = [float(x) for x in open(sys.argv[2])]
b = [float(x) for x in open(sys.argv[3])]
if not a or len(a) != len(b):
    print("DIFFERS", f"{len(a)} cpu losses, {len(b)} cuda losses")
else:
    e = max(abs(x - y) / abs(x) for x, y in zip(a, b))
    print("ok" if e <= tol else "DIFFERS", f"losses {' '.join(f'{x:.6f}' for x in a)} (cpu); max rel. difference {e:.2g} (bound {tol:g})")
PY
)
    printf '%-24s %-8s %s\n' "$name" "${verdict%% *}" "${verdict#* }"
    [ "${verdict%% *}" = ok ] || bad=1
done
exit $bad
