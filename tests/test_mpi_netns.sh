#!/usr/bin/env bash
# test_mpi_netns.sh — the MPI transport between two emulated hosts (network
# namespaces on a veth pair, tests/netns_hosts.sh): one rank per host, TCP
# between them. Checks that the ranks really run in different namespaces
# (each reports the address it sees), then runs the MPI transport tests;
# afterwards no mount is left that was not there before.
# Usage: test_mpi_netns.sh PIPIT_TESTS SOURCE_DIR [TEST...]
#        (default TEST: mpi_transport_pingpong); exit 77 = skipped (not
#        root, no network namespaces here, no mpirun).
set -u
TESTS_BIN=${1:?usage: test_mpi_netns.sh PIPIT_TESTS SOURCE_DIR [TEST...]}
SRC=${2:?usage: test_mpi_netns.sh PIPIT_TESTS SOURCE_DIR [TEST...]}
shift 2
[ $# -gt 0 ] || set -- mpi_transport_pingpong
OUT=$(mktemp "${TMPDIR:-/tmp}/pipit_netns_out.XXXXXX") || exit 1
trap 'rm -f "$OUT"' EXIT
# the emulated hosts leave no mount behind (ip netns add's bind mount of
# /run/netns onto itself outlived ip netns del, and a chroot could not be
# unmounted after .ci/run)
mounts() { awk '{print $5}' /proc/self/mountinfo | sort; }
before=$(mounts)

bash "$SRC/tests/netns_hosts.sh" run -x PIPIT_TIMEOUT="${PIPIT_TIMEOUT:-30}" -- \
    sh -c 'echo "rank $OMPI_COMM_WORLD_RANK sees $(ip -o -4 addr show | grep -o "10\.213\.7\.[0-9]*" | tr "\n" " ")"; exec "$0" "$@"' \
    "$TESTS_BIN" "$@" 2>&1 | tee "$OUT"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 77 ] && exit 77
[ "$rc" -eq 0 ] || { echo "FAIL: mpirun across the emulated hosts exited $rc"; exit 1; }
left=$(comm -13 <(echo "$before") <(mounts))
[ -z "$left" ] || { echo "FAIL: the emulated hosts left mounts behind: $left"; exit 1; }
net=${PIPIT_NETNS_NET:-10.213.7}
grep -q "^rank 0 sees $net.1 $" "$OUT" || { echo "FAIL: rank 0 is not alone in host a ($net.1)"; exit 1; }
grep -q "^rank 1 sees $net.2 $" "$OUT" || { echo "FAIL: rank 1 is not alone in host b ($net.2)"; exit 1; }
[ "$(grep -c ' passed, 0 failed' "$OUT")" -eq 2 ] || { echo "FAIL: not both processes passed"; exit 1; }
echo "ok: ranks 0 and 1 on two emulated hosts"
