#!/usr/bin/env bash
# cp_context.sh — context parallelism on this machine (issue 28, "Speed"):
# the llama-100m preset (micro-batch 1, one microbatch) at C = 1 against
# C = 2 (two MPI processes of one compute thread each).
#  1. The largest context that fits, by bisection over the contexts that
#     are multiples of 2C: `pipit plan --cp C --mem-limit L` (the memory
#     admission of every world rank of the planned job, nothing allocated)
#     beside `pipit sim --cp C`'s peak bytes per rank against the same L,
#     for L = LIMIT bytes per process (default 4 GiB) and for what this
#     machine's RAM allows (MemTotal / C: the admission's default, physical
#     RAM over the processes of the job on this machine). The first context
#     past the planned largest is then refused by a real `pipit train` (C = 2
#     under mpirun) with the same figure, to show plan and run agree.
#  2. The step time per token, measured at each context of CTXS (default
#     1024): C = 1 on one thread, C = 1 on two threads (the same two cores as
#     C = 2) and C = 2 under mpirun, interleaved ROUNDS times (default 2)
#     since other work shares the machine; the median of the steps after the
#     first of each run (`--json` ms), and C = 2's all-gather of K and V
#     (cp_gather) and reduce-scatter of their gradients (cp_scatter) as a
#     share of the step (`--profile-out` of process 0: the time in those
#     instructions, waiting for the partner included).
#  3. `pipit sim` for the same configurations, with a CPU description
#     fitted to the first C = 1 one-thread run (`pipit sim --calibrate`,
#     under mpirun -np 2 so that the link measured is the one between two
#     processes).
# Usage: bench/cp_context.sh [PIPIT] [STEPS]   (default build/pipit, 3 steps).
# Env: LIMIT (bytes per process, default 4 GiB), CTXS, ROUNDS, MAXCTX (the
# search's upper bound, default 262144). Prints the tables and writes
# cp_bench.json in the current directory.
set -eu
PIPIT=$(realpath "${1:-build/pipit}")
STEPS=${2:-3}
LIMIT=${LIMIT:-4294967296} CTXS=${CTXS:-1024} ROUNDS=${ROUNDS:-2} MAXCTX=${MAXCTX:-262144}
command -v mpirun > /dev/null || { echo "cp_context.sh: needs mpirun (apt install openmpi-bin)" >&2; exit 1; }
ldd "$PIPIT" | grep -q libmpi || { echo "cp_context.sh: $PIPIT was built without MPI" >&2; exit 1; }
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pipit_cp.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
python3 "$(dirname "$0")/words.py" "$WORK/text.txt" 200000 # ~800K tokens: longer than any context searched
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl=self,vader PIPIT_TIMEOUT=900
MPI=(mpirun -np 2 --oversubscribe --bind-to none)
MODEL=(--data "$WORK/text.txt" --model llama-100m --micro-batch 1 --microbatches 1)
# llama-100m as the cost model sees it (tools/presets.c: L10 H12 KV4 C768 F2048, vocabulary 50257)
SIM=(--arch llama --layers 10 --hidden 768 --heads 12 --kv-heads 4 --ffn-hidden 2048 --vocab 50257
     --micro-batch 1 --global-batch 1)
RAM=$(($(awk '/MemTotal/ {print $2}' /proc/meminfo) * 1024))
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(nproc) CPUs, RAM $((RAM >> 20)) MiB"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"

# ---- 1. the largest context: bisection over k (ctx = 2Ck) of a monotone test
fits_plan() { # fits_plan C LIMIT CTX
    "$PIPIT" plan "${MODEL[@]}" --cp "$1" --mem-limit "$2" --ctx "$3" > /dev/null 2> "$WORK/plan.err" && return 0
    grep -q "needs .* of memory but" "$WORK/plan.err" ||
        { echo "cp_context.sh: plan failed for another reason: $(cat "$WORK/plan.err")" >&2; exit 1; }
    return 1
}
fits_sim() { # fits_sim C LIMIT CTX: the cost model's peak bytes per rank within LIMIT
    "$PIPIT" sim "${SIM[@]}" --seq "$3" --cp "$1" --hw cpu --json |
        python3 -c "import json, sys; sys.exit(0 if json.load(sys.stdin)['peak_bytes_per_rank'] <= $2 else 1)"
}
largest() { # largest TEST C LIMIT: the largest ctx = 2Ck that TEST accepts (0: none)
    local test=$1 c=$2 lim=$3 lo=0 hi=1
    while [ $((2 * c * hi)) -le "$MAXCTX" ] && "$test" "$c" "$lim" $((2 * c * hi)); do lo=$hi hi=$((hi * 2)); done
    [ $((2 * c * hi)) -gt "$MAXCTX" ] && { echo "cp_context.sh: C=$c fits past MAXCTX $MAXCTX" >&2; exit 1; }
    while [ $((hi - lo)) -gt 1 ]; do # lo fits (or 0), hi does not
        local mid=$(((lo + hi) / 2))
        if "$test" "$c" "$lim" $((2 * c * mid)); then lo=$mid; else hi=$mid; fi
    done
    echo $((2 * c * lo))
}
declare -A BIG
for c in 1 2; do
    for name in limit ram; do
        lim=$LIMIT
        [ $name = ram ] && lim=$((RAM / c))
        BIG[plan_${c}_$name]=$(largest fits_plan $c $lim)
        BIG[sim_${c}_$name]=$(largest fits_sim $c $lim)
    done
done
# the run's own admission refuses the next context, with the plan's figure
for c in 1 2; do
    next=$((BIG[plan_${c}_limit] + 2 * c))
    launch=()
    [ $c = 2 ] && launch=("${MPI[@]}")
    fits_plan $c "$LIMIT" $next && { echo "cp_context.sh: bisection is off at C=$c" >&2; exit 1; }
    want=$(grep -o 'needs [0-9.]* [KMG]iB' "$WORK/plan.err")
    if "${launch[@]}" "$PIPIT" train "${MODEL[@]}" --cp $c --mem-limit "$LIMIT" --ctx $next --steps 1 > /dev/null 2> "$WORK/refuse.err"; then
        echo "cp_context.sh: C=$c ctx $next trained although plan refused it" >&2
        exit 1
    fi
    got=$(grep -o 'needs [0-9.]* [KMG]iB' "$WORK/refuse.err" | head -1)
    echo "C=$c ctx $next: plan $want per world rank; train$([ $c = 2 ] && echo " under mpirun -np 2") refused it: $got"
done

# ---- 2. measured steps, C = 1 and C = 2 interleaved
run() { # run NAME CTX LAUNCH... -- FLAGS...
    local name=$1 ctx=$2
    shift 2
    local pre=()
    while [ "$1" != "--" ]; do pre+=("$1"); shift; done
    shift
    "${pre[@]}" "$PIPIT" train "${MODEL[@]}" --ctx "$ctx" --steps "$STEPS" --lr 3e-4 --seed 1 --json "$@" \
        --profile-out "$WORK/$name.json" > "$WORK/$name.log" 2> "$WORK/$name.err" ||
        { echo "cp_context.sh: the run '$name' failed: $(tail -3 "$WORK/$name.err")" >&2; exit 1; }
    echo "  $name done ($(cut -d' ' -f1 /proc/loadavg) load)"
}
for ctx in $CTXS; do
    for r in $(seq "$ROUNDS"); do
        run c1t1_${ctx}_$r "$ctx" -- --cp 1 --threads 1
        run c2_${ctx}_$r "$ctx" "${MPI[@]}" -- --cp 2 --threads 1
        run c1t2_${ctx}_$r "$ctx" -- --cp 1 --threads 2
    done
done

# ---- 3. pipit sim, fitted to the first C = 1 one-thread run
first=${CTXS%% *}
"${MPI[@]}" "$PIPIT" sim --calibrate "$WORK/c1t1_${first}_1.json" --out "$WORK/cpu.json" > /dev/null 2> "$WORK/links.txt"
for ctx in $CTXS; do
    for c in 1 2; do "$PIPIT" sim "${SIM[@]}" --seq "$ctx" --cp $c --hw "$WORK/cpu.json" --json > "$WORK/sim_${c}_$ctx.json"; done
done
for k in "${!BIG[@]}"; do echo "$k ${BIG[$k]}"; done > "$WORK/big.txt"
python3 - "$WORK" "$ROUNDS" "$LIMIT" "$RAM" $CTXS <<'PYEOF'
import json, statistics, sys
work, rounds, limit, ram, ctxs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), [int(x) for x in sys.argv[5:]]
big = dict(line.split() for line in open(f"{work}/big.txt"))
gib = lambda b: f"{b / 2**30:.1f} GiB"
out = {"limit_bytes": limit, "ram_bytes": ram, "largest_ctx": {k: int(v) for k, v in big.items()}, "runs": {}, "sim": {}}
print(f"\nlargest context (llama-100m, micro-batch 1; ctx a multiple of 2C)")
print(f"{'limit per process':28} {'C':>2} {'pipit plan':>10} {'pipit sim':>10}")
for name, what in (("limit", lambda c: gib(limit)), ("ram", lambda c: f"RAM/{c} = {gib(ram // c)}")):
    for c in (1, 2):
        print(f"{what(c):28} {c:2d} {big[f'plan_{c}_{name}']:>10} {big[f'sim_{c}_{name}']:>10}")

def run(name):
    ms = [json.loads(l)["ms"] for l in open(f"{work}/{name}.log") if l.startswith("{")][1:]
    p = json.load(open(f"{work}/{name}.json"))
    ops = p["profile"]["ranks"][0]["ops"]
    n = p["steps"]
    return statistics.median(ms), ms, ops.get("cp_gather", 0.0) / n, ops.get("cp_scatter", 0.0) / n, p["step_s"]
for ctx in ctxs:
    print(f"\nctx {ctx}: ms per step (median of the steps after the first, each round), ms per token, C = 2's collectives")
    print(f"{'run':26} {'ms/step per round':>28} {'median':>8} {'ms/token':>9} {'vs C1 1t':>8} {'gather':>7} {'scatter':>7}")
    res = {}
    for key, label in (("c1t1", "C=1, 1 thread"), ("c1t2", "C=1, 2 threads"), ("c2", "C=2, mpirun -np 2, 1 thr")):
        rs = [run(f"{key}_{ctx}_{r}") for r in range(1, rounds + 1)]
        allms = [m for r in rs for m in r[1]]
        med = statistics.median(allms)
        # shares of process 0's profiled step (the profile's mean step)
        g = statistics.median(r[2] / r[4] for r in rs)
        s = statistics.median(r[3] / r[4] for r in rs)
        res[key] = {"ms": allms, "median_ms": med, "ms_per_token": med / ctx, "gather_share": g, "scatter_share": s,
                    "gather_s": [r[2] for r in rs], "scatter_s": [r[3] for r in rs]}
    base = res["c1t1"]["median_ms"]
    for key, label in (("c1t1", "C=1, 1 thread"), ("c1t2", "C=1, 2 threads"), ("c2", "C=2, mpirun -np 2, 1 thr")):
        x = res[key]
        rounds_ms = " ".join(f"{run(f'{key}_{ctx}_{r}')[0]:.0f}" for r in range(1, rounds + 1))
        coll = f"{100 * x['gather_share']:6.2f}% {100 * x['scatter_share']:6.2f}%" if key == "c2" else ""
        print(f"{label:26} {rounds_ms:>28} {x['median_ms']:8.0f} {x['ms_per_token']:9.2f} {base / x['median_ms']:7.2f}x {coll}")
    out["runs"][ctx] = res
    s1, s2 = (json.load(open(f"{work}/sim_{c}_{ctx}.json")) for c in (1, 2))
    cp = s2["cp_s_per_microbatch"]
    print(f"{'pipit sim C=1 (fitted)':26} {'':>28} {1e3 * s1['step_s']:8.0f} {1e3 * s1['step_s'] / ctx:9.2f}")
    print(f"{'pipit sim C=2':26} {'':>28} {1e3 * s2['step_s']:8.0f} {1e3 * s2['step_s'] / ctx:9.2f} "
          f"{s1['step_s'] / s2['step_s']:7.2f}x {100 * cp / s2['step_s']:6.2f}% (gather + scatter, "
          f"{s2['cp_allgather_bytes_per_layer'] / 2**20:.2f} MiB a layer)")
    out["sim"][ctx] = {"c1_step_s": s1["step_s"], "c2_step_s": s2["step_s"], "c2_cp_s": cp}
json.dump(out, open("cp_bench.json", "w"), indent=1)
PYEOF
echo "links: $(cat "$WORK/links.txt")"
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
