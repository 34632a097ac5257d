#!/usr/bin/env bash
# mpi_lib.sh — what the scripts that run pipit under mpirun share
# (test_mpi_train.sh, test_mpi_tp.sh, test_mpi_failfast.sh; sourced, not a
# test): the skip checks, a work directory removed on exit, the environment
# Open MPI wants as root on a small machine, the FAIL counter, and running
# a command as one rank per process against the threads run.
# mpi_setup CLI SRC NAME: skips (exit 77, with the reason) without mpirun,
# without MPI in CLI or in a sanitizer build; then cd's into the new work
# directory, which holds corpus.txt (the repository's README and docs).
mpi_setup() {
    CLI=$1 SRC=$2
    command -v mpirun >/dev/null || { echo "SKIP: no mpirun (apt install openmpi-bin)"; exit 77; }
    ldd "$CLI" 2>/dev/null | grep -q libmpi || { echo "SKIP: this pipit was built without MPI"; exit 77; }
    [ -n "${PIPIT_SANITIZE:-}" ] && { echo "SKIP: sanitizer build (Open MPI's own memory use is out of scope)"; exit 77; }
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/pipit_$3.XXXXXX")
    trap 'rm -rf "$WORK"' EXIT
    cd "$WORK" || exit 1
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
    cat "$SRC"/README.md "$SRC"/docs/*.md > corpus.txt
    failures=0
}
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
losses() { grep -o '"loss":[^,]*' "$1"; }
# the last line and the status every script ends with
mpi_done() {
    echo "$((failures == 0 ? 1 : 0)) passed, $((failures == 0 ? 0 : 1)) failed"
    [ "$failures" -eq 0 ]
}

MPI_X=() # more mpirun options for the next runs (-x VAR=...)
# mpi NP BTL CMD...: one rank per process, processes share 2 cores
mpi() {
    local np=$1 btl=$2
    shift 2
    timeout 300 mpirun -np "$np" --bind-to none --mca btl "$btl" --mca btl_tcp_if_include lo \
        --mca oob_tcp_if_include lo -x PIPIT_TIMEOUT=120 "${MPI_X[@]}" "$@"
}

# same_as_threads NAME NP BTL ARGS...: `pipit train ARGS` on threads and
# under mpirun print the same losses (rank 0 as many lines) and save the
# same checkpoint bytes (t.st, m.st).
same_as_threads() {
    local name=$1 np=$2 btl=$3
    shift 3
    "$CLI" train "$@" --save t.st > t.log 2> t.err || { fail "$name: threads run: $(cat t.err)"; return; }
    mpi "$np" "$btl" "$CLI" train "$@" --save m.st > m.log 2> m.err || {
        fail "$name: mpirun: $(tail -3 m.err)"
        return
    }
    [ "$(wc -l < m.log)" -eq "$(wc -l < t.log)" ] || fail "$name: rank 0 printed $(wc -l < m.log) lines, threads $(wc -l < t.log)"
    diff <(losses t.log) <(losses m.log) > /dev/null || fail "$name: losses differ: $(losses t.log | tail -1) vs $(losses m.log | tail -1)"
    cmp -s t.st m.st || fail "$name: checkpoints differ"
}

# same_on_hosts NAME NP ARGS...: as same_as_threads, with the NP ranks
# alternating between two emulated hosts (network namespaces, TCP between
# them: tests/netns_hosts.sh); said and skipped where the machine cannot
# make them (not root, no ip, no namespaces).
same_on_hosts() {
    local name=$1 np=$2
    shift 2
    if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null; then
        echo "$name: emulated hosts skipped (needs root and ip)"
        return
    fi
    "$CLI" train "$@" --save t.st > t.log 2> t.err || { fail "$name: threads run: $(cat t.err)"; return; }
    bash "$SRC/tests/netns_hosts.sh" run -np "$np" -x PIPIT_TIMEOUT=120 -- "$CLI" train "$@" --save "$WORK/h.st" \
        > h.log 2> h.err
    local rc=$?
    if [ $rc -eq 77 ]; then
        echo "$name: emulated hosts skipped: $(tail -1 h.log)"
    elif [ $rc -ne 0 ]; then
        fail "$name: emulated hosts: $(tail -3 h.err)"
    else
        diff <(losses t.log) <(losses h.log) > /dev/null || fail "$name: emulated hosts: losses differ"
        cmp -s t.st "$WORK/h.st" || fail "$name: emulated hosts: checkpoints differ"
        echo "$name on two emulated hosts: the threads run's bits"
    fi
}
