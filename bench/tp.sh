#!/usr/bin/env bash
# tp.sh — tensor parallelism on this machine: the step time of a model wide
# enough for T = 2 to help, T = 2 (two ranks of one thread, as threads and
# as two MPI processes) against T = 1 (one rank of one thread, and of two
# threads: the same cores as T = 2), the share of T = 2's step spent in the
# in-stage all-reduces (tp_sum, tp_max: `--profile-out`, waiting for the
# partner included), and `pipit sim`'s prediction of both beside them.
# The prediction uses a CPU description fitted to the T = 1 one-thread run
# (`pipit sim --calibrate`, which also measures the link between two
# threads), so the GEMM rates are this machine's and the all-reduce term is
# the cost model's ring over the measured link.
# Usage: bench/tp.sh [PIPIT] [STEPS]   (default build/pipit, 3 steps: the
# profile averages the steps after the first). Prints a table and writes
# tp_bench.json in the current directory. DIM, LAYERS, HEADS, CTX, BATCH, M
# override the model (default dim 2048, 2 layers, 16 heads, ctx 64,
# micro-batch 2, 2 microbatches, vocabulary 256: bytes).
set -eu
PIPIT=${1:-build/pipit}
STEPS=${2:-3}
DIM=${DIM:-2048} LAYERS=${LAYERS:-2} HEADS=${HEADS:-16} CTX=${CTX:-64} BATCH=${BATCH:-2} M=${M:-2}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pipit_tp.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
python3 "$(dirname "$0")/words.py" "$WORK/text.txt"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs"
MODEL=(--data "$WORK/text.txt" --ctx "$CTX" --layers "$LAYERS" --heads "$HEADS" --dim "$DIM" --micro-batch "$BATCH"
       --microbatches "$M" --lr 1e-4 --seed 1 --steps "$STEPS" --json)
SIM=(--layers "$LAYERS" --hidden "$DIM" --heads "$HEADS" --seq "$CTX" --vocab 256 --micro-batch "$BATCH"
     --global-batch $((BATCH * M)))
export OMPI_MCA_btl=self,vader PIPIT_TIMEOUT=600

run() { # run NAME LAUNCHER... -- TRAIN_FLAGS...: one profiled run into $WORK/NAME.json
    local name=$1
    shift
    local pre=()
    while [ "$1" != "--" ]; do pre+=("$1"); shift; done
    shift
    "${pre[@]}" "$PIPIT" train "${MODEL[@]}" "$@" --profile-out "$WORK/$name.json" > "$WORK/$name.log" 2> "$WORK/$name.err" ||
        { echo "tp.sh: the run '$name' failed: $(tail -3 "$WORK/$name.err")" >&2; exit 1; }
}
run t1 -- --tp 1 --threads 1
run t1x2 -- --tp 1 --threads 2
run t2 -- --tp 2 --threads 1
MPI=0
if command -v mpirun > /dev/null; then
    run t2mpi mpirun -np 2 --bind-to none --oversubscribe -- --tp 2 --threads 1 && MPI=1
fi
"$PIPIT" sim --calibrate "$WORK/t1.json" --out "$WORK/cpu.json" 2> "$WORK/links.txt"
"$PIPIT" sim "${SIM[@]}" --tp 1 --hw "$WORK/cpu.json" --json > "$WORK/sim1.json"
"$PIPIT" sim "${SIM[@]}" --tp 2 --hw "$WORK/cpu.json" --json > "$WORK/sim2.json"
python3 - "$WORK" "$M" "$MPI" "$DIM" "$LAYERS" <<'PYEOF'
import json, sys
work, M, mpi = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
def prof(name):
    j = json.load(open(f"{work}/{name}.json"))
    steps = j["steps"]
    # per rank: seconds per step in the in-stage all-reduces (tp_copy's backward is a tp_sum)
    coll = [sum(v for k, v in r["ops"].items() if k in ("tp_copy", "tp_sum", "tp_max")) / steps for r in j["profile"]["ranks"]]
    return j["step_s"], (max(coll) if coll else 0.0), (min(coll) if coll else 0.0)
s1, s2 = (json.load(open(f"{work}/sim{t}.json")) for t in (1, 2))
rows = [("T=1, 1 thread", "t1"), ("T=1, 2 threads", "t1x2"), ("T=2 threads, 1 thread each", "t2")]
if mpi: rows.append(("T=2 mpirun -np 2, 1 thread each", "t2mpi"))
base = prof("t1")[0]
out = {"model": {"dim": int(sys.argv[4]), "layers": int(sys.argv[5]), "microbatches": M}, "runs": {}}
# all-reduce s: the rank that waited longest (its share of the step), and
# the one that waited least (the last to arrive: closest to the transfer)
print(f"{'run':40} {'step s':>8} {'vs T=1':>7} {'all-reduce s':>12} {'share':>6} {'least s':>8}")
for label, name in rows:
    step, coll, least = prof(name)
    out["runs"][name] = {"step_s": step, "allreduce_s": coll, "allreduce_least_s": least}
    print(f"{label:40} {step:8.3f} {base / step:6.2f}x {coll:12.3f} {100 * coll / step:5.1f}% {least:8.3f}")
p1, p2 = s1["step_s"], s2["step_s"]
ptp = s2["tp_allreduce_s_all_stages_per_microbatch"] * M
out["sim"] = {"t1_step_s": p1, "t2_step_s": p2, "t2_allreduce_s": ptp}
print(f"{'pipit sim T=1 (fitted to T=1, 1 thread)':40} {p1:8.3f}")
print(f"{'pipit sim T=2':40} {p2:8.3f} {p1 / p2:6.2f}x {ptp:12.3f} {100 * ptp / p2:5.1f}%")
json.dump(out, open("tp_bench.json", "w"), indent=1)
PYEOF
echo "links: $(cat "$WORK/links.txt")"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
