#!/usr/bin/env bash
# links.sh — does `pipit sim` predict a pipeline whose two stages sit on
# two hosts joined by a slow link? Two emulated hosts (tests/netns_hosts.sh:
# network namespaces on a veth pair, shaped with tc tbf to RATE both ways,
# a bucket of about 1 ms of the rate),
# P = 2 across them (one process per host, TCP), for two link rates and two
# schedules:
#   measured   the median step of `pipit train` under mpirun across the hosts
#              (the steps after the first two), with Open MPI's defaults;
#   eager      the same with its TCP eager limit raised to 1 MiB, so a stage
#              message (256 KiB here) leaves without the rendezvous
#              handshake, whose reply queues behind the data going the other
#              way and waits for the receiver to reach its receive;
#   predicted  `pipit sim` on a CPU description fitted to a one-rank profile
#              of the same model (`pipit train --profile-out`), whose links
#              `pipit sim --calibrate` measured across the same shaped link
#              (a ping-pong between the two hosts' processes): against the
#              defaults with --eager-limit 65536 (each message a rendezvous
#              that waits for its receiver), against eager without.
# Usage (root): bench/links.sh [PIPIT] [STEPS]   (default build/pipit, 12 steps)
# env RATES="100mbit 1gbit" (tc rates). Prints one line per case and writes
# links.json in the current directory.
set -eu
PIPIT=$(realpath "${1:-build/pipit}")
STEPS=${2:-12}
RATES=${RATES:-100mbit 1gbit}
HOSTS=$(dirname "$(realpath "$0")")/../tests/netns_hosts.sh
[ "$(id -u)" -eq 0 ] || { echo "links.sh: needs root (network namespaces)"; exit 2; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pipit_links.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
cat "$(dirname "$0")"/../README.md "$(dirname "$0")"/../docs/*.md > "$WORK/text.txt"
echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) CPUs"

M=8
EAGER=1048576 # bytes: Open MPI's TCP eager limit for the "eager" runs (its default: 64 KiB)
TRAIN=(--data "$WORK/text.txt" --model tiny --microbatches "$M" --steps "$STEPS" --json)
SIM=(--layers 4 --hidden 128 --heads 4 --seq 64 --vocab 256 --micro-batch 8 --global-batch $((8 * M)) --pp 2)
median_ms() { grep -o '"ms":[0-9.]*' "$1" | cut -d: -f2 | tail -n +3 | sort -g | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
json() { python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$@"; }

"$PIPIT" train "${TRAIN[@]}" --profile-out "$WORK/prof.json" > /dev/null
echo "[" > links.json
first=1
# tbf's token bucket: about 1 ms of the rate (at least 16 KiB), so the link
# is a link at every message spacing; a bucket as large as a message (the
# netns default) lets messages spaced by compute through at full speed.
burst_of() { python3 -c '
import re, sys
m = re.fullmatch(r"([0-9.]+)([kmg]?)bit", sys.argv[1].lower())
if not m: sys.exit("links.sh: rate %r: want NUMBER[k|m|g]bit" % sys.argv[1])
bps = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)] / 8
print("%db" % max(16384, int(bps * 1e-3)))' "$1"; }
for rate in $RATES; do
    export PIPIT_NETNS_BURST
    PIPIT_NETNS_BURST=$(burst_of "$rate")
    PIPIT_NETNS_RATE=$rate bash "$HOSTS" run -np 2 -- "$PIPIT" sim --calibrate "$WORK/prof.json" \
        --out "$WORK/hw.json" 2> "$WORK/cal.err" > /dev/null || { cat "$WORK/cal.err"; exit 1; }
    bw=$(json "$WORK/hw.json" 'j["inter_node"]["bandwidth"]')
    lat=$(json "$WORK/hw.json" 'j["inter_node"]["latency"]')
    for sched in 1f1b interleaved-1f1b; do
        PIPIT_NETNS_RATE=$rate bash "$HOSTS" run -np 2 -- "$PIPIT" train "${TRAIN[@]}" --pp 2 --schedule "$sched" \
            > "$WORK/m.log" 2> "$WORK/m.err" || { tail -3 "$WORK/m.err"; exit 1; }
        measured=$(median_ms "$WORK/m.log")
        # the same with every stage message sent eagerly (no rendezvous handshake)
        OMPI_MCA_btl_tcp_eager_limit=$EAGER OMPI_MCA_btl_tcp_max_send_size=$EAGER PIPIT_NETNS_RATE=$rate \
            bash "$HOSTS" run -np 2 -- "$PIPIT" train "${TRAIN[@]}" --pp 2 --schedule "$sched" \
            > "$WORK/e.log" 2> "$WORK/e.err" || { tail -3 "$WORK/e.err"; exit 1; }
        eager=$(median_ms "$WORK/e.log")
        sim_ms() { "$PIPIT" sim "${SIM[@]}" --schedule "$sched" --hw "$WORK/hw.json" --json "$@" |
                   python3 -c 'import json,sys; print(1e3 * json.load(sys.stdin)["step_s"])'; }
        predicted=$(sim_ms --eager-limit 65536) # Open MPI's TCP default: a rendezvous above 64 KiB
        predicted_e=$(sim_ms)                   # every message eager
        err=$(python3 -c "print('%+.1f' % (100 * ($predicted / $measured - 1)))")
        err_e=$(python3 -c "print('%+.1f' % (100 * ($predicted_e / $eager - 1)))")
        printf "%-8s link %7.2f MB/s %4.0f us  %-17s defaults: measured %7.1f predicted %7.1f ms (%s%%)   eager: measured %7.1f predicted %7.1f ms (%s%%)\n" \
            "$rate" "$(python3 -c "print($bw / 1e6)")" "$(python3 -c "print($lat * 1e6)")" "$sched" "$measured" \
            "$predicted" "$err" "$eager" "$predicted_e" "$err_e"
        [ $first = 1 ] || echo "," >> links.json
        first=0
        printf '{"rate":"%s","link_bw":%s,"link_lat":%s,"schedule":"%s","measured_ms":%s,"predicted_ms":%s,"error_pct":%s,"eager_ms":%s,"predicted_eager_ms":%s,"error_eager_pct":%s}' \
            "$rate" "$bw" "$lat" "$sched" "$measured" "$predicted" "$err" "$eager" "$predicted_e" "$err_e" >> links.json
    done
done
echo "]" >> links.json
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
