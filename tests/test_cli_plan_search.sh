#!/usr/bin/env bash
# test_cli_plan_search.sh — `pipit plan --search`: on small cases its best
# equals the brute-force minimum of `pipit sim` run on every combination one
# by one (schedule names from the CLI's own list, every V, every micro-batch
# size, every tp x dp), under a memory limit that rejects some; the
# rejection counts add up; bad inputs fail clearly. Existing `pipit plan`
# (no --search) is unchanged.
# Usage: test_cli_plan_search.sh PIPIT SRCDIR
set -u

source "$(dirname "$0")/cli_lib.sh"
cli_setup cli_plan_search "${1:-}"

$PY - "$PIPIT" <<'PYEOF' || fail "search != brute force"
import json, re, subprocess, sys
pipit = sys.argv[1]

def run(args):
    p = subprocess.run([pipit] + args, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr

# the schedule names, from the CLI's message for an unknown one
rc, out, err = run(["sim", "--layers", "2", "--hidden", "8", "--heads", "2", "--seq", "4", "--vocab", "8",
                    "--global-batch", "1", "--hw", "cpu", "--schedule", "nope"])
names = re.search(r"expected one of (.*?)(;|$)", err).group(1).split(", ")
assert "gpipe" in names and "1f1b" in names, names

def brute(model, G, pp, gpus, hw, limit):
    L, h, a, s, V = model
    best, fits, total = None, 0, 0
    meshes = [(t, gpus // pp // t) for t in range(1, gpus // pp + 1) if (gpus // pp) % t == 0] if gpus else [(1, 1)]
    for t, d in meshes:
        if G % d:
            continue
        for name in names:
            for v in range(1, L // pp + 1):
                for b in range(1, G // d + 1):
                    if (G // d) % b:
                        continue
                    total += 1
                    rc, out, err = run(["sim", "--layers", str(L), "--hidden", str(h), "--heads", str(a), "--seq", str(s),
                                        "--vocab", str(V), "--micro-batch", str(b), "--global-batch", str(G),
                                        "--tp", str(t), "--pp", str(pp), "--dp", str(d), "--schedule", name,
                                        "--virtual", str(v), "--hw", hw, "--json"])
                    if rc != 0:
                        continue
                    j = json.loads(out)
                    if j["peak_bytes_per_rank"] > limit:
                        continue
                    fits += 1
                    if best is None or j["step_s"] < best:
                        best = j["step_s"]
    return best, fits, total

cases = [
    # (model L h a s V, G, pp, gpus, hw, mem limit)
    ((4, 128, 4, 64, 256), 16, 2, 0, "cpu", 2.4e7),
    ((4, 256, 8, 128, 512), 16, 2, 8, "a100", 3e7),
]
for model, G, pp, gpus, hw, limit in cases:
    L, h, a, s, V = model
    args = ["plan", "--search", "--global-batch", str(G), "--layers", str(L), "--dim", str(h), "--heads", str(a),
            "--ctx", str(s), "--vocab", str(V), "--pp", str(pp), "--hw", hw, "--mem-limit", str(limit), "--json"]
    if gpus:
        args += ["--gpus", str(gpus)]
    rc, out, err = run(args)
    assert rc == 0, err
    j = json.loads(out)
    want, fits, total = brute(model, G, pp, gpus, hw, limit)
    assert j["candidates"] == total, (j["candidates"], total)
    assert j["fit"] == fits, (j["fit"], fits)
    assert sum(j["rejected"].values()) == total - fits, j
    assert j["rejected"]["over the memory limit"] > 0, j  # the limit bites
    got = j["best"][0]["step_s"]
    assert abs(got - want) <= 1e-9 * want, (got, want)
    steps = [x["step_s"] for x in j["best"]]
    assert steps == sorted(steps), steps
    print("ok", hw, "best", j["best"][0]["schedule"], "V", j["best"][0]["virtual"], got, "of", total)
PYEOF

# ---- text output: the top rows and the reasons; --verbose lists each rejection
expect_ok "$PIPIT" plan --search --global-batch 16 --pp 2 --mem-limit 2.4e7 --top 3
grep -q "candidates:" <<<"$OUT" && grep -q "over the memory limit" <<<"$OUT" && [ "$(grep -c '^ *[123]  ' <<<"$OUT")" -eq 3 ] ||
    fail "text output: $OUT"
expect_ok "$PIPIT" plan --search --global-batch 16 --pp 2 --mem-limit 2.4e7 --verbose
grep -q "^rejected .*the schedule does not accept" <<<"$OUT" || fail "--verbose: $OUT"

# ---- bad inputs
expect_fail "--global-batch is required" "$PIPIT" plan --search
expect_fail "--mem-limit must be a positive" "$PIPIT" plan --search --global-batch 8 --mem-limit 0
expect_fail "--eager-limit must be >= 0 bytes" "$PIPIT" plan --search --global-batch 8 --eager-limit -5
expect_fail "not a multiple of --pp" "$PIPIT" plan --search --global-batch 8 --pp 3 --gpus 8 --hw a100
expect_fail "unknown hardware" "$PIPIT" plan --search --global-batch 8 --hw nope
expect_fail "unknown --model" "$PIPIT" plan --search --global-batch 8 --model gpt5
# plain plan keeps its flags and errors
expect_fail "--data is required" "$PIPIT" plan --pp 2

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "ok"
