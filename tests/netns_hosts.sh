#!/usr/bin/env bash
# netns_hosts.sh — two emulated hosts on one machine, for multi-host MPI
# runs without a cluster: two network namespaces joined by a veth pair on a
# private subnet that exists only inside them (10.213.7.1/24 = host a,
# 10.213.7.2/24 = host b), and an rsh agent for Open MPI that "logs in" to
# a host by entering its namespace (nsenter) instead of ssh. mpirun runs in
# host a; Open MPI sees two nodes (one per address in the hostfile), so the
# ranks talk over TCP on the veth pair, as on two machines. Each namespace
# is held by a process (`unshare --net`), not named under /run/netns, so
# nothing is mounted (`ip netns add` bind-mounts /run/netns onto itself,
# and `ip netns del` leaves that mount: a chroot could not be unmounted
# after .ci/run); killing the holders on exit, also on failure or Ctrl-C,
# deletes the namespaces and the veth pair with them.
#
# Usage (root; needs iproute2, util-linux's unshare and nsenter, Open MPI):
#   tests/netns_hosts.sh run [-np N] [MPIRUN_OPTION...] -- CMD [ARG...]
#       runs `mpirun -np N (default 2) --map-by node ... CMD ARG...` across
#       the two hosts (ranks alternate: even ranks on a, odd on b);
#       MPIRUN_OPTIONs (e.g. -x PIPIT_TIMEOUT=30) go to mpirun as they are.
#   e.g. tests/netns_hosts.sh run -- build/pipit train ...
#        tests/netns_hosts.sh run -- sh -c 'ip -o -4 addr show'
# Exit status: CMD's (mpirun's); 77 when not root, or unshare, nsenter or
# ip is missing or cannot make a network namespace here.
# Env: PIPIT_NETNS_NET (default 10.213.7: the /24 used), PIPIT_NETNS_KEEP=1
# leaves the namespaces for a look (their holders' pids are printed: kill
# them to delete the namespaces);
# PIPIT_NETNS_RATE=100mbit shapes the link to that rate both ways (tc tbf;
# this kernel has no netem, so no added delay), with a token bucket of
# PIPIT_NETNS_BURST (default 256kb: a bucket that refills between spaced
# messages lets each through at full speed; a link model wants it small);
# PIPIT_NETNS_INFO=FILE
# writes "NSA VETH_A NSB VETH_B" there once the hosts are up, each NS a
# namespace file (/proc/PID/ns/net; to cut the link:
# nsenter --net=NSB ip link set VETH_B down).
set -u

die_skip() { echo "SKIP: $*"; exit 77; }

[ "${1:-}" = run ] || { sed -n '2,36p' "$0" >&2; exit 2; }
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
command -v unshare >/dev/null && command -v nsenter >/dev/null || die_skip "no unshare/nsenter (util-linux)"
command -v mpirun >/dev/null || die_skip "no mpirun (apt install openmpi-bin)"

NET=${PIPIT_NETNS_NET:-10.213.7}
ID=$$
VA=pv${ID}a VB=pv${ID}b
TMP=$(mktemp -d "${TMPDIR:-/tmp}/pipit_netns.XXXXXX") || exit 1
HOLDERS=()

cleanup() {
    if [ "${PIPIT_NETNS_KEEP:-0}" != 1 ]; then
        # the last process in a namespace gone, the namespace and its end of
        # the veth pair go too
        if [ ${#HOLDERS[@]} -gt 0 ]; then
            kill "${HOLDERS[@]}" 2>/dev/null
            wait "${HOLDERS[@]}" 2>/dev/null
        fi
        rm -rf "$TMP"
    else
        echo "netns_hosts.sh: kept the namespaces (holders ${HOLDERS[*]}) and $TMP" >&2
    fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# new_host VAR: a host, a process in a new network namespace that waits
# until killed or until this script is gone (tail --pid: a SIGKILLed run
# leaves no namespace behind either); VAR = its namespace file
# (/proc/PID/ns/net), set once unshare has made the namespace.
new_host() {
    unshare --net tail --pid=$$ -f /dev/null </dev/null >/dev/null 2>&1 &
    local pid=$! i own
    HOLDERS+=("$pid")
    own=$(readlink /proc/self/ns/net)
    for i in $(seq 100); do
        kill -0 "$pid" 2>/dev/null || return 1
        if [ "$(readlink "/proc/$pid/ns/net" 2>/dev/null)" != "$own" ]; then
            printf -v "$1" %s "/proc/$pid/ns/net"
            return 0
        fi
        sleep 0.05
    done
    return 1
}
new_host NSA || die_skip "unshare --net failed (no permission for network namespaces here?)"
new_host NSB || exit 1
in_ns() { local ns=$1; shift; nsenter --net="$ns" "$@"; }
err=$(in_ns "$NSA" true 2>&1) || die_skip "nsenter does not work here ($err)"
ip link add "$VA" netns "${HOLDERS[0]}" type veth peer name "$VB" netns "${HOLDERS[1]}" || exit 1
in_ns "$NSA" ip addr add "$NET.1/24" dev "$VA" || exit 1
in_ns "$NSB" ip addr add "$NET.2/24" dev "$VB" || exit 1
for ns in "$NSA" "$NSB"; do
    in_ns "$ns" ip link set lo up || exit 1
done
in_ns "$NSA" ip link set "$VA" up || exit 1
in_ns "$NSB" ip link set "$VB" up || exit 1
if [ -n "${PIPIT_NETNS_RATE:-}" ]; then
    for end in "$NSA $VA" "$NSB $VB"; do
        read -r ns dev <<< "$end"
        in_ns "$ns" tc qdisc add dev "$dev" root tbf rate "$PIPIT_NETNS_RATE" burst "${PIPIT_NETNS_BURST:-256kb}" latency 100ms ||
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
exec nsenter --net="\$ns" sh -c "\$*"
AGENT
chmod +x "$TMP/agent"

in_ns "$NSA" mpirun --allow-run-as-root --oversubscribe --hostfile "$TMP/hostfile" \
    -np "$NP" --map-by node --bind-to none \
    --mca plm_rsh_agent "$TMP/agent" \
    --mca pml ob1 --mca btl self,tcp \
    --mca btl_tcp_if_include "$NET.0/24" --mca oob_tcp_if_include "$NET.0/24" \
    "${MPIRUN_OPTS[@]}" "$@"
