#!/usr/bin/env bash
# test_cli_memory.sh — memory admission on the command line (docs/refuses.md):
# a run that needs more memory than the process may use is refused before
# anything large is allocated (its peak resident memory stays small), with
# a message naming the need, the limit and what to change; a model that
# fits runs under the same limit. Limits: RLIMIT_AS (prlimit --as), and
# --mem-limit (no cgroup or rlimit needed), which pipit_compile's exact
# check also uses (activations). --no-mem-check skips the check.
# Usage: test_cli_memory.sh PIPIT SRCDIR
set -u

CLI_FIXED=1
source "$(dirname "$0")/cli_lib.sh"
cli_setup cli_memory "${1:-}"

head -c 200000 "${2:?usage: test_cli_memory.sh PIPIT SRCDIR}/README.md" >text.txt

# max_rss CMD...: runs CMD, prints "<exit status> <peak resident KiB> <output>"
max_rss() {
    $PY - "$@" <<'EOF'
import resource, subprocess, sys
r = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, r.stdout.replace("\n", " "))
EOF
}

# expect_refused LIMIT_WORDS CMD...: non-zero, names the need and the limit, peak RSS < 300 MiB
expect_refused() {
    local words=$1 rc kib out
    shift
    read -r rc kib out < <(max_rss "$@")
    [ "$rc" -ne 0 ] && [ "$rc" -lt 128 ] || fail "expected a refusal (exit 1), got exit $rc: $*"$'\n'"$out"
    for w in "needs " "of memory but " "is available" "$words"; do
        grep -qF -- "$w" <<<"$out" || fail "message lacks '$w': $*"$'\n'"  got: $out"
    done
    [ "$kib" -lt 307200 ] || fail "refused only after $kib KiB were resident (not before allocating): $*"
}

# ---- under RLIMIT_AS: GPT-2 124M at ctx 1024 needs ~2 GiB of state alone
if ldd "$PIPIT" | grep -q 'libasan\|libtsan'; then
    echo "note: RLIMIT_AS cases skipped (a sanitizer build needs terabytes of address space)"
elif ! command -v prlimit >/dev/null; then
    echo "note: RLIMIT_AS cases skipped (no prlimit)"
else
    AS=$((1536 * 1024 * 1024))
    expect_refused "RLIMIT_AS" prlimit --as=$AS "$PIPIT" train --data text.txt --model gpt2 --ctx 1024 --steps 1
    expect_refused "--zero1 with --dp" prlimit --as=$AS "$PIPIT" train --data text.txt --model gpt2 --ctx 1024 --steps 1
    # 2^24 microbatches of the tiny model: the feeds alone are ~100 GiB
    expect_refused "--microbatches 16777216" prlimit --as=$AS "$PIPIT" train --data text.txt --microbatches 16777216 --steps 1
    # a million layers of the tiny model
    expect_refused "RLIMIT_AS" prlimit --as=$AS "$PIPIT" train --data text.txt --layers 1000000 --steps 1
    # the tiny model fits and trains under the same limit
    expect_ok prlimit --as=$AS "$PIPIT" train --data text.txt --steps 2 --json
fi

# ---- --mem-limit: the start's estimate (parameters, gradients, moments, feeds) ...
expect_refused "the limit given by --mem-limit" "$PIPIT" train --data text.txt --model gpt2 --ctx 64 --steps 1 --mem-limit 1e9
# ... and pipit_compile's exact plan, activations included: 12 MiB of state pass
# the start, the activations of 64 microbatches of 8 x 64 tokens in GPipe do not
expect_refused "activation arenas" "$PIPIT" train --data text.txt --pp 2 --schedule gpipe --microbatches 64 --steps 1 \
    --mem-limit 60e6
# (plan: each world rank of the planned job against --mem-limit, the target's)
expect_fail "world rank 1 (the largest of 2) needs 584.1 MiB of memory but 57.2 MiB is available" "$PIPIT" plan \
    --data text.txt --pp 2 --schedule gpipe --microbatches 64 --mem-limit 60e6
expect_fail "or fewer --microbatches need less; --no-mem-check skips this check" "$PIPIT" plan \
    --data text.txt --pp 2 --schedule gpipe --microbatches 64 --mem-limit 60e6
expect_ok "$PIPIT" plan --data text.txt --pp 2 --schedule gpipe --microbatches 64 --mem-limit 60e6 --no-mem-check
expect_ok "$PIPIT" train --data text.txt --steps 1 --mem-limit 1e9
# eval names its own flag for M
expect_ok "$PIPIT" train --data text.txt --steps 0 --save w.st
expect_refused "--batches" "$PIPIT" eval --init w.st --data text.txt --ctx 64 --micro-batch 8 --batches 1000000 \
    --mem-limit 1e8

# ---- --mem-limit: one rule for every command that takes it (issue 25
# item 11): a number of bytes from 1 to 2^56 (0 used to mean "detected" in
# train and was refused by plan --search; 1e30 silently replaced the
# machine's limit), and for the commands that run here (train, eval) and
# plan --search (one device of --hw) at most the machine's, unless
# --no-mem-check; plan runs nothing, so its limit is the target's
for cmd in "train --data text.txt --steps 1" "eval --init w.st --data text.txt" "plan --data text.txt" \
           "plan --search --global-batch 8"; do
    for v in 0 -5 1e30; do
        # shellcheck disable=SC2086
        expect_fail "--mem-limit must be a number of bytes from 1 to 2^56 (got ${v/e30/e+30}): leave the flag out" \
            "$PIPIT" $cmd --mem-limit $v
    done
done
echo '{"mem-limit": 0}' >zero.json
expect_fail "--mem-limit must be a number of bytes from 1 to 2^56 (got 0)" "$PIPIT" train --data text.txt --steps 1 --config zero.json
expect_fail "--mem-limit 1e+15 (909.5 TiB) is above what this process may use, the limit being " \
    "$PIPIT" train --data text.txt --steps 1 --mem-limit 1e15
expect_fail "; lower it, or pass --no-mem-check to use it anyway" "$PIPIT" train --data text.txt --steps 1 --mem-limit 1e15
expect_ok "$PIPIT" train --data text.txt --steps 1 --mem-limit 1e15 --no-mem-check
expect_fail "is above what this process may use" "$PIPIT" eval --init w.st --data text.txt --mem-limit 1e15
expect_fail "--mem-limit 1e+12 (931.3 GiB) is above the memory of one device of --hw h100: " \
    "$PIPIT" plan --search --global-batch 8 --hw h100 --mem-limit 1e12
expect_ok "$PIPIT" plan --search --global-batch 8 --hw h100 --mem-limit 1e12 --no-mem-check
expect_ok "$PIPIT" plan --data text.txt --mem-limit 1e15 # a cluster's rank may hold more than this machine

# ---- planning bigger than this machine (issue 25 item 12): plan allocates
# no model (pipit_options.plan_only), so GPT-2 XL (1.5 B parameters, 23 GiB
# of state) plans under 3 GiB of address space, in little memory; it used
# to be refused by the admission of this machine, and with --no-mem-check
# to run out of memory initialising the weights. Its ranks are checked
# against a --mem-limit (the target's), by world rank.
if ! ldd "$PIPIT" | grep -q 'libasan\|libtsan' && command -v prlimit >/dev/null; then
    read -r rc kib out < <(max_rss prlimit --as=$((3 << 30)) "$PIPIT" plan --data text.txt --model gpt2-xl --pp 4 --microbatches 8)
    [ "$rc" -eq 0 ] || fail "plan of gpt2-xl under 3 GiB of address space: exit $rc: ${out:0:400}"
    grep -q "4 stage(s) on 4 rank(s), 8 microbatch(es)" <<<"$out" || fail "plan of gpt2-xl: ${out:0:400}"
    grep -q "held per world rank: parameters 1803756800 bytes" <<<"$out" || fail "plan of gpt2-xl: rank 0's parameters: ${out:0:600}"
    # against the same binary planning the tiny preset: the libraries it
    # loads (a CUDA build maps cuBLAS, ~200 MiB resident) are not the plan's
    read -r _ base_kib _ < <(max_rss "$PIPIT" plan --data text.txt)
    [ $((kib - base_kib)) -lt 102400 ] ||
        fail "plan of gpt2-xl: $kib KiB resident, $((kib - base_kib)) KiB above the tiny plan's (it should hold the plan only)"
    read -r rc kib out < <(max_rss prlimit --as=$((3 << 30)) "$PIPIT" plan --data text.txt --model gpt2-xl --pp 4 --no-mem-check --json)
    [ "$rc" -eq 0 ] || fail "plan --no-mem-check of gpt2-xl under 3 GiB of address space: exit $rc: ${out:0:400}"
fi
expect_fail "world rank 3 (the largest of 4) needs 8.6 GiB of memory but 3.7 GiB is available" \
    "$PIPIT" plan --data text.txt --model gpt2-xl --pp 4 --mem-limit 4e9

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "ok"
