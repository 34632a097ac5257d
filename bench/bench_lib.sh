# bench/bench_lib.sh — what the training benchmarks share (sourced from
# the repository root, not run):
#   bench_workdir        WORK = a temp dir removed on exit, holding
#                        corpus.txt (README.md and docs/*.md: data that
#                        needs no download); cd's there and prints the
#                        machine line (cores, load, CPU model) every
#                        benchmark table names;
#   bench_build BUILD    configures BUILD (Release, once) and builds the
#                        CLI there; PIPIT = its absolute path;
#   median_ms LOG        the median "ms" of steps >= 2 in a --json log
#                        (step 0 compiles nothing but warms caches, step 1
#                        may still page memory in).

bench_build() {
    cmake -S . -B "$1" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build "$1" --target pipit_cli -- -j2 >/dev/null
    PIPIT=$(realpath "$1/pipit")
}

bench_workdir() {
    WORK=$(mktemp -d)
    trap 'rm -rf "$WORK"' EXIT
    cat README.md docs/*.md > "$WORK/corpus.txt"
    cd "$WORK" || exit 1
    echo "nproc: $(nproc); $(uptime | sed 's/.*load/load/'); $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2)"
}

median_ms() {
    python3 -c 'import json, statistics, sys
v = [json.loads(l)["ms"] for l in open(sys.argv[1]) if l.startswith("{\"step\"") and json.loads(l)["step"] >= 2]
print("%.1f" % statistics.median(v))' "$1"
}
