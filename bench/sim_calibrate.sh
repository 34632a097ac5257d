#!/usr/bin/env bash
# sim_calibrate.sh — does `pipit sim` predict a real pipelined step on this
# machine? For each model: profile a one-rank run (`pipit train --profile-out`),
# fit the CPU description from it (`pipit sim --calibrate`), then measure
# P = 2 pipelines (threads) and compare their median step with the simulated
# one. The calibration run is separate from the measured runs.
# Usage: bench/sim_calibrate.sh [PIPIT] [STEPS]   (default build/pipit, 8 steps)
# Prints one line per case and writes sim_calibrate.json in the current dir.
set -eu
PIPIT=${1:-build/pipit}
STEPS=${2:-8}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pipit_simcal.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
python3 - "$WORK/text.txt" <<'PYEOF'
import random, sys
r = random.Random(7)
words = ["the ", "cat ", "sat ", "on ", "a ", "mat. ", "dog ", "ran ", "to ", "park, "]
open(sys.argv[1], "w").write("".join(r.choice(words) for _ in range(60000)))
PYEOF
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs"

# name | model flags for train | the same model for sim
MODELS=(
  "tiny|--model tiny|--layers 4 --hidden 128 --heads 4 --seq 64 --vocab 256 --micro-batch 8"
  "small|--ctx 128 --layers 6 --heads 8 --dim 256 --micro-batch 8|--layers 6 --hidden 256 --heads 8 --seq 128 --vocab 256 --micro-batch 8"
)
# schedule | microbatches
CASES=("1f1b|4" "1f1b|8" "gpipe|8" "interleaved-1f1b|8")

median_step() { # the median ms of the steps after the first, in seconds
  python3 -c 'import json,sys
ms = sorted(json.loads(l)["ms"] for l in sys.stdin.read().splitlines()[1:] if l.startswith("{\"step\""))
print(ms[len(ms) // 2] / 1e3)'
}

echo "[" > sim_calibrate.json
first=1
for m in "${MODELS[@]}"; do
  IFS='|' read -r name train simflags <<<"$m"
  "$PIPIT" train --data "$WORK/text.txt" $train --microbatches 4 --steps "$STEPS" --profile-out "$WORK/$name.prof.json" \
      --json > /dev/null
  "$PIPIT" sim --calibrate "$WORK/$name.prof.json" --out "$WORK/$name.hw.json" 2> /dev/null
  for c in "${CASES[@]}"; do
    IFS='|' read -r sched M <<<"$c"
    measured=$("$PIPIT" train --data "$WORK/text.txt" $train --pp 2 --schedule "$sched" --microbatches "$M" \
        --steps "$STEPS" --json | median_step)
    B=$(sed -E 's/.*--micro-batch ([0-9]+).*/\1/' <<<"$simflags")
    simulated=$("$PIPIT" sim $simflags --global-batch $((B * M)) --pp 2 --schedule "$sched" --hw "$WORK/$name.hw.json" \
        --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["step_s"])')
    err=$(python3 -c "print('%+.1f' % (100 * ($simulated / $measured - 1)))")
    printf "%-6s P=2 %-17s M=%-2s measured %.4f s  simulated %.4f s  error %s%%\n" "$name" "$sched" "$M" \
        "$measured" "$simulated" "$err"
    [ $first = 1 ] || echo "," >> sim_calibrate.json
    first=0
    printf '{"model":"%s","schedule":"%s","microbatches":%s,"measured_s":%s,"simulated_s":%s,"error_pct":%s}' \
        "$name" "$sched" "$M" "$measured" "$simulated" "$err" >> sim_calibrate.json
  done
  cp "$WORK/$name.hw.json" "cpu_$name.json"
done
echo "]" >> sim_calibrate.json
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
