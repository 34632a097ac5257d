#!/usr/bin/env bash
# test_cli_device.sh — --device and --tf32 on every command that compiles a
# program (train, plan, eval, sample): a bad device name, --tf32 without
# --device cuda, and --device cuda where it cannot run (a build without the
# cuda backend, or a machine without a CUDA device) exit 1 with the clear
# message before any work; --device cpu is the default, bit for bit.
# (Training on a GPU is tested by pipit_cuda_tests, tests/cuda.)
# Usage: test_cli_device.sh PIPIT SRCDIR
set -u

source "$(dirname "$0")/cli_lib.sh"
cli_setup cli_device "${1:-}"
CLI_FIXED=1

$PY -c 'import random; r = random.Random(3); open("text.txt", "w").write("".join(r.choice("abcdefgh ") for _ in range(4000)))' ||
    { echo "cannot write test data"; exit 1; }
MODEL=(--ctx 16 --layers 1 --heads 2 --dim 32 --micro-batch 2)
BASE=("$PIPIT" train --data text.txt "${MODEL[@]}" --data-order sequential)
TRAIN=("${BASE[@]}" --steps 2)

expect_ok "$PIPIT" --version
if grep -q "CUDA built in" <<<"$OUT"; then
    HAVE_CUDA=1
else
    HAVE_CUDA=0
fi

# ---- names and combinations, on every command
expect_fail "bad value 'tpu' for --device: expected cpu or cuda" "${TRAIN[@]}" --device tpu
expect_fail "did you mean 'cuda'" "${TRAIN[@]}" --device cdua
expect_fail "--tf32 needs --device cuda" "${TRAIN[@]}" --tf32
expect_fail "--tf32 needs --device cuda" "${TRAIN[@]}" --device cpu --tf32
expect_fail "--tf32 takes no value" "${TRAIN[@]}" --tf32=1
expect_fail "--device given twice" "${TRAIN[@]}" --device cpu --device cuda
expect_ok "$PIPIT" train --help
grep -q -- "--device" <<<"$OUT" && grep -q -- "--tf32" <<<"$OUT" || fail "train --help lacks --device or --tf32"

expect_ok "${BASE[@]}" --steps 0 --save init.st

# ---- --device cuda where it cannot run
if [ "$HAVE_CUDA" = 0 ]; then
    WHY="this build has no cuda backend (configure with -DPIPIT_CUDA=ON)"
else
    WHY="no CUDA device found"
fi
run_cuda=1
if [ "$HAVE_CUDA" = 1 ] && command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    run_cuda=0 # a GPU is here: tests/cuda covers it
fi
if [ "$run_cuda" = 1 ]; then
    expect_fail "$WHY" "${TRAIN[@]}" --device cuda
    expect_fail "$WHY" "${TRAIN[@]}" --device cuda --tf32
    expect_fail "$WHY" "$PIPIT" plan --data text.txt "${MODEL[@]}" --device cuda
    expect_fail "$WHY" "$PIPIT" eval --init init.st --data text.txt --ctx 16 --micro-batch 2 --batches 1 --device cuda
    expect_fail "$WHY" "$PIPIT" sample --init init.st --prompt ab --tokens 2 --device cuda
fi

# ---- --device cpu is the default: the same losses, bit for bit
expect_ok "${TRAIN[@]}" --json
A=$(sed -E 's/"ms":[^,]*,"tokens_per_s":[^,]*,//; s/"gflops":[^,]*,//; s/"bubble":[^,]*,//' <<<"$OUT")
expect_ok "${TRAIN[@]}" --json --device cpu
B=$(sed -E 's/"ms":[^,]*,"tokens_per_s":[^,]*,//; s/"gflops":[^,]*,//; s/"bubble":[^,]*,//' <<<"$OUT")
[ -n "$A" ] && [ "$A" = "$B" ] || fail "--device cpu differs from the default:"$'\n'"$A"$'\n'"$B"
expect_ok "$PIPIT" eval --init init.st --data text.txt --ctx 16 --micro-batch 2 --batches 1 --json
E1=$OUT
expect_ok "$PIPIT" eval --init init.st --data text.txt --ctx 16 --micro-batch 2 --batches 1 --json --device cpu
[ "$E1" = "$OUT" ] || fail "eval --device cpu differs from the default: $E1 vs $OUT"

if [ "$failures" -ne 0 ]; then
    echo "test_cli_device: $failures failure(s)" >&2
    exit 1
fi
echo "test_cli_device: ok"
