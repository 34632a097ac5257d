#!/usr/bin/env bash
# bench/ep_overlap.sh — the EP all-to-all overlapped with the other
# microbatch's compute (overlapped pairs, docs/architecture.md §12) against
# --no-a2a-overlap, on two emulated hosts (tests/netns_hosts.sh: two network
# namespaces, TCP over a veth pair shaped to RATE), one process each: a
# Mixtral-style Llama (--dim DIM, 4 layers, 8 experts top-2, ctx CTX,
# micro-batch B) at --dp 2 --ep 2, M microbatches, one rank per process
# (P = 1: the list F0 B0 F1 B1 ..., pairs B(m) | F(m+1)) and at --pp 2
# --schedule dualpipev (4 processes, two per host). The modes alternate
# over ROUNDS rounds; each run's median step (steps 2..STEPS) and the
# ranks' profiles (mean over ranks): seconds a step in all-to-all finishes (what the exchange still
# costs the rank after the overlap) and starts. Root only (namespaces).
# Usage: bench/ep_overlap.sh   env: BUILD=build ROUNDS=3 STEPS=6 RATE=1gbit DIM=256 CTX=128 B=4 M=4
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build} ROUNDS=${ROUNDS:-3} STEPS=${STEPS:-6} RATE=${RATE:-1gbit}
DIM=${DIM:-256} CTX=${CTX:-128} B=${B:-4} M=${M:-4}
PIPIT=$(realpath "$BUILD/pipit")
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
cat README.md docs/*.md > "$WORK/corpus.txt"
echo "nproc: $(nproc); $(uptime | sed 's/.*load/load/'); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2); link $RATE"
ARGS=(--data "$WORK/corpus.txt" --model moe-tiny --dim "$DIM" --heads 4 --kv-heads 2 --layers 4 --ctx "$CTX"
      --micro-batch "$B" --microbatches "$M" --dp 2 --ep 2 --steps "$STEPS" --json --profile)
summary() { # LOG: median step ms of steps >= 2, rank 0's a2a finish / start seconds per step
    python3 - "$1" "$STEPS" <<'PYEOF'
import json, re, statistics, sys
text = open(sys.argv[1]).read()
ms = [json.loads(l)["ms"] for l in text.splitlines() if l.startswith('{"step"') and json.loads(l)["step"] >= 2]
def secs(kind):  # the mean over the ranks' profiles (each process prints its own)
    v = [float(x) for x in re.findall(r"^\s*" + kind + r"\s+([0-9.]+) s", text, re.M)]
    return sum(v) / len(v) if v else float("nan")
steps = int(sys.argv[2]) - 1  # the profile covers the steps after the first
print("step %7.1f ms   a2a finish %6.1f ms/step   a2a start %5.1f ms/step" % (
    statistics.median(ms), 1e3 * secs("a2a finish") / steps, 1e3 * secs("a2a start") / steps))
PYEOF
}
for layout in "p1 2" "dualpipev 4"; do
    set -- $layout
    extra=()
    [ "$1" = dualpipev ] && extra=(--pp 2 --schedule dualpipev)
    for ((r = 1; r <= ROUNDS; r++)); do
        for mode in overlap serial; do
            flag=()
            [ "$mode" = serial ] && flag=(--no-a2a-overlap)
            PIPIT_NETNS_RATE=$RATE bash tests/netns_hosts.sh run -np "$2" -x PIPIT_TIMEOUT=300 -- \
                "$PIPIT" train "${ARGS[@]}" "${extra[@]}" "${flag[@]}" >"$WORK/run.log" 2>&1 ||
                { echo "run failed:"; tail -5 "$WORK/run.log"; exit 1; }
            printf "%-9s round %d %-7s " "$1" "$r" "$mode"
            summary "$WORK/run.log"
        done
    done
done
