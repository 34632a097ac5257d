#!/usr/bin/env bash
# test_cli_refuses.sh — every number checked where it enters (docs/refuses.md):
# a table of bad command lines, config files, hardware files and profiles,
# each of which must end with a non-zero exit (below 128: no crash), a
# message naming the flag or the field, and no sanitizer report (the table
# runs under ASan+UBSan in the sanitizer build, where an undefined
# conversion, a leak or a NULL qsort is an error). Then what pipit writes
# it reads: a calibrated description is read back, and a profile that would
# give an unusable one is refused without leaving a file.
# Usage: test_cli_refuses.sh PIPIT SRCDIR
set -u

CLI_FIXED=1
source "$(dirname "$0")/cli_lib.sh"
cli_setup cli_refuses "${1:-}"

head -c 100000 "${2:?usage: test_cli_refuses.sh PIPIT SRCDIR}/README.md" >text.txt

# refuses WORDS CMD...: exit in 1..127, the output names WORDS, no sanitizer report
refuses() {
    local words=$1 out rc
    shift
    out=$("$@" 2>&1)
    rc=$?
    if [ "$rc" -eq 0 ]; then
        fail "accepted (exit 0): $*"$'\n'"  $(head -c 300 <<<"$out")"
    elif [ "$rc" -ge 128 ]; then
        fail "crashed (exit $rc): $*"$'\n'"$out"
    elif grep -qE 'runtime error:|ERROR: (Address|Leak|Undefined)Sanitizer' <<<"$out"; then
        fail "sanitizer report: $*"$'\n'"$out"
    elif ! grep -qiF -- "$words" <<<"$out"; then
        fail "message lacks '$words': $*"$'\n'"  got: $out"
    fi
}

# A hardware description with one key replaced: hw KEY VALUE > file
hw() {
    $PY - "$1" "$2" <<'EOF'
import json, sys
d = {"name": "t", "peak_flops": {"fp32": 1e12}, "train_dtype": "fp32", "gemm_efficiency": [[64, 0.5], [1024, 0.9]],
     "mem_bandwidth": 1e11, "mem_capacity": 1e10, "gpus_per_node": 8,
     "intra_node": {"bandwidth": 1e11, "latency": 1e-6}, "inter_node": {"bandwidth": 1e10, "latency": 1e-5}}
key, val = sys.argv[1], sys.argv[2]
text = json.dumps(d)
if key:
    text = text.replace('"%s": %s' % (key, json.dumps(d[key])), '"%s": %s' % (key, val), 1)
print(text)
EOF
}
SIM=(sim --layers 4 --hidden 64 --heads 4 --seq 64 --vocab 128 --global-batch 8)
hw "" "" > ok_hw.json
expect_ok "$PIPIT" "${SIM[@]}" --hw ok_hw.json

# ---- hardware files
hw gpus_per_node 9e15 > t.json;         refuses '"gpus_per_node" must be a whole number' "$PIPIT" "${SIM[@]}" --hw t.json
hw gpus_per_node -1 > t.json;           refuses '"gpus_per_node"' "$PIPIT" "${SIM[@]}" --hw t.json
hw gpus_per_node 2.5 > t.json;          refuses '"gpus_per_node"' "$PIPIT" "${SIM[@]}" --hw t.json
hw gemm_efficiency '[[1e999, 0.5]]' > t.json; refuses '"gemm_efficiency"' "$PIPIT" "${SIM[@]}" --hw t.json
hw gemm_efficiency '[[64, 0]]' > t.json;      refuses '"gemm_efficiency"' "$PIPIT" "${SIM[@]}" --hw t.json
hw mem_bandwidth 0 > t.json;            refuses '"mem_bandwidth"' "$PIPIT" "${SIM[@]}" --hw t.json
hw mem_bandwidth 1e999 > t.json;        refuses '"mem_bandwidth"' "$PIPIT" "${SIM[@]}" --hw t.json
hw mem_capacity -5 > t.json;            refuses '"mem_capacity"' "$PIPIT" "${SIM[@]}" --hw t.json
hw intra_node '{"bandwidth": 0}' > t.json; refuses '"intra_node"' "$PIPIT" "${SIM[@]}" --hw t.json
hw name '"t", "name": "u"' > t.json;    refuses 'key "name" appears twice' "$PIPIT" "${SIM[@]}" --hw t.json
hw inter_node '{"bandwidth": 1, "bandwidth": 2}' > t.json; refuses 'key "inter_node.bandwidth" appears twice' \
    "$PIPIT" "${SIM[@]}" --hw t.json
{ hw "" ""; echo "trailing"; } > t.json; refuses 'not a JSON object (or text follows it)' "$PIPIT" "${SIM[@]}" --hw t.json

# ---- profiles (pipit sim --calibrate)
# a minimal profile; each case edits one value of it with sed
cat > p0.json <<'EOF'
{"model": {"layers": 2, "dim": 64, "heads": 4, "ctx": 32, "vocab": 128, "micro_batch": 2, "microbatches": 1},
 "steps": 2, "step_s": 0.5,
 "profile": {"ranks": [{"ops": {"matmul": 0.2, "attention": 0.01, "gelu": 0.05},
                        "instructions": {"optimizer update": 0.01}}]}}
EOF
profile() { sed "$1" p0.json > p.json; }
expect_ok "$PIPIT" sim --calibrate p0.json --out cal.json
expect_ok "$PIPIT" "${SIM[@]}" --hw cal.json # what pipit writes, it reads
profile 's/"steps": 2/"steps": 1e30/';   refuses '"steps" must be a whole number' "$PIPIT" sim --calibrate p.json
profile 's/"steps": 2/"steps": 2.5/';    refuses '"steps"' "$PIPIT" sim --calibrate p.json
profile 's/"step_s": 0.5/"step_s": -3/'; refuses '"step_s" must be a finite number of seconds >= 0' "$PIPIT" sim --calibrate p.json
profile 's/"gelu": 0.05/"gelu": -0.05/'; refuses '"gelu" in "profile.ranks" is not a finite number' "$PIPIT" sim --calibrate p.json
profile 's/"gelu": 0.05/"gelu": 1e999/'; refuses '"gelu"' "$PIPIT" sim --calibrate p.json
profile 's/"steps": 2/"steps": 2, "steps": 3/'; refuses 'key "steps" appears twice' "$PIPIT" sim --calibrate p.json
profile 's/"matmul": 0.2/"matmul": 1e-320/' # an infinite GEMM rate: no file is written
rm -f bad_cal.json
refuses 'no usable rate' "$PIPIT" sim --calibrate p.json --out bad_cal.json
[ ! -e bad_cal.json ] || fail "a refused calibration left bad_cal.json behind"
[ -z "$(ls bad_cal.json.tmp.* 2>/dev/null)" ] || fail "a refused calibration left a temp file: $(ls bad_cal.json.tmp.*)"

# ---- pipit sim flags
refuses 'MLP width' "$PIPIT" "${SIM[@]}" --hw a100 --ffn-mult 1e300
refuses '--weak-scaling' "$PIPIT" "${SIM[@]}" --hw a100 --dp 2 --weak-scaling ''
refuses '--weak-scaling' "$PIPIT" "${SIM[@]}" --hw a100 --dp 2 --weak-scaling 2,,4
refuses '--weak-scaling' "$PIPIT" "${SIM[@]}" --hw a100 --dp 2 --weak-scaling 2,4,
refuses 'layers must be >= 1' "$PIPIT" sim --layers -4 --hidden 64 --heads 4 --seq 64 --vocab 128 --global-batch 8 --hw a100
refuses '--ffn-mult' "$PIPIT" "${SIM[@]}" --hw a100 --ffn-mult nan

# ---- plan --search
refuses '--gpus must be >= 1' "$PIPIT" plan --search --global-batch 8 --gpus 0
refuses '--layers must be >= 1' "$PIPIT" plan --search --global-batch 8 --layers -2
refuses 'none of the' "$PIPIT" plan --search --global-batch 8 --mem-limit 1
refuses 'none of the' "$PIPIT" plan --search --global-batch 8 --mem-limit 1 --json

# ---- train's numbers (each refused before anything is built)
T=("$PIPIT" train --data text.txt --steps 2)
refuses '--min-lr must be >= 0 (got -1)' "${T[@]}" --lr-schedule cosine --min-lr -1
refuses '--min-lr 0.01 is above --lr 0.001' "${T[@]}" --lr-schedule cosine --min-lr 1e-2
refuses '--decay-steps must be > --warmup' "${T[@]}" --lr-schedule cosine --decay-steps -2
refuses '--lr must be a number >= 0' "${T[@]}" --lr -1
refuses "bad value 'nan' for --lr" "${T[@]}" --lr nan
refuses "bad value 'inf' for --clip" "${T[@]}" --clip inf
refuses '--beta1 must be in [0, 1)' "${T[@]}" --beta1 1
refuses '--beta2 must be in [0, 1)' "${T[@]}" --beta2 -0.5
refuses '--eps must be a number >= 0' "${T[@]}" --eps -1e-8
refuses '--weight-decay must be a number >= 0' "${T[@]}" --weight-decay -0.1
refuses '--clip must be' "${T[@]}" --clip -1
refuses '--micro-batch must be >= 1' "${T[@]}" --micro-batch 0
refuses '--microbatches must be >= 1' "${T[@]}" --microbatches -3
refuses '--threads must be >= 1' "${T[@]}" --threads 0
refuses '--val-split must be between 0 and 1' "${T[@]}" --val-split 1.5
refuses '--eval-every must be >= 1' "${T[@]}" --val-split 0.1 --eval-every 0
refuses '--warmup must be >= 0' "${T[@]}" --warmup -1
refuses '--peak-flops' "${T[@]}" --peak-flops -1
refuses '--mem-limit must be a number of bytes from 1 to 2^56' "${T[@]}" --mem-limit -1

# ---- --config files
printf '{"lr": 1e-3, "lr": 2e-3}' > c.json;  refuses 'key "lr" appears twice' "${T[@]}" --config c.json
printf '{"lr": 1e-3} {"lr": 2}' > c.json;     refuses 'malformed JSON (or text after the object)' "${T[@]}" --config c.json
printf '{"lr": "fast"}' > c.json;             refuses '"lr" must be a number' "${T[@]}" --config c.json
printf '{"layers": 1e12}' > c.json;           refuses '"layers" is out of range' "${T[@]}" --config c.json
printf '{"min_lr": -1}' > c.json;             refuses 'unknown key "min_lr"' "${T[@]}" --config c.json
printf '{"min-lr": -1, "lr-schedule": "cosine"}' > c.json; refuses '--min-lr must be >= 0' "${T[@]}" --config c.json
printf '{"lr": 1e-3}\0{"lr": 2}' > c.json;   refuses 'NUL byte' "${T[@]}" --config c.json

# ---- eval and sample
expect_ok "$PIPIT" train --data text.txt --steps 0 --save w.st
refuses '--batches must be >= 1' "$PIPIT" eval --init w.st --data text.txt --ctx 64 --micro-batch 8 --batches 0
refuses '--batches must be at most' "$PIPIT" eval --init w.st --data text.txt --ctx 64 --micro-batch 8 --batches 20000000
refuses '--tokens 2147483647 is too many' "$PIPIT" sample --init w.st --prompt "the " --tokens 2147483647
refuses '--tokens must be >= 0' "$PIPIT" sample --init w.st --prompt "the " --tokens -1
refuses '--temperature must be a finite number >= 0' "$PIPIT" sample --init w.st --prompt "the " --temperature -1
refuses '--top-k must be in 0..256' "$PIPIT" sample --init w.st --prompt "the " --top-k -1
refuses '--prompt-ids' "$PIPIT" sample --init w.st --prompt-ids 1,2,
refuses '--prompt-ids' "$PIPIT" sample --init w.st --prompt-ids 1,-2
refuses 'outside the model' "$PIPIT" sample --init w.st --prompt-ids 1,999
refuses 'prompt is empty' "$PIPIT" sample --init w.st --prompt ""

# ---- checkpoints: a changed byte, bytes appended
cp w.st flip.st
$PY -c "
import sys
b = bytearray(open('flip.st','rb').read()); b[-3] ^= 0x10; open('flip.st','wb').write(b)"
refuses 'checksum mismatch' "$PIPIT" eval --init flip.st --data text.txt --ctx 64 --micro-batch 8 --batches 1
cp w.st long.st && printf 'x' >> long.st
refuses 'trailing bytes after the last tensor' "$PIPIT" eval --init long.st --data text.txt --ctx 64 --micro-batch 8 --batches 1

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "ok"
