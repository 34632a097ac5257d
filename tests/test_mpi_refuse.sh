#!/usr/bin/env bash
# test_mpi_refuse.sh — ranks agree or stop (docs/refuses.md): `mpirun` with
# processes started with different flags (one per kind: --lr, --clip,
# --seed, --data-order, --layers, --schedule), different data under the
# same flags, models that differ only as resolved from their checkpoints
# (the kind; a Llama field), or two builds (PIPIT_BUILD_ID set
# differently) is refused by every process within seconds, each naming the
# field and what each process has; none exits 0 and no step runs. The same
# data at two paths agrees and trains, and so does a process that spells
# out a default the other relies on (the values compared are the resolved
# ones).
# Usage: test_mpi_refuse.sh PIPIT_CLI SOURCE_DIR   (exit 77: skipped)
set -u
CLI=$(realpath -- "$1") # the test runs in a temp dir
SRC=$2
skip() { echo "SKIP: $*"; exit 77; }
command -v mpirun >/dev/null || skip "no mpirun (apt install openmpi-bin)"
ldd "$CLI" 2>/dev/null | grep -q libmpi || skip "this pipit was built without MPI"
ldd "$CLI" 2>/dev/null | grep -q 'libasan\|libtsan' && skip "sanitizer build (Open MPI's own memory use is out of scope)"

WORK=$(mktemp -d "${TMPDIR:-/tmp}/pipit_mpi_refuse.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK" || exit 1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
head -c 60000 "$SRC"/README.md > a.txt
cp a.txt a_copy.txt
head -c 60000 "$SRC"/docs/architecture.md > b.txt
BASE=(--ctx 16 --heads 2 --dim 16 --micro-batch 2 --pp 2 --steps 2 --json)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# mpmd ENV0 ARGS0 -- ENV1 ARGS1: process 0 and process 1 with their own
# flags; output in out.log, exit status in $rc, seconds in $secs.
mpmd() {
    local -a a0=() a1=()
    while [ "$1" != "--" ]; do a0+=("$1"); shift; done
    shift
    a1=("$@")
    local t0=$SECONDS
    timeout 120 mpirun --bind-to none --mca btl self,vader --mca btl_tcp_if_include lo --mca oob_tcp_if_include lo \
        "${a0[@]}" : "${a1[@]}" > out.log 2>&1
    rc=$?
    secs=$((SECONDS - t0))
}

# refused NAME WORDS ENV_AND_ARGS0 -- ENV_AND_ARGS1
refused() {
    local name=$1 words=$2
    shift 2
    mpmd "$@"
    [ "$rc" -ne 0 ] || fail "$name: mpirun exited 0"
    [ "$rc" -ne 124 ] || fail "$name: hung (killed after 120 s)"
    [ "$secs" -le 60 ] || fail "$name: refused only after $secs s" # seconds, not the 300 s receive timeout; 60 leaves room for a loaded machine
    for p in 0 1; do
        grep -q "pipit (process $p of 2): .*$words" out.log ||
            fail "$name: process $p does not refuse naming '$words':"$'\n'"$(grep -v '^--\|^$' out.log | head -8)"
    done
    grep -q '"step":' out.log && fail "$name: a step ran"
}

refused lr "disagree on --lr: process 0 has '0.001'; process 1 has '0.002'" \
    -np 1 "$CLI" train --data a.txt "${BASE[@]}" --layers 2 --lr 1e-3 -- -np 1 "$CLI" train --data a.txt "${BASE[@]}" --layers 2 --lr 2e-3
refused clip "disagree on --clip" \
    -np 1 "$CLI" train --data a.txt "${BASE[@]}" --layers 2 --clip 1 -- -np 1 "$CLI" train --data a.txt "${BASE[@]}" --layers 2
refused seed "disagree on --seed: process 0 has '1'; process 1 has '7'" \
    -np 1 "$CLI" train --data a.txt "${BASE[@]}" --layers 2 -- -np 1 "$CLI" train --data a.txt "${BASE[@]}" --layers 2 --seed 7
refused data-order "disagree on --data-order" \
    -np 1 "$CLI" train --data a.txt "${BASE[@]}" --layers 2 --data-order sequential -- -np 1 "$CLI" train --data a.txt "${BASE[@]}" --layers 2
refused layers "disagree on --layers: process 0 has '2'; process 1 has '4'" \
    -np 1 "$CLI" train --data a.txt "${BASE[@]}" --layers 2 -- -np 1 "$CLI" train --data a.txt "${BASE[@]}" --layers 4
refused schedule "disagree on --schedule: process 0 has 'gpipe, 2 ranks x 1 stages each'; process 1 has '1f1b, 2 ranks x 1 stages each'" \
    -np 1 "$CLI" train --data a.txt "${BASE[@]}" --layers 2 --schedule gpipe -- -np 1 "$CLI" train --data a.txt "${BASE[@]}" --layers 2
refused data "disagree on --data (its tokens)" \
    -np 1 "$CLI" train --data a.txt "${BASE[@]}" --layers 2 -- -np 1 "$CLI" train --data b.txt "${BASE[@]}" --layers 2
refused build "run different builds: the build (pipit_build_id) differs: process 0 has 'build-a'; process 1 has 'build-b'" \
    -np 1 -x PIPIT_BUILD_ID=build-a "$CLI" train --data a.txt "${BASE[@]}" --layers 2 -- \
    -np 1 -x PIPIT_BUILD_ID=build-b "$CLI" train --data a.txt "${BASE[@]}" --layers 2
# the model as resolved, not only the flags: a GPT-2 and a Llama
# checkpoint under the same flags (the kind named, not a Llama flag), and
# two Llama checkpoints under eval's few flags (their kv heads)
M=(--data a.txt --ctx 16 --heads 2 --dim 16 --layers 2 --micro-batch 2 --steps 0)
"$CLI" train "${M[@]}" --save gpt2.st > /dev/null 2>&1 || fail "cannot write the GPT-2 checkpoint"
for kv in 1 2; do
    "$CLI" train "${M[@]}" --model llama-tiny --kv-heads $kv --ffn-hidden 32 --save llama_kv$kv.st > /dev/null 2>&1 ||
        fail "cannot write the Llama checkpoint with --kv-heads $kv"
done
refused kind "disagree on the model kind: process 0 has 'gpt2'; process 1 has 'llama'" \
    -np 1 "$CLI" train --data a.txt --init gpt2.st "${BASE[@]}" -- -np 1 "$CLI" train --data a.txt --init llama_kv2.st "${BASE[@]}"
refused llama-field "disagree on model kv_heads: process 0 has '1'; process 1 has '2'" \
    -np 1 "$CLI" eval --data a.txt --init llama_kv1.st --json -- -np 1 "$CLI" eval --data a.txt --init llama_kv2.st --json
# resolved values, not spellings (issue 25 item 10): a process that spells
# out what the other relies on (the defaults --dtype f32, --schedule 1f1b
# at --pp 2, --virtual 1, the preset, --data-format, a cosine schedule's
# --decay-steps and --min-lr, --eval-batches and the val data's format)
# agrees and trains; a real difference in any of them is refused naming it
SPELLED=(--dtype f32 --schedule 1f1b --virtual 1 --model tiny --data-format text --max-ctx 16 --decay-steps 2
         --min-lr 1e-4 --eval-batches 4 --eval-every 2)
mpmd -np 1 "$CLI" train --data a.txt "${BASE[@]}" --layers 2 --lr-schedule cosine --val-split 0.1 "${SPELLED[@]}" -- \
    -np 1 "$CLI" train --data a.txt "${BASE[@]}" --layers 2 --lr-schedule cosine --val-split 0.1
[ "$rc" -eq 0 ] || fail "spelled-out defaults: exit $rc:"$'\n'"$(grep pipit out.log | head -3)"
[ "$(grep -c '"step":' out.log)" -eq 3 ] || fail "spelled-out defaults: expected 2 step lines and a validation: $(cat out.log)"
refused dtype "disagree on --dtype: process 0 has 'bf16'; process 1 has 'f32'" \
    -np 1 "$CLI" train --data a.txt "${BASE[@]}" --layers 2 --dtype bf16 -- -np 1 "$CLI" train --data a.txt "${BASE[@]}" --layers 2
refused virtual "disagree on --virtual: process 0 has '2'; process 1 has '1'" \
    -np 1 "$CLI" train --data a.txt "${BASE[@]}" --layers 4 --microbatches 2 --virtual 2 -- \
    -np 1 "$CLI" train --data a.txt "${BASE[@]}" --layers 4 --microbatches 2
refused min-lr "disagree on --min-lr: process 0 has '5.0000000000000002e-05'; process 1 has '0.0001'" \
    -np 1 "$CLI" train --data a.txt "${BASE[@]}" --layers 2 --lr-schedule cosine --min-lr 5e-5 -- \
    -np 1 "$CLI" train --data a.txt "${BASE[@]}" --layers 2 --lr-schedule cosine
refused eval-batches "disagree on --eval-batches: process 0 has '3'; process 1 has '4'" \
    -np 1 "$CLI" train --data a.txt "${BASE[@]}" --layers 2 --val-split 0.1 --eval-batches 3 -- \
    -np 1 "$CLI" train --data a.txt "${BASE[@]}" --layers 2 --val-split 0.1
refused val-data "disagree on --val-data (its tokens)" \
    -np 1 "$CLI" train --data a.txt "${BASE[@]}" --layers 2 --val-data a.txt -- \
    -np 1 "$CLI" train --data a.txt "${BASE[@]}" --layers 2 --val-data b.txt
# PIPIT_HEARTBEAT (issue 25 item 10): a value that would end a healthy job
# (0.001) or is no number is refused by every process naming the variable,
# before step 0 (every bad value: test_transport.c), and so is a process
# without heartbeats beside one with
refused "heartbeat 0.001" "process 0 of 2 failed: PIPIT_HEARTBEAT='0.001': shorter than .*it must be 0 (no heartbeats) or seconds from 1 to 86400" \
    -np 1 -x PIPIT_HEARTBEAT=0.001 "$CLI" train --data a.txt "${BASE[@]}" --layers 2 -- \
    -np 1 -x PIPIT_HEARTBEAT=0.001 "$CLI" train --data a.txt "${BASE[@]}" --layers 2
refused "heartbeat off beside on" "disagree on PIPIT_HEARTBEAT (seconds): process 0 has '0 (off)'; process 1 has '10'" \
    -np 1 -x PIPIT_HEARTBEAT=0 "$CLI" train --data a.txt "${BASE[@]}" --layers 2 -- \
    -np 1 "$CLI" train --data a.txt "${BASE[@]}" --layers 2
# the same data at another path agrees, and trains
mpmd -np 1 "$CLI" train --data a.txt "${BASE[@]}" --layers 2 -- -np 1 "$CLI" train --data a_copy.txt "${BASE[@]}" --layers 2
[ "$rc" -eq 0 ] || fail "the same data at two paths: exit $rc:"$'\n'"$(tail -5 out.log)"
[ "$(grep -c '"step":' out.log)" -eq 2 ] || fail "the same data at two paths: expected 2 step lines: $(cat out.log)"

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "ok"
