#!/usr/bin/env bash
# check_deps.sh [PIPIT] — each job installs what it uses, and no more:
#   - the main job (examples/quickstart.sh) installs `install_deps.sh
#     --main`; the commands it runs and every shared library the built
#     pipit loads (ldd PIPIT) come from those packages (or what they pull
#     in, or Debian's Essential set), and none of the test-only packages
#     (python3-torch, clang, ...) is among them;
#   - CI (.ci/run) installs both lists; every command it and the tests run
#     (CI_CMDS below, kept next to the scripts that use them) and the Python
#     modules of the oracle come from them;
#   - the CUDA pass, the one thing no list can install, is guarded: .ci/run
#     says "skipped: no CUDA toolkit" when nvcc is absent.
# It would have caught a CUDA pass that needs a toolkit CI never installs
# (nvcc is owned by no package of the lists) and a quickstart that installs
# PyTorch. Needs dpkg and apt-cache (Debian); exit 77 elsewhere.
# Usage: .ci/check_deps.sh [PIPIT_BINARY]   (from .ci/run and tests/test_deps.sh)
set -uo pipefail
cd "$(dirname "$0")/.."
PIPIT=${1:-}
command -v dpkg >/dev/null && command -v apt-cache >/dev/null || { echo "SKIP: no dpkg/apt-cache (not Debian)"; exit 77; }

# Commands the main job runs, and those CI and the test scripts run.
MAIN_CMDS="cmake ninja cc"
CI_CMDS="cmake ctest ninja cc gcc g++ clang python3 mpirun mpiexec ip unshare nsenter nm objdump pkg-config script"
CI_PY_MODULES="torch numpy pytest"

failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

MAIN=$(bash tools/install_deps.sh --print main)
TEST=$(bash tools/install_deps.sh --print test)
for p in $TEST; do
    grep -qw -- "$p" <<<"$MAIN" && fail "$p is in both lists of tools/install_deps.sh"
done
grep -q 'install_deps.sh --main' examples/quickstart.sh || fail "examples/quickstart.sh does not install the --main list"
grep -Eq 'install_deps.sh$' .ci/run || fail ".ci/run does not install both lists"
grep -q 'skipped: no CUDA toolkit' .ci/run || fail ".ci/run's CUDA pass is not guarded by a check for the toolkit"

# closure LIST: the packages LIST installs (its hard dependencies, recursively)
closure() {
    # shellcheck disable=SC2086
    apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
        --no-enhances $1 2>/dev/null | grep -v '^ ' | tr -d '<>' | sort -u
}
ESSENTIAL=$(dpkg-query -W -f='${Package} ${Essential}\n' 2>/dev/null | awk '$2 == "yes" {print $1}')
MAIN_ONLY=$(closure "$MAIN")
[ -n "$MAIN_ONLY" ] || { echo "SKIP: apt-cache knows no package lists here (run apt-get update)"; exit 77; }
MAIN_SET=$(echo "$MAIN_ONLY"; echo "$ESSENTIAL")
ALL_SET=$(closure "$MAIN $TEST"; echo "$ESSENTIAL")
# The commands as Debian installs them (a PATH of the system's folders:
# a python3 of pyenv or a toolkit under /usr/local proves nothing here).
SYSPATH=/usr/sbin:/usr/bin:/sbin:/bin

# owner FILE: the package that installed it (following symlinks and alternatives)
owner() {
    local f
    f=$(readlink -f -- "$1") || return 1
    { dpkg -S -- "$f" 2>/dev/null || dpkg -S -- "${f#/usr}" 2>/dev/null; } | head -n1 | cut -d: -f1
}
# from_list WHAT FILE SET LISTNAME: FILE's package is in SET
from_list() {
    local pkg
    pkg=$(owner "$2")
    if [ -z "$pkg" ]; then
        fail "$1 ($2) comes from no Debian package: $4 cannot install it"
    elif ! grep -qx -- "$pkg" <<<"$3"; then
        fail "$1 ($2) comes from $pkg, which $4 does not install"
    fi
}
for c in $MAIN_CMDS; do
    p=$(PATH=$SYSPATH command -v "$c") || { fail "the main job's command $c is not installed"; continue; }
    from_list "command $c" "$p" "$MAIN_SET" "install_deps.sh --main"
done
for c in $CI_CMDS; do
    p=$(PATH=$SYSPATH command -v "$c") || { fail "CI's command $c is not installed"; continue; }
    from_list "command $c" "$p" "$ALL_SET" "install_deps.sh"
done
for m in $CI_PY_MODULES; do
    f=$(/usr/bin/python3 -c "import $m, sys; sys.stdout.write($m.__file__)" 2>/dev/null) ||
        { fail "Python module $m does not import in /usr/bin/python3"; continue; }
    from_list "Python module $m" "$f" "$ALL_SET" "install_deps.sh"
done
if [ -n "$PIPIT" ]; then # what the built CLI loads: the main job runs it
    while read -r lib; do
        from_list "library $(basename "$lib") of pipit" "$lib" "$MAIN_SET" "install_deps.sh --main"
    done < <(ldd "$PIPIT" | awk '$3 ~ /^\// {print $3}')
fi
for p in python3-torch python3-numpy python3-pytest clang; do # test-only: the main job must not install them
    grep -qx -- "$p" <<<"$MAIN_ONLY" && fail "install_deps.sh --main installs $p (only the tests need it)"
done

if [ "$failures" -ne 0 ]; then
    echo "check_deps: $failures failure(s)" >&2
    exit 1
fi
echo "check_deps: ok (main job: $(wc -w <<<"$MAIN") packages listed, $(wc -l <<<"$MAIN_ONLY") with dependencies)"
