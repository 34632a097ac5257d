#!/usr/bin/env bash
# run.sh — runs libFuzzer targets built with -DPIPIT_FUZZ=ON (docs/fuzzing.md).
# Usage: tests/fuzz/run.sh BUILD_DIR SECONDS [TARGET...]   (default: all targets)
# Each target fuzzes for SECONDS on a COPY of tests/fuzz/corpus/<target>
# (the repository's corpus is never written), ASan/UBSan halting and aborting
# on the first error. A crash leaves its input in $FUZZ_OUT/artifacts/<target>/
# (FUZZ_OUT defaults to a fresh temp dir; set FUZZ_KEEP=1 to keep it) and
# makes the script exit 1 after the remaining targets ran. Extra libFuzzer
# flags: FUZZ_FLAGS="-jobs=4 -workers=4". Targets run FUZZ_PARALLEL at a
# time (default: the number of CPUs), each for SECONDS of wall time.
set -uo pipefail
BUILD=${1:?usage: run.sh BUILD_DIR SECONDS [TARGET...]}
SECS=${2:?usage: run.sh BUILD_DIR SECONDS [TARGET...]}
shift 2
SRC=$(cd "$(dirname "$0")" && pwd)
TARGETS=${*:-safetensors data schedule checkpoint flags tokenizer hw profile config}
OUT=${FUZZ_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/pipit_fuzz.XXXXXX")}
export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:abort_on_error=1:print_stacktrace=1}
# One target: fuzzes, then writes its verdict line to $OUT/$t.result
# (prefixed FAILED when it found a crash).
fuzz_one() {
  local t=$1 exe="$BUILD/fuzz_$1" extra="" start end rc runs cov
  rm -rf "$OUT/corpus/$t" "$OUT/artifacts/$t"
  mkdir -p "$OUT/corpus/$t" "$OUT/artifacts/$t"
  cp "$SRC/corpus/$t/"* "$OUT/corpus/$t/"
  [ -f "$SRC/dict/$t.dict" ] && extra="-dict=$SRC/dict/$t.dict"
  [ "$t" = flags ] && extra="$extra -close_fd_mask=3" # its rejected arguments print to stderr
  start=$(date +%s)
  # shellcheck disable=SC2086
  "$exe" -max_total_time="$SECS" -rss_limit_mb=2048 -timeout=25 -print_final_stats=1 \
    -artifact_prefix="$OUT/artifacts/$t/" $extra ${FUZZ_FLAGS:-} "$OUT/corpus/$t" > "$OUT/$t.log" 2>&1
  rc=$?
  end=$(date +%s)
  runs=$(grep -o '^stat::number_of_executed_units: *[0-9]*' "$OUT/$t.log" | grep -o '[0-9]*$')
  cov=$(grep -o 'cov: [0-9]*' "$OUT/$t.log" | tail -1)
  if [ $rc -ne 0 ]; then
    { echo "FAILED == fuzz_$t: FAILED (rc $rc) after $((end - start)) s; log $OUT/$t.log, input(s):"
      ls "$OUT/artifacts/$t/"
      grep -E "ERROR|SUMMARY|#[0-9]+ 0x" "$OUT/$t.log" | head -20; } > "$OUT/$t.result"
  else
    echo "== fuzz_$t: ok, ${runs:-?} runs in $((end - start)) s, ${cov:-?}" > "$OUT/$t.result"
  fi
}
for t in $TARGETS; do
  [ -x "$BUILD/fuzz_$t" ] || { echo "run.sh: no $BUILD/fuzz_$t (configure with -DPIPIT_FUZZ=ON)"; exit 2; }
done
mkdir -p "$OUT"
par=${FUZZ_PARALLEL:-$(nproc 2>/dev/null || echo 1)}
running=0
for t in $TARGETS; do
  if [ "$running" -ge "$par" ]; then wait -n; running=$((running - 1)); fi
  fuzz_one "$t" &
  running=$((running + 1))
done
wait
failed=""
for t in $TARGETS; do
  if [ ! -f "$OUT/$t.result" ]; then echo "== fuzz_$t: no verdict (the run died)"; failed="$failed $t"; continue; fi
  sed 's/^FAILED //' "$OUT/$t.result"
  head -1 "$OUT/$t.result" | grep -q '^FAILED' && failed="$failed $t"
done
if [ -n "$failed" ]; then
  echo "fuzzing found crashes in:$failed (keep the inputs under tests/fuzz/regressions/<target>/)"
  exit 1
fi
[ -n "${FUZZ_KEEP:-}" ] || [ -n "${FUZZ_OUT:-}" ] || rm -rf "$OUT"
exit 0
