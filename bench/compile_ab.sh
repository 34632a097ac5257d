#!/usr/bin/env bash
# bench/compile_ab.sh — time to a ready program against depth, before and
# after: bench/bench_compile.c built from this tree and from BASE (a commit,
# default main; the benchmark's source is copied into a temporary checkout
# of it), run interleaved (base, this, base, this, ...) for each layer
# count, so that load which comes and goes on a shared machine falls on
# both alike. Prints each run's seconds per phase and, per depth, the
# ratio of the totals. docs/benchmarks.md §12.
#
# Usage: bench/compile_ab.sh [BASE=main] [LAYERS...=500 1000 2000 3000]
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BASE=${1:-main}
shift || true
LAYERS=("$@")
[[ ${#LAYERS[@]} -gt 0 ]] || LAYERS=(500 1000 2000 3000)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pipit_compile_ab.XXXXXX")
cleanup() { git -C "$ROOT" worktree remove --force "$WORK/base" >/dev/null 2>&1 || true; rm -rf "$WORK"; }
trap cleanup EXIT

git -C "$ROOT" worktree add --detach "$WORK/base" "$BASE" >/dev/null 2>&1
cp "$ROOT/bench/bench_compile.c" "$WORK/base/bench/"
for tree in "$WORK/base" "$ROOT"; do
    b=$tree/build-bench
    [[ $tree == "$ROOT" ]] || b=$WORK/build-base
    cmake -S "$tree" -B "$b" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPIPIT_BUILD_TESTS=OFF >/dev/null
    cmake --build "$b" --target bench_compile >/dev/null
done
OLD=$WORK/build-base/bench_compile NEW=$ROOT/build-bench/bench_compile
echo "base $(git -C "$ROOT" rev-parse --short "$BASE"), this tree $(git -C "$ROOT" rev-parse --short HEAD)$(git -C "$ROOT" diff --quiet || echo +changes)"
printf '%8s %6s %10s %10s %10s %10s\n' layers build graph_s compile_s init_s total_s
for L in "${LAYERS[@]}"; do
    declare -A T=()
    for which in base this; do
        bin=$OLD
        [[ $which == this ]] && bin=$NEW
        read -r _ g c i t _ < <("$bin" "$L" | tail -1)
        printf '%8s %6s %10s %10s %10s %10s\n' "$L" "$which" "$g" "$c" "$i" "$t"
        T[$which]=$t
    done
    awk -v a="${T[base]}" -v b="${T[this]}" -v l="$L" 'BEGIN {printf "%8s  total: base / this = %.1fx\n", l, a / b}'
done
