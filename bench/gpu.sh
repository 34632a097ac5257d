#!/usr/bin/env bash
# bench/gpu.sh — what pipit's cuda backend must show on a GPU, in one run of
# well under 10 minutes (docs/cuda.md "On a GPU machine"):
#   1. build: Release, -DPIPIT_CUDA=ON, CMAKE_CUDA_ARCHITECTURES=90 (H100 /
#      H200; override with CUDA_ARCH), the CLI and pipit_cuda_tests only;
#   2. tests: pipit_cuda_tests (every GPU test: backend primitives and GEMM
#      against the cpu backend, the per-op parity test, GPT-2 tiny and with
#      124M's widths against cpu, pipelined = single-rank bit for bit,
#      checkpoints both ways);
#   2b. tests/cuda/cli_parity.sh: the CLI's mesh axes and model kinds (PP,
#      TP, SP, DP with ZeRO, CP, documents, MoE with EP, bf16, the fused
#      head) on cuda against the cpu, losses to rounding;
#   3. compute-sanitizer: memcheck on a 2-step training run of a small
#      GPT-2, racecheck on one step of a smaller one (both on --device cuda);
#   4. benchmark: GPT-2 124M, T = 1024, B = 8 and the largest B that fits
#      (doubling search at TF32, then one refinement), fp32 and TF32: pipit
#      step time (median of the timed steps), tokens/s, TFLOP/s and MFU
#      against the H200's dense peak (SXM datasheet: fp32 67 TFLOP/s; TF32
#      tensor cores 989 TFLOP/s with sparsity, 494.7 dense; override with
#      PEAK_FP32 / PEAK_TF32 in TFLOP/s), against PyTorch eager and
#      torch.compile on the same model, precision and batch
#      (bench/gpu_torch.py);
#   5. per-op times: pipit --profile at TF32, B = 8 (each instruction waited
#      for on the device; GEMM, attention and layernorm shares), and nsys
#      when it is on the PATH.
# It writes 8 files under $OUT (the device tool brings back at most 8):
# summary.md (the tables), results.json, build.log, tests.log,
# sanitizer.log, pipit.log, torch.log, profile.txt (and parity.log: a
# ninth file, so a full run loses one; run the parity phase alone with
# SKIP=tests,sanitizer,bench,torch,profile). Every phase has its own
# time limit and the script skips what would run past ~8.5 minutes in all;
# a failing phase is reported and the next one runs.
#
# Dependencies: the GPU machine has CUDA, CMake, ninja, python3 with torch
# and numpy, but maybe not OpenBLAS or cJSON (the library's CPU backend and
# the CLI need them). Carry Debian packages with the tree and the script
# unpacks them (dpkg -x) into a prefix:
#   here, once, in the repository root (any Debian/Ubuntu machine with apt):
#     echo /.debs/ >> .git/info/exclude
#     mkdir -p .debs && (cd .debs && apt-get download libopenblas0-pthread \
#         libopenblas-pthread-dev libcjson1 libcjson-dev libgfortran5 libquadmath0)
#     (cd .debs && apt-get download libdnnl2 libdnnl-dev ocl-icd-libopencl1)  # oneDNN
#   then run it with the folder carried: run(command="bash bench/gpu.sh",
#   carry=[".debs"]) (about 13 MB). Or point PIPIT_DEPS_PREFIX at a folder
#   where they are unpacked already. With neither, the system's are used.
#
# Env: OUT (default ./gpu-out), BUILD (build-gpu), CUDA_ARCH (90), JOBS
# (nproc), PIPIT_DEBS (.debs), PIPIT_DEPS_PREFIX, STEPS (timed steps, 6),
# WARMUP (2), PROFILE_ARGS (the profiled run's precision flags, --tf32), SKIP (comma list of phases: build,tests,parity,sanitizer,bench,torch,
# profile), BUDGET (seconds, 510).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
OUT=${OUT:-$ROOT/gpu-out}
BUILD=${BUILD:-build-gpu}
CUDA_ARCH=${CUDA_ARCH:-90}
JOBS=${JOBS:-$(nproc)}
DEBS=${PIPIT_DEBS:-$ROOT/.debs}
STEPS=${STEPS:-6}
WARMUP=${WARMUP:-2}
SKIP=${SKIP:-}
BUDGET=${BUDGET:-510}
PEAK_FP32=${PEAK_FP32:-67}
PEAK_TF32=${PEAK_TF32:-494.7}
PEAK_BF16=${PEAK_BF16:-989}
PROFILE_ARGS=${PROFILE_ARGS:---tf32}
mkdir -p "$OUT"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/pipit_gpu.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
T0=$SECONDS
STATUS=() # "phase: ok|FAILED|skipped (why)"

say() { echo "[$((SECONDS - T0))s] $*"; }
skipped() { [[ ",$SKIP," == *",$1,"* ]]; }
left() { echo $((BUDGET - (SECONDS - T0))); }
# room PHASE SECONDS: whether PHASE (needing about SECONDS) fits the budget
room() {
    if skipped "$1"; then STATUS+=("$1: skipped (SKIP)"); return 1; fi
    if (($(left) < $2)); then STATUS+=("$1: skipped (time budget: $(left) s left, needs ~$2 s)"); return 1; fi
    return 0
}

# ------------------------------------------------------------- machine
{
    echo "# pipit on a GPU: bench/gpu.sh"
    echo
    echo "- date: $(date -u +%Y-%m-%dT%H:%M:%SZ); git: $(git rev-parse --short HEAD 2>/dev/null || echo '?')$(git diff --quiet HEAD -- src include tests bench 2>/dev/null || echo ' (+ uncommitted changes)')"
    echo "- GPU: $(nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader 2>/dev/null || echo 'nvidia-smi failed')"
    echo "- CPU: $(nproc) cores; $(uname -sr)"
    echo "- nvcc: $( (command -v nvcc || echo /usr/local/cuda/bin/nvcc) | xargs -I{} sh -c '{} --version 2>/dev/null | tail -2 | head -1')"
    echo "- python: $(python3 -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__)' 2>/dev/null || echo 'python3/torch missing')"
    echo "- MFU peaks (dense, TFLOP/s): fp32 $PEAK_FP32, tf32 $PEAK_TF32, bf16 $PEAK_BF16 (NVIDIA H200 SXM datasheet; TF32 989 and bf16 1979 with sparsity)"
} >"$WORK/machine.md"
cat "$WORK/machine.md"

# ------------------------------------------------------------- 1. build
NVCC=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
case $BUILD in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
PIPIT=$BUILD/pipit
build() {
    local deps=() P=${PIPIT_DEPS_PREFIX:-}
    if [ -z "$P" ] && compgen -G "$DEBS/*.deb" >/dev/null; then
        P=$WORK/deps
        mkdir -p "$P"
        for f in "$DEBS"/*.deb; do
            if command -v dpkg >/dev/null; then
                dpkg -x "$f" "$P" || return 1
            else # no dpkg: a .deb is an ar archive holding data.tar.*
                local member
                member=$(ar t "$f" | grep '^data\.tar') || return 1
                ar p "$f" "$member" | tar -x -C "$P" --auto-compress -f - 2>/dev/null ||
                    ar p "$f" "$member" | tar -xJ -C "$P" || return 1
            fi
        done
        echo "unpacked $(ls "$DEBS"/*.deb | wc -l) packages from $DEBS into $P"
        PIPIT_DEPS_PREFIX=$P
    fi
    if [ -n "$P" ]; then
        local blas cblas cjson cjsonh dnnl dnnlh
        blas=$(find "$P" -name 'libopenblas.so' | head -n1)
        [ -n "$blas" ] || blas=$(find "$P" -name 'libopenblas.so.0' | head -n1)
        cblas=$(find "$P" -name cblas.h | head -n1)
        cjson=$(find "$P" -name 'libcjson.so' | head -n1)
        [ -n "$cjson" ] || cjson=$(find "$P" -name 'libcjson.so.1' | head -n1)
        cjsonh=$(find "$P" -name cJSON.h | head -n1)
        dnnl=$(find "$P" -name 'libdnnl.so' | head -n1)
        dnnlh=$(find "$P" -path '*/include/dnnl.h' | head -n1) # its includes name oneapi/dnnl/...
        [ -n "$blas" ] && deps+=(-DOPENBLAS_LIB="$blas")
        [ -n "$cblas" ] && deps+=(-DCBLAS_INCLUDE_DIR="$(dirname "$cblas")")
        [ -n "$cjson" ] && deps+=(-DCJSON_LIB="$cjson")
        [ -n "$cjsonh" ] && deps+=(-DCJSON_INCLUDE_DIR="$(dirname "$cjsonh")")
        [ -n "$dnnl" ] && deps+=(-DDNNL_LIB="$dnnl")
        [ -n "$dnnlh" ] && deps+=(-DDNNL_INCLUDE_DIR="$(dirname "$dnnlh")")
        # libopenblas needs libgfortran from the prefix at link time and at run time
        export LD_LIBRARY_PATH=$(find "$P" -name '*.so*' -printf '%h\n' | sort -u | paste -sd:)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        echo "dependencies from $P: ${deps[*]}"
    fi
    local gen=()
    command -v ninja >/dev/null && gen=(-G Ninja)
    cmake -S . -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DPIPIT_CUDA=ON \
        -DCMAKE_CUDA_COMPILER="$NVCC" -DCMAKE_CUDA_ARCHITECTURES="$CUDA_ARCH" -DPIPIT_MPI=OFF \
        -DPIPIT_BUILD_EXAMPLES=OFF -DPIPIT_BUILD_BENCH=OFF "${deps[@]}" &&
        timeout 240 cmake --build "$BUILD" -j "$JOBS" --target pipit_cli pipit_cuda_tests
}
if room build 60; then
    say "1. build ($BUILD, sm_$CUDA_ARCH)"
    if build >"$OUT/build.log" 2>&1; then
        STATUS+=("build: ok ($((SECONDS - T0)) s)")
    else
        STATUS+=("build: FAILED (build.log)")
        tail -30 "$OUT/build.log"
    fi
elif [ -n "${PIPIT_DEPS_PREFIX:-}" ]; then
    export LD_LIBRARY_PATH=$(find "$PIPIT_DEPS_PREFIX" -name '*.so*' -printf '%h\n' | sort -u | paste -sd:)${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
if [ ! -x "$PIPIT" ]; then
    STATUS+=("everything else: skipped (no $PIPIT)")
    SKIP=tests,parity,sanitizer,bench,torch,profile
elif ! nvidia-smi -L >/dev/null 2>&1; then
    STATUS+=("everything else: skipped (no GPU: nvidia-smi -L fails)")
    SKIP=tests,parity,sanitizer,bench,torch,profile
fi

# ------------------------------------------------------------- 2. tests
if room tests 60; then
    say "2. pipit_cuda_tests"
    if (cd "$BUILD" && timeout 200 ./pipit_cuda_tests) >"$OUT/tests.log" 2>&1; then
        STATUS+=("tests: ok ($(grep -c '^ok ' "$OUT/tests.log") passed)")
    else
        rc=$?
        STATUS+=("tests: FAILED (exit $rc; $(grep -c '^FAIL ' "$OUT/tests.log") failed: $(grep '^FAIL ' "$OUT/tests.log" | cut -c6- | paste -sd' '))")
    fi
    grep -E '^(ok|FAIL|skip) |passed,|no CUDA' "$OUT/tests.log"
fi

# data for the runs below: bytes for the small models, uint16 tokens for GPT-2
python3 -c "
import random
r = random.Random(7)
words = ['the ', 'cat ', 'sat ', 'on ', 'a ', 'mat. ', 'dog ', 'ran ', 'to ', 'park, ', 'and ', 'we ', 'saw ']
open('$WORK/text.txt', 'w').write(''.join(r.choice(words) for _ in range(20000)))
try:
    import numpy as np
    np.random.default_rng(0).integers(0, 50257, size=6_000_000, dtype=np.uint16).tofile('$WORK/tokens.u16')
except ImportError:
    import array
    array.array('H', (r.randrange(50257) for _ in range(6_000_000))).tofile(open('$WORK/tokens.u16', 'wb'))
" || echo "cannot write the benchmark data"

# ------------------------------------------------------------- 2b. CLI parity
if room parity 60; then
    say "2b. CLI parity: every mesh axis and model kind, cuda vs cpu (tests/cuda/cli_parity.sh)"
    if timeout 240 bash tests/cuda/cli_parity.sh "$PIPIT" >"$OUT/parity.log" 2>&1; then
        STATUS+=("parity: ok ($(grep -c ' ok ' "$OUT/parity.log") configurations)")
    else
        STATUS+=("parity: FAILED ($(grep -c -E ' (DIFFERS|FAILED) ' "$OUT/parity.log") of $(($(wc -l <"$OUT/parity.log") - 1)); parity.log)")
    fi
    cat "$OUT/parity.log"
fi

# ------------------------------------------------------------- 3. sanitizer
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
if room sanitizer 60; then
    say "3. compute-sanitizer"
    small=(train --data "$WORK/text.txt" --device cuda --ctx 64 --layers 2 --heads 2 --dim 64 --micro-batch 2)
    {
        echo "== memcheck: pipit ${small[*]} --steps 2"
        timeout 150 "$SAN" --tool memcheck --error-exitcode 9 --print-limit 20 "$PIPIT" "${small[@]}" --steps 2
        echo "memcheck exit: $?"
        echo "== racecheck: one step, 1 layer, ctx 32"
        timeout 120 "$SAN" --tool racecheck --error-exitcode 9 --print-limit 20 "$PIPIT" train --data "$WORK/text.txt" \
            --device cuda --ctx 32 --layers 1 --heads 2 --dim 32 --micro-batch 2 --steps 1
        echo "racecheck exit: $?"
    } >"$OUT/sanitizer.log" 2>&1
    m=$(grep -o 'memcheck exit: [0-9]*' "$OUT/sanitizer.log" | grep -o '[0-9]*$')
    r=$(grep -o 'racecheck exit: [0-9]*' "$OUT/sanitizer.log" | grep -o '[0-9]*$')
    if [ "$m" = 0 ] && [ "$r" = 0 ]; then STATUS+=("sanitizer: ok (memcheck, racecheck: no errors)")
    else STATUS+=("sanitizer: FAILED (memcheck exit $m, racecheck exit $r; sanitizer.log)"); fi
    grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|exit:' "$OUT/sanitizer.log"
fi

# ------------------------------------------------------------- 4. benchmark
GPT2=(train --data "$WORK/tokens.u16" --data-format u16 --data-order sequential --model gpt2 --ctx 1024 --device cuda
      --json)
: >"$OUT/pipit.log"
: >"$OUT/torch.log"
# pipit_run LABEL B [flags]: one run of WARMUP + STEPS steps, its JSON lines tagged
pipit_run() {
    local label=$1 B=$2
    shift 2
    echo "== $label B=$B $*" >>"$OUT/pipit.log"
    timeout 150 "$PIPIT" "${GPT2[@]}" --micro-batch "$B" --steps $((WARMUP + STEPS)) "$@" >"$WORK/run.json" 2>>"$OUT/pipit.log"
    local rc=$?
    sed "s/^{/{\"run\":\"$label\",\"batch\":$B,\"warmup\":$WARMUP,/" "$WORK/run.json" >>"$OUT/pipit.log"
    return $rc
}
BMAX=8
if room bench 90; then
    say "4. benchmark: pipit GPT-2 124M T=1024"
    pipit_run fp32 8
    pipit_run tf32 8 --tf32
    pipit_run bf16 8 --dtype bf16 --tf32
    # the largest B that fits, at TF32: doubling, then halfway to the first failure
    ok=8 bad=0
    for B in 16 32 64 128; do
        (($(left) < 60)) && break
        if timeout 120 "$PIPIT" "${GPT2[@]}" --tf32 --micro-batch "$B" --steps 1 >/dev/null 2>"$WORK/fit.err"; then
            ok=$B
        else
            bad=$B
            echo "B=$B does not fit: $(tail -1 "$WORK/fit.err")" >>"$OUT/pipit.log"
            break
        fi
    done
    if ((bad > 0)) && ((bad - ok > 8)) && (($(left) > 60)); then
        mid=$(((ok + bad) / 2 / 8 * 8))
        if timeout 120 "$PIPIT" "${GPT2[@]}" --tf32 --micro-batch "$mid" --steps 1 >/dev/null 2>"$WORK/fit.err"; then ok=$mid
        else echo "B=$mid does not fit: $(tail -1 "$WORK/fit.err")" >>"$OUT/pipit.log"; fi
    fi
    BMAX=$ok
    echo "largest B that fits: $BMAX" >>"$OUT/pipit.log"
    if ((BMAX > 8)) && (($(left) > 60)); then
        pipit_run tf32 "$BMAX" --tf32
        (($(left) > 45)) && pipit_run bf16 "$BMAX" --dtype bf16 --tf32
        (($(left) > 45)) && pipit_run fp32 "$BMAX"
    fi
    if grep -q '"run":"tf32","batch":8,' "$OUT/pipit.log"; then STATUS+=("bench: ok (largest B $BMAX)")
    else STATUS+=("bench: FAILED (pipit.log)"); fi
fi
torch_run() { # mode precision B
    (($(left) < 25)) && { echo "{\"mode\":\"$1\",\"precision\":\"$2\",\"batch\":$3,\"skipped\":\"time budget\"}" >>"$OUT/torch.log"; return; }
    local peak=$PEAK_FP32
    [ "$2" = tf32 ] && peak=$PEAK_TF32
    [ "$2" = bf16 ] && peak=$PEAK_BF16
    timeout $(($(left) < 170 ? $(left) - 10 : 160)) python3 bench/gpu_torch.py --mode "$1" --precision "$2" --batch "$3" \
        --steps "$STEPS" --warmup "$WARMUP" --peak-tflops "$peak" >>"$OUT/torch.log" 2>"$WORK/torch.err"
    local rc=$?
    # 3: out of memory, already one JSON line of its own
    ((rc != 0 && rc != 3)) &&
        echo "{\"mode\":\"$1\",\"precision\":\"$2\",\"batch\":$3,\"error\":\"$(tail -1 "$WORK/torch.err" | tr -d '"\\')\"}" >>"$OUT/torch.log"
    return 0
}
if room torch 60; then
    say "4b. PyTorch (bench/gpu_torch.py)"
    torch_run eager fp32 8
    torch_run eager tf32 8
    torch_run eager bf16 8
    ((BMAX > 8)) && torch_run eager tf32 "$BMAX"
    torch_run compile tf32 8
    torch_run compile bf16 8
    torch_run compile fp32 8
    ((BMAX > 8)) && torch_run eager fp32 "$BMAX"
    STATUS+=("torch: ran ($(grep -c ms_per_step "$OUT/torch.log") of $(wc -l <"$OUT/torch.log") runs timed)")
fi

# ------------------------------------------------------------- 5. profile
if room profile 30; then
    say "5. per-op profile (pipit --profile $PROFILE_ARGS, B=8)"
    {
        echo "== pipit --profile (steps after the first; every instruction waited for on the device)"
        timeout 90 "$PIPIT" "${GPT2[@]}" $PROFILE_ARGS --micro-batch 8 --steps 4 --profile 2>&1 >/dev/null
        if command -v nsys >/dev/null; then
            echo "== nsys (cuda_gpu_kern_sum)"
            timeout 90 nsys profile -o "$WORK/nsys" --stats=false "$PIPIT" "${GPT2[@]}" --tf32 --micro-batch 8 --steps 3 >/dev/null 2>&1 &&
                nsys stats -r cuda_gpu_kern_sum "$WORK/nsys.nsys-rep" 2>&1 | head -60
        else
            echo "== nsys: not on the PATH (the profile above is the per-op time)"
        fi
    } >"$OUT/profile.txt" 2>&1
    STATUS+=("profile: $(grep -c '%' "$OUT/profile.txt") op lines")
fi

# ------------------------------------------------------------- summary
python3 - "$OUT" "$WORK/machine.md" "$PEAK_FP32" "$PEAK_TF32" "$PEAK_BF16" "$WARMUP" "${STATUS[@]}" <<'EOF'
import json, statistics, sys
out, machine, peak32, peak_tf32, peak_bf16 = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
warmup, status = int(sys.argv[6]), sys.argv[7:]
peak = {"fp32": peak32, "tf32": peak_tf32, "bf16": peak_bf16}
runs = {}
for line in open(f"{out}/pipit.log"):
    if not line.startswith('{"run"'):
        continue
    d = json.loads(line)
    runs.setdefault((d["run"], d["batch"]), []).append(d)
rows = []
for (prec, B), steps in sorted(runs.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    timed = [s for s in steps if s["step"] >= warmup] or steps
    ms = statistics.median(s["ms"] for s in timed)
    gf = statistics.median(s["gflops"] for s in timed)
    rows.append({"impl": "pipit", "mode": "-", "precision": prec, "batch": B, "ms": ms,
                 "tokens_per_s": B * 1024 / (ms / 1e3), "tflops": gf / 1e3, "mfu": gf / 1e3 / peak[prec],
                 "loss": timed[-1]["loss"], "peak_bytes": timed[-1].get("peak_bytes")})
torch_rows = []
for line in open(f"{out}/torch.log"):
    line = line.strip()
    if not line.startswith("{"):
        continue
    d = json.loads(line)
    if "ms_per_step" in d:
        rows.append({"impl": "torch", "mode": d["mode"], "precision": d["precision"], "batch": d["batch"],
                     "ms": d["ms_per_step"], "tokens_per_s": d["tokens_per_s"], "tflops": d["tflops"],
                     "mfu": d["tflops"] / peak[d["precision"]], "loss": d.get("loss")})
    else:
        torch_rows.append(d)
lines = [open(machine).read().rstrip(), "", "## Phases", ""] + [f"- {s}" for s in status]
lines += ["", "## GPT-2 124M, T=1024, one H200: training step (forward, backward, AdamW)", "",
          "| impl | mode | precision | B | ms/step | tokens/s | TFLOP/s | MFU |", "|---|---|---|---|---|---|---|---|"]
for r in sorted(rows, key=lambda r: (r["batch"], r["precision"], r["impl"], r["mode"])):
    lines.append(f"| {r['impl']} | {r['mode']} | {r['precision']} | {r['batch']} | {r['ms']:.1f} | "
                 f"{r['tokens_per_s']:.0f} | {r['tflops']:.1f} | {100 * r['mfu']:.1f}% |")
for d in torch_rows:
    lines.append(f"| torch | {d.get('mode')} | {d.get('precision')} | {d.get('batch')} | - | - | - | - | "
                 + (f"({'out of memory' if d.get('oom') else d.get('error') or d.get('skipped')})"))
def find(impl, mode, prec, B):
    for r in rows:
        if r["impl"] == impl and r["mode"] == mode and r["precision"] == prec and r["batch"] == B:
            return r
lines += ["", "## pipit against PyTorch (same model, precision, batch)", ""]
for prec in ("bf16", "tf32", "fp32"):
    for B in sorted({r["batch"] for r in rows}):
        p = find("pipit", "-", prec, B)
        if not p:
            continue
        for mode in ("eager", "compile"):
            t = find("torch", mode, prec, B)
            if t:
                lines.append(f"- {prec} B={B}: pipit {p['ms']:.1f} ms vs torch {mode} {t['ms']:.1f} ms: "
                             f"pipit is {t['ms'] / p['ms']:.2f}x the speed of torch {mode}")
lines += ["", "## Per-op time (pipit --profile, B=8): profile.txt", ""]
try:
    share = {"GEMM (matmul)": 0.0, "attention": 0.0, "layernorm": 0.0}
    total = 0.0
    for l in open(f"{out}/profile.txt"):
        parts = l.split()
        if len(parts) >= 4 and parts[-1].endswith("%") and parts[-2] == "s":
            name, sec = " ".join(parts[:-3]), float(parts[-3])
            total += sec
            for k, keys in (("GEMM (matmul)", ("matmul",)), ("attention", ("attention", "attn_")),
                            ("layernorm", ("layernorm", "ln_"))):
                if name.startswith(keys):
                    share[k] += sec
    if total > 0:
        lines += [f"- {k}: {100 * v / total:.1f}% of instruction time" for k, v in share.items()]
except OSError:
    lines.append("- (no profile)")
text = "\n".join(lines) + "\n"
open(f"{out}/summary.md", "w").write(text)
json.dump({"status": status, "rows": rows, "torch_failures": torch_rows}, open(f"{out}/results.json", "w"), indent=1)
print(text)
EOF
say "done: $OUT ($(ls "$OUT" | paste -sd' '))"
