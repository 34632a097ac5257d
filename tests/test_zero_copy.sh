#!/usr/bin/env bash
# test_zero_copy.sh — zero-copy sends and the data-parallel exchange in the
# loop, with ranks as threads (test_mpi_train.sh does the same under mpirun):
#  - PIPIT_DEBUG_SENDS=1 (every isend checksummed, every send slot poisoned
#    where it dies, the receiver checks its bytes) gives the bits of a plain
#    run: no slot is written before its send completed;
#  - a slow receiver (PIPIT_INJECT_DELAY: 5 ms before each of its receives)
#    gives the same bits too;
#  - with D = 2 the reduce-scatter starts in the backward: --profile shows a
#    send that left before the rank's last backward task ended, and the
#    losses and parameters equal those of the exchange after the loop
#    (PIPIT_BENCH_DP_SERIAL=1).
# Usage: test_zero_copy.sh PIPIT_CLI SOURCE_DIR
set -u
CLI=$1
SRC=$2
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pipit_zero_copy.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cd "$WORK" || exit 1
cat "$SRC"/README.md "$SRC"/docs/*.md > corpus.txt
MODEL=(--data corpus.txt --ctx 16 --layers 8 --heads 2 --dim 16 --micro-batch 2 --lr 3e-3 --clip 1.0 --seed 5 --json
       --steps 2)
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
losses() { grep -o '"loss":[^,]*' "$1"; }

# same NAME ENV -- ARGS: the run with ENV set gives the plain run's losses and checkpoint.
same() {
    local name=$1 env_=$2
    shift 3
    "$CLI" train "${MODEL[@]}" "$@" --save a.st > a.log 2> a.err || { fail "$name: plain run: $(tail -2 a.err)"; return; }
    env "$env_" "$CLI" train "${MODEL[@]}" "$@" --save b.st > b.log 2> b.err || { fail "$name ($env_): $(tail -2 b.err)"; return; }
    diff <(losses a.log) <(losses b.log) > /dev/null || fail "$name ($env_): losses differ"
    cmp -s a.st b.st || fail "$name ($env_): checkpoints differ"
}

ran=0
for sched in gpipe 1f1b interleaved-1f1b zb-h1 dualpipev; do
    for P in 2 4; do
        for D in 1 2; do
            for env_ in PIPIT_DEBUG_SENDS=1 PIPIT_INJECT_DELAY=$((P - 1)):5; do
                same "$sched P=$P D=$D" "$env_" -- --schedule "$sched" --pp "$P" --dp "$D" --microbatches $((2 * P))
                ran=$((ran + 1))
            done
        done
    done
done
same "1f1b P=2 D=2 zero1" PIPIT_DEBUG_SENDS=1 -- --pp 2 --dp 2 --zero1 --microbatches 4
echo "$ran configurations with checked sends or a slow receiver: same bits"

# The exchange overlaps the backward, with the bits of the exchange after the loop.
for mesh in "--dp 2" "--pp 2 --dp 2 --schedule interleaved-1f1b --virtual 2" "--dp 2 --zero1"; do
    # shellcheck disable=SC2086
    same "overlap $mesh" PIPIT_BENCH_DP_SERIAL=1 -- $mesh --microbatches 4 --profile
    line=$(grep 'overlap of the data-parallel exchange' a.err | head -1)
    sent=$(sed -n 's/.*first send left at \([0-9.]*\) ms.*/\1/p' <<< "$line")
    ended=$(sed -n 's/.*backward task ended at \([0-9.]*\) ms.*/\1/p' <<< "$line")
    if [ -z "$sent" ] || [ -z "$ended" ]; then
        fail "overlap $mesh: --profile printed no overlap line: $(tail -3 a.err)"
    elif ! awk -v s="$sent" -v e="$ended" 'BEGIN { exit !(s < e) }'; then
        fail "overlap $mesh: the first reduce-scatter send left at $sent ms, after the backward ended ($ended ms)"
    else
        echo "overlap $mesh: first reduce-scatter send at $sent ms, last backward task ended at $ended ms"
    fi
done

echo "$((failures == 0 ? 1 : 0)) passed, $((failures == 0 ? 0 : 1)) failed"
[ "$failures" -eq 0 ]
