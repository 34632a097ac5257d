# mpi_lib.sh — what the mpirun test scripts share (sourced, not a test;
# test_mpi_train.sh, test_mpi_tp.sh): they set CLI and SRC first, and
# fail() and losses() before same_as_threads runs.
#   mpi_setup NAME             skips (exit 77) without mpirun, an MPI build
#                              or in a sanitizer build; cd's into a temp
#                              dir removed on exit, with corpus.txt (the docs)
#   mpi NP BTL CMD...          CMD as NP processes (one rank each, sharing the
#                              cores), BTL the Open MPI transport (self,vader
#                              or self,tcp over loopback)
#   same_as_threads NAME NP BTL ARGS...
#                              `pipit train ARGS` on threads and under mpirun
#                              print the same losses (and as many lines) and
#                              save the same checkpoint bytes (t.st, m.st)

mpi_setup() {
    skip() { echo "SKIP: $*"; exit 77; }
    command -v mpirun >/dev/null || skip "no mpirun (apt install openmpi-bin)"
    ldd "$CLI" 2>/dev/null | grep -q libmpi || skip "this pipit was built without MPI"
    [ -n "${PIPIT_SANITIZE:-}" ] && skip "sanitizer build (Open MPI's own memory use is out of scope)"
    WORK=$(mktemp -d "${TMPDIR:-/tmp}/pipit_mpi_$1.XXXXXX")
    trap 'rm -rf "$WORK"' EXIT
    cd "$WORK" || exit 1
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
    cat "$SRC"/README.md "$SRC"/docs/*.md > corpus.txt
}

mpi() {
    local np=$1 btl=$2
    shift 2
    timeout 300 mpirun -np "$np" --bind-to none --mca btl "$btl" --mca btl_tcp_if_include lo \
        --mca oob_tcp_if_include lo -x PIPIT_TIMEOUT=120 "$@"
}

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
