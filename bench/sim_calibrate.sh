#!/usr/bin/env bash
# sim_calibrate.sh — does `pipit sim` predict a real pipelined step on this
# machine? For each model and P = 2 case (threads) two predictions of the
# measured step:
#   own    the CPU description fitted (`pipit sim --calibrate`) to the
#          profile of the measured run itself (`pipit train --profile-out`):
#          the per-op costs are measured, the pipeline, messages, bubble and
#          post-loop work are the simulator's;
#   p1     fitted to a separate one-rank run of the same model: also tests
#          that per-op costs carry over from P = 1 to P = 2 (on a loaded
#          machine they do not: other processes take the cores unevenly).
# Usage: bench/sim_calibrate.sh [PIPIT] [STEPS]   (default build/pipit, 8 steps)
# "measured" is the mean wall time of the steps after the first (the
# profiled ones, `step_s` of the profile). Prints one line per case and
# writes sim_calibrate.json and the fitted cpu_<model>.json in the current dir.
set -eu
PIPIT=${1:-build/pipit}
STEPS=${2:-8}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pipit_simcal.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
python3 "$(dirname "$0")/words.py" "$WORK/text.txt"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs"

# name | model flags for train | the same model for sim
MODELS=(
  "tiny|--model tiny|--layers 4 --hidden 128 --heads 4 --seq 64 --vocab 256 --micro-batch 8"
  "small|--ctx 128 --layers 8 --heads 8 --dim 256 --micro-batch 8|--layers 8 --hidden 256 --heads 8 --seq 128 --vocab 256 --micro-batch 8"
)
# schedule | microbatches
CASES=("1f1b|4" "1f1b|8" "gpipe|8" "interleaved-1f1b|8")

echo "[" > sim_calibrate.json
first=1
for m in "${MODELS[@]}"; do
  IFS='|' read -r name train simflags <<<"$m"
  "$PIPIT" train --data "$WORK/text.txt" $train --microbatches 4 --steps "$STEPS" --profile-out "$WORK/$name.prof.json" \
      --json > /dev/null
  "$PIPIT" sim --calibrate "$WORK/$name.prof.json" --out "$WORK/$name.hw.json" 2> /dev/null
  for c in "${CASES[@]}"; do
    IFS='|' read -r sched M <<<"$c"
    "$PIPIT" train --data "$WORK/text.txt" $train --pp 2 --schedule "$sched" --microbatches "$M" \
        --steps "$STEPS" --json --profile-out "$WORK/run.prof.json" > /dev/null
    measured=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["step_s"])' "$WORK/run.prof.json")
    "$PIPIT" sim --calibrate "$WORK/run.prof.json" --out "$WORK/run.hw.json" 2> /dev/null
    B=$(sed -E 's/.*--micro-batch ([0-9]+).*/\1/' <<<"$simflags")
    simulate() {
      "$PIPIT" sim $simflags --global-batch $((B * M)) --pp 2 --schedule "$sched" --hw "$1" --json |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["step_s"])'
    }
    own=$(simulate "$WORK/run.hw.json")
    p1=$(simulate "$WORK/$name.hw.json")
    e_own=$(python3 -c "print('%+.1f' % (100 * ($own / $measured - 1)))")
    e_p1=$(python3 -c "print('%+.1f' % (100 * ($p1 / $measured - 1)))")
    printf "%-6s P=2 %-17s M=%-2s measured %.4f s  simulated: own %.4f s (%s%%)  p1 %.4f s (%s%%)\n" "$name" \
        "$sched" "$M" "$measured" "$own" "$e_own" "$p1" "$e_p1"
    [ $first = 1 ] || echo "," >> sim_calibrate.json
    first=0
    printf '{"model":"%s","schedule":"%s","microbatches":%s,"measured_s":%s,"simulated_own_s":%s,"error_own_pct":%s,"simulated_p1_s":%s,"error_p1_pct":%s}' \
        "$name" "$sched" "$M" "$measured" "$own" "$e_own" "$p1" "$e_p1" >> sim_calibrate.json
  done
  cp "$WORK/$name.hw.json" "cpu_$name.json"
done
echo "]" >> sim_calibrate.json
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
