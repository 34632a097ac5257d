#!/usr/bin/env bash
# netns_hosts.sh — two emulated hosts on one machine, for multi-host MPI
# runs without a cluster: two network namespaces joined by a veth pair on a
# private subnet that exists only inside them (10.213.7.1/24 = host a,
# 10.213.7.2/24 = host b), and an rsh agent for Open MPI that "logs in" to
# a host by entering its namespace (`ip netns exec`) instead of ssh. mpirun
# runs in host a; Open MPI sees two nodes (one per address in the
# hostfile), so the ranks talk over TCP on the veth pair, as on two
# machines. Everything is deleted on exit, also on failure or Ctrl-C.
#
# Usage (root; needs iproute2 and Open MPI):
#   tests/netns_hosts.sh run [-np N] [MPIRUN_OPTION...] -- CMD [ARG...]
#       runs `mpirun -np N (default 2) --map-by node ... CMD ARG...` across
#       the two hosts (ranks alternate: even ranks on a, odd on b);
#       MPIRUN_OPTIONs (e.g. -x PIPIT_TIMEOUT=30) go to mpirun as they are.
#   e.g. tests/netns_hosts.sh run -- build/pipit train ...
#        tests/netns_hosts.sh run -- sh -c 'ip -o -4 addr show'
# Exit status: CMD's (mpirun's); 77 when not root, `ip netns` is missing or
# cannot enter a namespace here (a chroot whose / is not a mount point).
# Env: PIPIT_NETNS_NET (default 10.213.7: the /24 used), PIPIT_NETNS_KEEP=1
# leaves the namespaces for a look (delete them with `ip netns del`);
# PIPIT_NETNS_RATE=100mbit shapes the link to that rate both ways (tc tbf;
# this kernel has no netem, so no added delay), with a token bucket of
# PIPIT_NETNS_BURST (default 256kb: a bucket that refills between spaced
# messages lets each through at full speed; a link model wants it small);
# PIPIT_NETNS_INFO=FILE
# writes "NSA VETH_A NSB VETH_B" there once the hosts are up (to cut the
# link: ip -n NSB link set VETH_B down).
set -u

die_skip() { echo "SKIP: $*"; exit 77; }

[ "${1:-}" = run ] || { sed -n '2,24p' "$0" >&2; exit 2; }
shift
NP=2
MPIRUN_OPTS=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do
    if [ "$1" = -np ] || [ "$1" = -n ]; then NP=$2; shift 2; continue; fi
    MPIRUN_OPTS+=("$1")
    shift
done
[ "${1:-}" = -- ] || { echo "netns_hosts.sh: missing -- CMD" >&2; exit 2; }
shift
[ $# -gt 0 ] || { echo "netns_hosts.sh: missing CMD after --" >&2; exit 2; }

[ "$(id -u)" -eq 0 ] || die_skip "not root (network namespaces need root)"
command -v ip >/dev/null || die_skip "no ip (apt install iproute2)"
command -v mpirun >/dev/null || die_skip "no mpirun (apt install openmpi-bin)"

NET=${PIPIT_NETNS_NET:-10.213.7}
ID=$$
NSA=pipit${ID}a NSB=pipit${ID}b
VA=pv${ID}a VB=pv${ID}b
TMP=$(mktemp -d "${TMPDIR:-/tmp}/pipit_netns.XXXXXX") || exit 1

cleanup() {
    if [ "${PIPIT_NETNS_KEEP:-0}" != 1 ]; then
        ip netns del "$NSA" 2>/dev/null
        ip netns del "$NSB" 2>/dev/null # the veth pair goes with them
        rm -rf "$TMP"
    else
        echo "netns_hosts.sh: kept namespaces $NSA $NSB and $TMP" >&2
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "$NSA" 2>/dev/null || die_skip "ip netns add failed (no permission for network namespaces here?)"
ip netns add "$NSB" || exit 1
# `ip netns exec` makes a mount namespace and remounts / as a slave; in a
# chroot whose root is not a mount point that fails ("mount --make-rslave
# /: Invalid argument"): a facility this machine lacks, not a failure.
err=$(ip netns exec "$NSA" true 2>&1) || die_skip "ip netns exec does not work here ($err): a chroot whose / is not a mount point?"
ip link add "$VA" netns "$NSA" type veth peer name "$VB" netns "$NSB" || exit 1
ip -n "$NSA" addr add "$NET.1/24" dev "$VA" || exit 1
ip -n "$NSB" addr add "$NET.2/24" dev "$VB" || exit 1
for ns in "$NSA" "$NSB"; do
    ip -n "$ns" link set lo up || exit 1
done
ip -n "$NSA" link set "$VA" up || exit 1
ip -n "$NSB" link set "$VB" up || exit 1
if [ -n "${PIPIT_NETNS_RATE:-}" ]; then
    for end in "$NSA $VA" "$NSB $VB"; do
        read -r ns dev <<< "$end"
        ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate "$PIPIT_NETNS_RATE" burst "${PIPIT_NETNS_BURST:-256kb}" latency 100ms ||
            die_skip "tc tbf is not available here (PIPIT_NETNS_RATE)"
    done
fi
[ -n "${PIPIT_NETNS_INFO:-}" ] && echo "$NSA $VA $NSB $VB" > "$PIPIT_NETNS_INFO"

# The hostfile: one slot per host. The agent maps an address to the
# namespace that owns it; Open MPI calls it as `AGENT [opts] HOST CMD...`
# like ssh, and like ssh the words of CMD go to a shell as one line.
printf '%s slots=1\n%s slots=1\n' "$NET.1" "$NET.2" >"$TMP/hostfile"
cat >"$TMP/agent" <<AGENT
#!/bin/sh
while [ \$# -gt 0 ]; do case "\$1" in -*) shift ;; *) break ;; esac; done
host=\$1; shift
case "\$host" in
    $NET.1) ns=$NSA ;;
    $NET.2) ns=$NSB ;;
    *) echo "netns agent: unknown host \$host" >&2; exit 255 ;;
esac
exec ip netns exec "\$ns" sh -c "\$*"
AGENT
chmod +x "$TMP/agent"

ip netns exec "$NSA" mpirun --allow-run-as-root --oversubscribe --hostfile "$TMP/hostfile" \
    -np "$NP" --map-by node --bind-to none \
    --mca plm_rsh_agent "$TMP/agent" \
    --mca pml ob1 --mca btl self,tcp \
    --mca btl_tcp_if_include "$NET.0/24" --mca oob_tcp_if_include "$NET.0/24" \
    "${MPIRUN_OPTS[@]}" "$@"
