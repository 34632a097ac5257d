#!/usr/bin/env bash
# test_mpi_train.sh — `mpirun -np P*D pipit train` equals the threads run of
# the same P, D and M bit for bit (losses and the saved checkpoint), over
# shared memory (vader) and TCP, in f32 and in bf16 (--dtype bf16), and
# across two emulated hosts (network namespaces, tests/netns_hosts.sh);
# ZeRO-1 under MPI; Llama models too; a checkpoint written
# by P=4 continues under P=2 x D=2 and P=1; a killed, failing or hung rank
# ends the job non-zero within 30 s naming the rank; a launch whose process
# count does not match the mesh is refused by every process.
# Usage: test_mpi_train.sh PIPIT_CLI SOURCE_DIR   (exit 77: skipped)
set -u
source "$(dirname "$0")/mpi_lib.sh"
mpi_setup "$1" "$2" mpi_train
MODEL=(--data corpus.txt --ctx 16 --layers 8 --heads 2 --dim 16 --micro-batch 2 --lr 3e-3 --weight-decay 0.1
       --clip 1.0 --seed 3 --json)

ran=0
for sched in gpipe 1f1b interleaved-1f1b zb-h1 dualpipev zb-h2 zb-v interleaved-zb; do
    for P in 2 4; do
        for D in 1 2; do
            same_as_threads "$sched P=$P D=$D vader" $((P * D)) self,vader "${MODEL[@]}" \
                --schedule "$sched" --pp "$P" --dp "$D" --microbatches $((2 * P)) --steps 2
            ran=$((ran + 1))
        done
    done
done
for sched in 1f1b zb-h1 dualpipev; do
    same_as_threads "$sched P=2 D=2 tcp" 4 self,tcp "${MODEL[@]}" --schedule "$sched" --pp 2 --dp 2 --microbatches 4 --steps 2
    ran=$((ran + 1))
done
for sched in 1f1b zb-h1 dualpipev; do # mixed precision: bf16 activations and messages, fp32 exchange
    same_as_threads "bf16 $sched P=2 D=2 vader" 4 self,vader "${MODEL[@]}" --dtype bf16 --schedule "$sched" --pp 2 --dp 2 \
        --microbatches 4 --steps 2
    ran=$((ran + 1))
done
same_as_threads "bf16 1f1b P=2 D=2 zero1 tcp" 4 self,tcp "${MODEL[@]}" --dtype bf16 --pp 2 --dp 2 --zero1 --microbatches 4 --steps 2
ran=$((ran + 1))
same_as_threads "1f1b P=2 D=2 zero1 vader" 4 self,vader "${MODEL[@]}" --pp 2 --dp 2 --zero1 --microbatches 4 --steps 2
cp t.st zero1_threads.st
"$CLI" train "${MODEL[@]}" --pp 2 --dp 2 --microbatches 4 --steps 2 --save nozero.st > /dev/null || fail "zero1 reference"
cmp -s zero1_threads.st nozero.st || fail "--zero1 changed the parameters"
echo "$ran MPI configurations compared with threads"

# The Llama family (GQA, RoPE, a tied head shared by the first and last
# rank): the same bits under mpirun as with threads, ZeRO-1 included.
GPT2=("${MODEL[@]}")
MODEL=(--data corpus.txt --model llama-tiny --ctx 16 --layers 4 --dim 32 --ffn-hidden 48 --micro-batch 2 --lr 3e-3
       --weight-decay 0.1 --clip 1.0 --seed 3 --tied --json)
for cfg in "1f1b 2 2" "zb-h1 2 1" "interleaved-1f1b 2 2" "dualpipev 2 1" "gpipe 4 1"; do
    set -- $cfg
    same_as_threads "llama $1 P=$2 D=$3 vader" $(($2 * $3)) self,vader "${MODEL[@]}" \
        --schedule "$1" --pp "$2" --dp "$3" --microbatches $((2 * $2)) --steps 2
done
same_as_threads "llama 1f1b P=2 D=2 zero1 tcp" 4 self,tcp "${MODEL[@]}" --pp 2 --dp 2 --zero1 --microbatches 4 --steps 2
MODEL=("${GPT2[@]}")

# Zero-copy sends: checked (PIPIT_DEBUG_SENDS: checksums, poisoned slots) and
# with a slow receiver (5 ms before each receive of rank 1): the same bits.
for x in PIPIT_DEBUG_SENDS=1 PIPIT_INJECT_DELAY=1:5; do
    MPI_X=(-x "$x")
    same_as_threads "interleaved-1f1b P=2 D=2 $x vader" 4 self,vader "${MODEL[@]}" --schedule interleaved-1f1b --pp 2 --dp 2 \
        --microbatches 4 --steps 2
    same_as_threads "zb-h1 P=2 D=2 $x tcp" 4 self,tcp "${MODEL[@]}" --schedule zb-h1 --pp 2 --dp 2 --microbatches 4 --steps 2
done
MPI_X=()
# The data-parallel exchange starts in the backward (rank 0's --profile).
mpi 2 self,vader "$CLI" train "${MODEL[@]}" --dp 2 --microbatches 4 --steps 2 --profile > o.log 2> o.err ||
    fail "overlap: $(tail -3 o.err)"
line=$(grep 'overlap of the data-parallel exchange' o.err | head -1)
awk -v l="$line" 'BEGIN { if (!match(l, /left at [0-9.]+/)) exit 1; s = substr(l, RSTART + 8, RLENGTH - 8)
                          if (!match(l, /ended at [0-9.]+/)) exit 1; e = substr(l, RSTART + 9, RLENGTH - 9)
                          exit !(s + 0 < e + 0) }' || fail "overlap under MPI: '$line'"
echo "overlap under MPI: $line"

# A checkpoint written under P=4 continues under P=2 x D=2 (MPI), P=1 (threads).
G=(--microbatches 8)
mpi 4 self,vader "$CLI" train "${MODEL[@]}" --pp 4 "${G[@]}" --steps 2 --save c.st --save-optimizer c.opt > c.log \
    || fail "checkpoint run P=4"
"$CLI" train "${MODEL[@]}" --pp 4 "${G[@]}" --steps 4 > full.log || fail "uninterrupted P=4"
INIT=(--init c.st --init-optimizer c.opt --steps 2)
"$CLI" train "${MODEL[@]}" "${INIT[@]}" "${G[@]}" > r1.log || fail "resume P=1"
mpi 4 self,vader "$CLI" train "${MODEL[@]}" "${INIT[@]}" --pp 2 --dp 2 --microbatches 4 > r22.log || fail "resume P=2 D=2"
diff <(losses full.log | tail -2) <(losses r1.log) > /dev/null || fail "resume P=1: $(losses r1.log | tr '\n' ' ') vs $(losses full.log | tail -2 | tr '\n' ' ')"
# the first resumed step runs the same weights on the same batch: the same loss;
# the next one follows a D=2 update (its gradient sum is in another order)
[ "$(losses r22.log | head -1)" = "$(losses full.log | sed -n 3p)" ] || fail "resume P=2 D=2: first loss $(losses r22.log | head -1) vs $(losses full.log | sed -n 3p)"
python3 - "$(losses r22.log | sed -n 2p | cut -d: -f2)" "$(losses full.log | sed -n 4p | cut -d: -f2)" <<'EOF' || fail "resume P=2 D=2: second loss off"
import sys
a, b = float(sys.argv[1]), float(sys.argv[2])
sys.exit(0 if abs(a - b) <= 1e-5 * abs(b) else 1)
EOF

# A failing rank, a hung rank, a killed rank: non-zero within 30 s, the rank named.
ends_within_30s() { # NAME EXPECTED_TEXT CMD...
    local name=$1 want=$2 t0
    shift 2
    t0=$(date +%s)
    "$@" > f.log 2> f.err
    local rc=$? dt=$(($(date +%s) - t0))
    [ "$rc" -ne 0 ] || fail "$name: exit status 0"
    [ "$dt" -le 30 ] || fail "$name: took $dt s"
    grep -q "$want" f.err f.log || fail "$name: no '$want' in: $(tail -3 f.err)"
}
LONG=(train "${MODEL[@]}" --pp 2 --microbatches 4 --steps 100000)
ends_within_30s "failing rank" "rank 1 failed: injected failure" \
    mpirun -np 2 --bind-to none -x PIPIT_INJECT_FAILURE=1:30 "$CLI" "${LONG[@]}"
ends_within_30s "hung rank" "no message from rank 1" \
    mpirun -np 2 --bind-to none -x PIPIT_INJECT_HANG=1:30 -x PIPIT_TIMEOUT=3 "$CLI" "${LONG[@]}"
t0=$(date +%s)
KILL=(train "${MODEL[@]}" --pp 2 --microbatches 4 --steps 100001) # its own marker for pgrep
mpirun -np 2 --bind-to none "$CLI" "${KILL[@]}" > k.log 2> k.err &
MPIRUN=$!
for _ in $(seq 100); do grep -q '"step":1' k.log 2>/dev/null && break; sleep 0.2; done
victim=""
for pid in $(pgrep -f "pipit train .*--steps 100001"); do
    tr '\0' '\n' < /proc/"$pid"/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=1" && victim=$pid
done
if [ -z "$victim" ]; then
    fail "killed rank: could not find rank 1's process"
    kill "$MPIRUN"
fi
[ -n "$victim" ] && kill -9 "$victim"
wait "$MPIRUN"
rc=$?
dt=$(($(date +%s) - t0))
[ "$rc" -ne 0 ] || fail "killed rank: mpirun exited 0"
[ "$dt" -le 40 ] || fail "killed rank: the job took $dt s"

# A launch that does not match the mesh: refused by every process, before any work.
mpirun -np 3 --bind-to none "$CLI" train "${MODEL[@]}" --pp 2 --steps 1 > b.log 2> b.err && fail "np 3 for P=2 accepted"
# every process says why; mpirun may kill the others once the first has
# exited, so under load fewer than 3 lines can make it out
n=$(grep -c "this job has 3 processes, but the mesh needs P x T x D = 2 x 1 x 1 = 2" b.err)
[ "$n" -ge 1 ] || fail "bad launch: no process said why: $(head -3 b.err)"
echo "bad launch: $n of 3 processes printed the reason before mpirun ended the job"
grep -q '"step"' b.log && fail "bad launch: a step ran"

# Two emulated hosts (network namespaces, TCP between them).
for DP in 1 2; do
    same_on_hosts "P=2 D=$DP" $((2 * DP)) "${MODEL[@]}" --pp 2 --dp $DP --microbatches 4 --steps 2
done

mpi_done
