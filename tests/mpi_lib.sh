#!/usr/bin/env bash
# mpi_lib.sh — what the scripts that run pipit under mpirun share
# (test_mpi_train.sh, test_mpi_failfast.sh; sourced, not a test): the skip
# checks, a work directory removed on exit, the environment Open MPI wants
# as root on a small machine, and the FAIL counter.
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
