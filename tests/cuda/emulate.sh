#!/bin/sh
# tests/cuda/emulate.sh CPU_BUILD_DIR [TEST...] — runs the CUDA kernels of
# src/backend/cuda/*_cuda.cu on the CPU under ASan and UBSan, through the
# emulation in tests/cuda/emu/, against the unchanged parity test
# tests/cuda/test_cuda_ops.c. For machines without a GPU: it checks the
# kernels' indexing (every global and shared-memory access), barriers and
# results against the CPU backend; only a GPU run checks the real thing.
# CPU_BUILD_DIR is a configured and built CPU tree (its libpipit.a).
# A block's threads are fibers (emu/emu.cpp); PIPIT_EMU_SAN="-fsanitize=thread"
# runs them as real threads and checks the barriers for data races;
# PIPIT_CUDA_CASE=name runs one parity case.
# Each `kernel<<<grid, block, smem, stream>>>(args);` of the .cu files and
# the headers they share (*.cuh) is rewritten to
# `pipit_emu_launch(grid, block, smem, stream, [&]() { kernel(args); });`.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
build=$(cd "${1:?usage: emulate.sh CPU_BUILD_DIR [TEST...]}" && pwd)
shift
out=${PIPIT_EMU_DIR:-${TMPDIR:-/tmp}/pipit-cuda-emu}
mkdir -p "$out"
san=${PIPIT_EMU_SAN:-"-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer"}
inc="-I$here/emu -I$out -I$root/src -I$root/include -I$root/tests"
# Rewrites the launches of one file (a .cu, or a .cuh whose templates launch)
# into OUT, keeping its line numbers for messages.
rewrite() {
    python3 - "$1" "$2" <<'PY'
import re, sys
src = open(sys.argv[1]).read()
launch = re.compile(r'(\w+(?:<[^;<>]*>)?)\s*<<<(.*?)>>>\s*\((.*?)\);', re.S)
def sub(m):
    return 'pipit_emu_launch(%s, [&]() { %s(%s); });' % (m.group(2), m.group(1), m.group(3))
out = launch.sub(sub, src)
if '<<<' in out:
    sys.exit('emulate.sh: a launch the rewrite missed in ' + sys.argv[1])
open(sys.argv[2], 'w').write('#line 1 "%s"\n' % sys.argv[1] + out)
PY
}
# The headers first: -I$out finds their rewritten copies before src/'s.
mkdir -p "$out/backend/cuda"
for h in "$root"/src/backend/cuda/*.cuh; do
    rewrite "$h" "$out/backend/cuda/$(basename "$h")"
done
objs=""
for cu in "$root"/src/backend/cuda/*_cuda.cu; do
    name=$(basename "$cu" .cu)
    rewrite "$cu" "$out/$name.cpp"
    g++ -std=c++20 -g -O1 $san -Wall -Wextra -Wno-unknown-pragmas $inc -c "$out/$name.cpp" -o "$out/$name.o"
    objs="$objs $out/$name.o"
done
g++ -std=c++20 -g -O1 $san -Wall -Wextra $inc -c "$here/emu/emu.cpp" -o "$out/emu.o"
for c in "$here/test_cuda_ops.c" "$root/tests/main.c"; do
    gcc -std=c11 -D_GNU_SOURCE -DPIPIT_TEST_SRCDIR="\"$root/tests\"" -g -O1 $san -Wall -Wextra $inc \
        -c "$c" -o "$out/$(basename "$c" .c).o"
done
libs=$(sed -n '/^build pipit_tests:/,/LINK_LIBRARIES/p' "$build/build.ninja" 2>/dev/null |
       sed -n 's/.*LINK_LIBRARIES = //p' | sed 's/libpipit\.a//')
g++ $san -o "$out/pipit_cuda_emu" $objs "$out/emu.o" "$out/test_cuda_ops.o" "$out/main.o" \
    "$build/libpipit.a" ${libs:--lopenblas -lcjson -lm} -lpthread
cd "$out" && ./pipit_cuda_emu "$@"
