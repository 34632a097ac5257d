#!/usr/bin/env bash
# test_examples_strict.sh — every examples/*.c compiles as a user's strict
# build does: C11 with -Wall -Wextra -Werror at -O2 and at -O3 (CMake's
# Release; GCC's -Wformat-truncation needs the optimizer to see a cut, so
# a -O0 or project-flags build can pass while the user's fails), with the
# C compiler CMake found ($CC) and with clang when there is one. Only the
# public headers (include/) are on the path, as installed.
# Usage: test_examples_strict.sh PIPIT SRCDIR   (env: CC from CMake)
set -u
SRC=${2:?usage: test_examples_strict.sh PIPIT_BINARY SOURCE_DIR}
CCS=("${CC:-cc}")
command -v clang >/dev/null && [ "$(basename "${CC:-cc}")" != clang ] && CCS+=(clang)
failures=0
n=0
for cc in "${CCS[@]}"; do
    command -v "$cc" >/dev/null || { echo "SKIP: no C compiler '$cc'"; exit 77; }
    for ex in "$SRC"/examples/*.c; do
        for opt in -O2 -O3; do
            if ! out=$("$cc" -std=c11 "$opt" -Wall -Wextra -Werror -I"$SRC/include" -c "$ex" -o /dev/null 2>&1); then
                echo "FAIL: $cc -std=c11 $opt -Wall -Wextra -Werror $(basename "$ex"):"
                echo "$out"
                failures=$((failures + 1))
            fi
            n=$((n + 1))
        done
    done
done
[ "$failures" -eq 0 ] || { echo "test_examples_strict: $failures of $n builds failed"; exit 1; }
echo "test_examples_strict: ok ($n builds: ${CCS[*]} x -O2 -O3)"
