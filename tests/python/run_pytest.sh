#!/usr/bin/env bash
# run_pytest.sh -- the ctest entry python_pytest (python/pipit.cmake): pytest
# over tests/python with this build's shared library (PIPIT_LIBRARY), CLI
# (PIPIT_CLI) and build-tree package (PYTHONPATH). Exit 77 (skipped) without
# python3-pytest, and under ThreadSanitizer (a TSan library cannot be loaded
# into an uninstrumented python3). Under ASan the sanitizer runtime is
# preloaded (it must come first) and leak checking is off: CPython keeps
# interned objects to the end by design; pipit's own leaks are covered by the
# C tests, and here by the RSS test.
set -u
case "${PIPIT_SANITIZE:-}" in
    *thread*) echo "SKIP: python_pytest: a ThreadSanitizer libpipit cannot be loaded by python3"; exit 77 ;;
    *address*)
        asan=$(${CC:-cc} -print-file-name=libasan.so)
        [ -e "$asan" ] || { echo "SKIP: python_pytest: no libasan.so to preload"; exit 77; }
        export LD_PRELOAD="$asan" ASAN_OPTIONS="detect_leaks=0:abort_on_error=1" PIPIT_UNDER_ASAN=1 ;;
esac
# the python3 on the PATH, else Debian's (a pyenv python3 first on the PATH may lack pytest)
py=""
for c in python3 /usr/bin/python3; do
    if command -v "$c" >/dev/null && "$c" -c 'import pytest' 2>/dev/null; then py=$c; break; fi
done
[ -n "$py" ] || { echo "SKIP: python_pytest: python3-pytest is not installed"; exit 77; }
cd "${PIPIT_SOURCE_DIR:-$(dirname "$0")/../..}" || exit 1
exec "$py" -m pytest -q -p no:cacheprovider tests/python
