#!/usr/bin/env bash
# test_exports.sh — the shared library exports exactly the public API: every
# dynamic symbol it defines starts with pipit_ (never pipit__, the internal
# prefix), every PIPIT_API function declared in include/*.h is exported, and
# nothing is exported that no public header declares. The library is
# $PIPIT_SHARED_LIB (CMake sets it: libpipit.so in a shared build, else
# libpipit_shared_check.so made from the same objects); a libpipit.so must
# also carry a versioned SONAME. Usage: test_exports.sh PIPIT SRCDIR
set -u
SRC=${2:?usage: test_exports.sh PIPIT_BINARY SOURCE_DIR}
LIB=${PIPIT_SHARED_LIB:-}
[ -n "$LIB" ] || { echo "SKIP: PIPIT_SHARED_LIB not set (ctest sets it)"; exit 77; }
[ -f "$LIB" ] || { echo "FAIL: no shared library at $LIB"; exit 1; }
command -v nm >/dev/null || { echo "SKIP: no nm"; exit 77; }

failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

# Symbols the toolchain itself may define in any shared object.
toolchain_re='^(_init|_fini|_edata|_end|__bss_start|_DYNAMIC|_GLOBAL_OFFSET_TABLE_|__dso_handle)$'

exported=$(nm -D --defined-only "$LIB" | awk 'NF >= 3 {print $NF}' | sed 's/@.*//' | sort -u)
[ -n "$exported" ] || fail "$LIB exports nothing"

while read -r sym; do
    [ -n "$sym" ] || continue
    if [[ $sym == pipit__* ]]; then
        fail "internal symbol exported: $sym"
    elif [[ $sym != pipit_* ]] && ! [[ $sym =~ $toolchain_re ]]; then
        fail "exported symbol outside the pipit_ namespace: $sym"
    fi
done <<<"$exported"

# PIPIT_API declarations of all public headers (declarations may span lines;
# preprocessor lines, continued ones included, and comments are dropped).
declared=$(cat "$SRC"/include/*.h | sed -e ':a' -e '/\\$/N; s/\\\n//; ta' | grep -v '^[[:space:]]*#' |
           tr '\n' ' ' | sed 's|/\*[^*]*\*\+\([^/*][^*]*\*\+\)*/| |g' |
           grep -oE 'PIPIT_API[^;{}()]*\(' | grep -oE '[A-Za-z_][A-Za-z0-9_]*[[:space:]]*\($' |
           tr -d '( ' | sort -u)
[ -n "$declared" ] || fail "found no PIPIT_API declaration in $SRC/include/*.h"

for core in pipit_graph_new pipit_compile pipit_step pipit_errmsg pipit_status_name; do
    grep -qx -- "$core" <<<"$exported" || fail "core function not exported: $core"
done
while read -r sym; do
    [ -n "$sym" ] || continue
    grep -qx -- "$sym" <<<"$exported" || fail "declared PIPIT_API in include/ but not exported: $sym"
done <<<"$declared"
while read -r sym; do
    [[ $sym == pipit_* && $sym != pipit__* ]] || continue
    grep -qx -- "$sym" <<<"$declared" || fail "exported but declared PIPIT_API in no public header: $sym"
done <<<"$exported"

if [[ $(basename "$LIB") == libpipit.so* ]]; then
    soname=$(objdump -p "$LIB" 2>/dev/null | awk '$1 == "SONAME" {print $2}')
    [[ $soname =~ ^libpipit\.so\.[0-9]+$ ]] || fail "SONAME of $LIB is '${soname}', want libpipit.so.N"
fi

n=$(grep -c . <<<"$exported")
if [ "$failures" -ne 0 ]; then
    echo "$failures failure(s) in the exports of $LIB"
    exit 1
fi
echo "ok: $LIB exports $n symbols, all public pipit_ API"
