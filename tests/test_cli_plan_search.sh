#!/usr/bin/env bash
# test_cli_plan_search.sh — `pipit plan --search`: on small cases its best
# equals the brute-force minimum of `pipit sim` run on every combination one
# by one (schedule names from the CLI's own list, every V, every micro-batch
# size, every tp x dp, every pp when --pp is not given, with --kv-heads),
# under a memory limit that rejects some; the vocabulary padding it names
# for a tp rejected by the vocabulary alone is the hand-computed one; the
# rejection counts add up; bad inputs fail clearly. Existing `pipit plan`
# (no --search) is unchanged.
# Usage: test_cli_plan_search.sh PIPIT SRCDIR
set -u

source "$(dirname "$0")/cli_lib.sh"
cli_setup cli_plan_search "${1:-}"
head -c 200000 "${2:?usage: test_cli_plan_search.sh PIPIT SRCDIR}/README.md" >text.txt # for `pipit plan` (a compile)

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

def brute(model, G, pp, gpus, hw, limit, kv=None):
    L, h, a, s, V = model
    best, fits, total = None, 0, 0
    # pp None: searched over the divisors of gpus (issue 25 item 12)
    pps = [pp] if pp else [p for p in range(1, gpus + 1) if gpus % p == 0]
    meshes = [(p, t, gpus // p // t) for p in pps for t in range(1, gpus // p + 1) if (gpus // p) % t == 0] if gpus \
        else [(pp, 1, 1)]
    for pp, t, d in meshes:
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
                                        "--virtual", str(v), "--hw", hw, "--json"] + (["--kv-heads", str(kv)] if kv else []))
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
    # (model L h a s V, G, pp, gpus, hw, mem limit, kv heads)
    ((4, 128, 4, 64, 256), 16, 2, 0, "cpu", 2.4e7, None),
    ((4, 256, 8, 128, 512), 16, 2, 8, "a100", 3e7, None),
    # P searched too (no --pp) and grouped-query heads (issue 25 item 12)
    ((4, 256, 8, 128, 512), 2, None, 4, "a100", 2.75e7, 2),
]
for model, G, pp, gpus, hw, limit, kv in cases:
    L, h, a, s, V = model
    args = ["plan", "--search", "--global-batch", str(G), "--layers", str(L), "--dim", str(h), "--heads", str(a),
            "--ctx", str(s), "--vocab", str(V), "--hw", hw, "--mem-limit", str(limit), "--json", "--top", "1000",
            "--recompute", "none", "--zero", "0",  # sim's defaults: the brute force runs those
            "--no-sp", "--cp", "1"]  # (sp and cp searched: the brute force below)
    if pp:
        args += ["--pp", str(pp)]
    if gpus:
        args += ["--gpus", str(gpus)]
    if kv:
        args += ["--kv-heads", str(kv)]
    rc, out, err = run(args)
    assert rc == 0, err
    j = json.loads(out)
    want, fits, total = brute(model, G, pp, gpus, hw, limit, kv)
    if not pp:
        assert {x["pp"] for x in j["best"]} == {1, 2, 4}, sorted({x["pp"] for x in j["best"]})
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

# ---- a tp that divides everything but the vocabulary: the padding that
# lets it through (issue 25 item 12). V = 250 with 4 heads on 8 GPUs:
# tp 4 fails only for the vocabulary (250 = 4 x 62 + 2), tp 8 for the
# heads; the smallest multiple of 4 from 250 is 252, and with it tp 4 runs
PS=(plan --search --global-batch 8 --layers 4 --dim 128 --heads 4 --ctx 64 --hw a100 --gpus 8 --pp 1 --recompute none --zero 1
    --no-sp --cp 1)
expect_ok "$PIPIT" "${PS[@]}" --vocab 250 --verbose
grep -q "note: tp 4 divides everything but the vocabulary (250): --vocab 252 (padded with 2 unused rows) would allow it" <<<"$OUT" ||
    fail "no padding note for --vocab 250: $OUT"
grep -q "^rejected .*tp=4 .*vocab 250 is not a multiple of tp 4 (--vocab 252 would be)" <<<"$OUT" || fail "--verbose: $OUT"
expect_ok "$PIPIT" "${PS[@]}" --vocab 250 --json --top 1000
$PY -c 'import json,sys; j=json.loads(sys.argv[1]); assert j["vocab_padding"] == {"vocab": 252, "tp": [4]}, j["vocab_padding"]; assert 4 not in {x["tp"] for x in j["best"]}' "$OUT" ||
    fail "JSON vocab_padding for --vocab 250"
expect_ok "$PIPIT" "${PS[@]}" --vocab 252 --json --top 1000
$PY -c 'import json,sys; j=json.loads(sys.argv[1]); assert "vocab_padding" not in j; assert 4 in {x["tp"] for x in j["best"]}' "$OUT" ||
    fail "--vocab 252: tp 4 not searched"
expect_fail "--kv-heads 3 does not divide --heads 4" "$PIPIT" "${PS[@]}" --vocab 252 --kv-heads 3

# ---- text output: the top rows and the reasons; --verbose lists each rejection
expect_ok "$PIPIT" plan --search --global-batch 16 --pp 2 --mem-limit 2.4e7 --top 3
grep -q "candidates:" <<<"$OUT" && grep -q "over the memory limit" <<<"$OUT" && [ "$(grep -c '^ *[123]  ' <<<"$OUT")" -eq 3 ] ||
    fail "text output: $OUT"
expect_ok "$PIPIT" plan --search --global-batch 16 --pp 2 --mem-limit 2.4e7 --verbose
grep -q "^rejected .*the schedule does not accept" <<<"$OUT" || fail "--verbose: $OUT"

# ---- the controllable-memory V schedules are in the search space: a bound
# (tiny, 8 layers, P = 4, G = 16) below every other schedule's smallest peak
# (1F1B's 11.33 MB at M = 16) leaves V-Half (10.38 MB) and V-Min (9.30 MB),
# and one below V-Half's leaves V-Min alone: what a person would pick
expect_ok "$PIPIT" plan --search --global-batch 16 --pp 4 --layers 8 --mem-limit 1.1e7 --json --recompute none
$PY -c 'import json,sys; b=json.loads(sys.argv[1])["best"]; assert [x["schedule"] for x in b] == ["v-half", "v-min"], b' "$OUT" ||
    fail "--mem-limit 1.1e7 at P=4: v-half then v-min alone: $OUT"
expect_ok "$PIPIT" plan --search --global-batch 16 --pp 4 --layers 8 --mem-limit 1.0e7 --json --recompute none
$PY -c 'import json,sys; b=json.loads(sys.argv[1])["best"]; assert [x["schedule"] for x in b] == ["v-min"], b' "$OUT" ||
    fail "--mem-limit 1.0e7 at P=4: v-min alone: $OUT"

# ---- remat and the ZeRO stages are in the search space (issue 29 item 3).
# Below V-Min's 9.30 MB nothing fits without recomputation, and every
# candidate that fits recomputes: what a person would do; each row's step
# time and peak are `pipit sim`'s for that row (an independent run)
expect_fail "none of the" "$PIPIT" plan --search --global-batch 16 --pp 4 --layers 8 --mem-limit 9e6 --recompute none
expect_ok "$PIPIT" plan --search --global-batch 16 --pp 4 --layers 8 --mem-limit 9e6 --json --top 3
$PY - "$PIPIT" "$OUT" <<'PYEOF' || fail "remat under 9e6"
import json, subprocess, sys
pipit, j = sys.argv[1], json.loads(sys.argv[2])
b = j["best"]
assert len(b) == 3 and all(x["recompute"] == "full" and x["zero"] == 0 for x in b), b
for x in b:
    assert x["peak_bytes_per_rank"] <= 9e6, x
    out = subprocess.run([pipit, "sim", "--layers", "8", "--hidden", "128", "--heads", "4", "--seq", "64", "--vocab", "256",
                          "--global-batch", "16", "--micro-batch", str(x["micro_batch"]), "--pp", "4", "--tp", "1",
                          "--dp", "1", "--schedule", x["schedule"], "--virtual", str(x["virtual"]), "--recompute", "full",
                          "--hw", "cpu", "--json"], capture_output=True, text=True, check=True).stdout
    s = json.loads(out)
    assert s["step_s"] == x["step_s"] and s["peak_bytes_per_rank"] == x["peak_bytes_per_rank"], (s, x)
PYEOF
# dp 2, no recomputation, under 14.5 MB: only ZeRO-1 fits (unsharded Adam
# state is 17.0 MB; ZeRO-2 and ZeRO-3, which hold the full blocks during a
# step as pipit's runtime does and keep a 1/dp shard more each, 15.4 and
# 17.0 MB); for one config each stage above 1 adds the same shard
expect_ok "$PIPIT" plan --search --global-batch 16 --pp 2 --dp 2 --layers 8 --recompute none --mem-limit 1.45e7 --json --top 1000
$PY -c 'import json,sys; b=json.loads(sys.argv[1])["best"]; assert b and {x["zero"] for x in b} == {1}, b' "$OUT" ||
    fail "--dp 2 --mem-limit 1.45e7: ZeRO-1 alone: $OUT"
expect_ok "$PIPIT" plan --search --global-batch 16 --pp 2 --dp 2 --layers 8 --recompute none --no-mem-check --json --top 100000
$PY -c '
import json, sys
b = json.loads(sys.argv[1])["best"]
key = lambda x: (x["schedule"], x["virtual"], x["micro_batch"])
by = {}
for x in b:
    if not x["reshard_after_forward"]:  # (below: ZeRO-3 per task)
        by.setdefault(key(x), {})[x["zero"]] = x
assert len(by) > 10, len(by)
for k, z in by.items():
    assert sorted(z) == [0, 1, 2, 3], (k, sorted(z))
    p = [z[i]["peak_bytes_per_rank"] for i in range(4)]
    assert p[1] < p[0] and p[2] - p[1] > 0 and abs((p[3] - p[2]) - (p[2] - p[1])) <= 1e-6 * p[0], (k, p)
    assert z[1]["step_s"] == z[2]["step_s"] == z[3]["step_s"] <= z[0]["step_s"], k
' "$OUT" || fail "ZeRO stages: peaks and step times"

# ---- ZeRO-3 with --reshard-after-forward (zero 3r) is in the search space
# (issue 29): priced with each param gathered per task that reads it (F, B,
# BW) instead of once per step, and its peak holding the most gathered at
# once instead of the full block. tiny, 8 layers, P = 2, D = 4, G = 16, no
# recomputation: ZeRO-1's smallest peak is 12.26 MB, ZeRO-3 per task's
# 11.56 MB (at D = 4 the param, grad and moment shards are less than ZeRO-1's
# full params), so under 1.2e7 it alone fits and the search picks it; the
# compiled programs (`pipit plan`'s memory report, an independent count)
# order the picked config's peaks the same way. Under 1.3e7 ZeRO-1 fits and
# is faster: the plan is not 3r. At D = 2 its shards add up to ZeRO-1's
# full params and the gathered params come on top: not in a search under
# ZeRO-1's peak (the D = 2 case above)
S4=(plan --search --global-batch 16 --pp 2 --dp 4 --layers 8 --recompute none --json)
expect_ok "$PIPIT" "${S4[@]}" --no-mem-check --top 100000
echo "$OUT" >all4.json
expect_ok "$PIPIT" "${S4[@]}" --mem-limit 1.2e7 --top 100000
echo "$OUT" >r12.json
expect_ok "$PIPIT" "${S4[@]}" --mem-limit 1.3e7 --top 100000
echo "$OUT" >r13.json
$PY - "$PIPIT" <<'PYEOF' || fail "ZeRO-3 per task in the search"
import json, subprocess, sys
pipit = sys.argv[1]
allb = json.load(open("all4.json"))["best"]
key = lambda x: (x["schedule"], x["virtual"], x["micro_batch"])
by = {}
for x in allb: by.setdefault(key(x), {})[(x["zero"], x["reshard_after_forward"])] = x
for k, z in by.items():  # offered wherever it lowers the peak, slower than ZeRO-3 (its gathers)
    r, z1, z3 = z[(3, True)], z[(1, False)], z[(3, False)]
    assert r["peak_bytes_per_rank"] < z1["peak_bytes_per_rank"] < z3["peak_bytes_per_rank"], (k, r, z1)
    assert r["step_s"] > z3["step_s"] == z1["step_s"], (k, r, z3)
assert all(x["recompute"] == "none" for x in allb)
b = json.load(open("r12.json"))["best"]
assert b and all(x["zero"] == 3 and x["reshard_after_forward"] for x in b), b
assert all(x["peak_bytes_per_rank"] <= 1.2e7 for x in b), b
best = b[0]
assert best["step_s"] == min(x["step_s"] for x in allb if x["reshard_after_forward"] and x["peak_bytes_per_rank"] <= 1.2e7)
# the planner's memory report of the compiled programs: the same order
peak = {}
for z in (["--zero", "1"], ["--zero", "3"], ["--zero", "3", "--reshard-after-forward"]):
    out = subprocess.run([pipit, "plan", "--data", "text.txt", "--pp", "2", "--dp", "4", "--layers", "8",
                          "--microbatches", str(best["microbatches"]), "--micro-batch", str(best["micro_batch"]),
                          "--schedule", best["schedule"], "--virtual", str(best["virtual"]), "--json"] + z,
                         capture_output=True, text=True, check=True).stdout
    peak[" ".join(z)] = max(r["memory"]["total"] for r in json.loads(out)["ranks"])
assert peak["--zero 3 --reshard-after-forward"] < peak["--zero 1"] < peak["--zero 3"], peak
# and `pipit sim --reshard-after-forward` prices the row as the search did
s = json.loads(subprocess.run([pipit, "sim", "--layers", "8", "--hidden", "128", "--heads", "4", "--seq", "64", "--vocab",
                               "256", "--global-batch", "16", "--micro-batch", str(best["micro_batch"]), "--pp", "2",
                               "--dp", "4", "--schedule", best["schedule"], "--virtual", str(best["virtual"]), "--zero",
                               "3", "--reshard-after-forward", "--hw", "cpu", "--json"],
                              capture_output=True, text=True, check=True).stdout)
assert s["step_s"] == best["step_s"] and s["peak_bytes_per_rank"] == best["peak_bytes_per_rank"], (s, best)
b13 = json.load(open("r13.json"))["best"]
assert b13[0]["zero"] == 1 and not b13[0]["reshard_after_forward"], b13[0]
assert any(x["reshard_after_forward"] for x in b13), "3r is a runner-up under 1.3e7 too"
print("reshard ok: picked", best, "planner", peak)
PYEOF
expect_ok "$PIPIT" plan --search --global-batch 16 --pp 2 --dp 4 --layers 8 --recompute none --mem-limit 1.2e7 --top 2
grep -q "^ *1  .* 3r  none " <<<"$OUT" && grep -q "^(zero 3r: ZeRO-3 with --reshard-after-forward" <<<"$OUT" ||
    fail "text: 3r rows and their legend: $OUT"
# a 16-bit dtype's loop reads its 16-bit copies: per task nothing is gathered, nothing saved, not offered
expect_ok "$PIPIT" plan --search --global-batch 16 --pp 2 --dp 4 --layers 8 --recompute none --hw a100 --no-mem-check \
    --json --top 100000
$PY -c 'import json,sys; b=json.loads(sys.argv[1])["best"]; assert b and not any(x["reshard_after_forward"] for x in b)' "$OUT" ||
    fail "a100 (bf16): 3r offered"
expect_fail "reshard_after_forward releases ZeRO-3's gathered parameters: it needs zero1 = 3 (got 1)" "$PIPIT" sim \
    --layers 2 --hidden 8 --heads 2 --seq 4 --vocab 8 --global-batch 2 --dp 2 --hw cpu --zero 1 --reshard-after-forward

# text: the runner-ups with their zero and remat columns
expect_ok "$PIPIT" plan --search --global-batch 16 --pp 4 --layers 8 --mem-limit 9e6 --top 4
grep -q "zero remat" <<<"$OUT" && grep -q "runner-ups" <<<"$OUT" && [ "$(grep -c '^ *[1234]  .* full ' <<<"$OUT")" -eq 4 ] ||
    fail "text runner-ups: $OUT"

# ---- sp and cp searched (with --gpus: pp x tp x cp x dp), ep with a MoE model: the best equals the
# brute-force minimum of `pipit sim` over every combination, and every one is counted
$PY - "$PIPIT" <<'PYEOF' || fail "sp/cp/ep search != brute force"
import json, subprocess, sys, re
pipit = sys.argv[1]
def run(args):
    p = subprocess.run([pipit] + args, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr
rc, out, err = run(["sim", "--layers", "2", "--hidden", "8", "--heads", "2", "--seq", "4", "--vocab", "8",
                    "--global-batch", "1", "--hw", "cpu", "--schedule", "nope"])
names = re.search(r"expected one of (.*?)(;|$)", err).group(1).split(", ")
# (L h a kv F s V) = (1 64 4 2 352 64 256), G = 2, 2 GPUs, pp 1, 4 experts top-2 (one case: it
# searches all three; the dense search is the same code with ep fixed at 1)
for moe in (True,):
    model = ["--layers", "1", "--dim", "64", "--heads", "4", "--kv-heads", "2", "--ctx", "64", "--vocab", "256"]
    simm = ["--arch", "llama", "--ffn-hidden", "352", "--layers", "1", "--hidden", "64", "--heads", "4", "--kv-heads", "2",
            "--seq", "64", "--vocab", "256"]
    if moe:
        model += ["--experts", "4"]
        simm += ["--experts", "4", "--top-k", "2"]
    rc, out, err = run(["plan", "--search", "--model", "llama-tiny", "--global-batch", "2", "--gpus", "2", "--pp", "1",
                        "--hw", "a100", "--no-mem-check", "--recompute", "none", "--zero", "0", "--json", "--top", "100000"]
                       + model)
    assert rc == 0, err
    j = json.loads(out)
    best, total = None, 0
    seen = set()
    for t in (1, 2):
        for c in (1, 2):
            if 2 % (t * c):
                continue
            d = 2 // t // c
            if 2 % d:
                continue
            for sp in ((0, 1) if t > 1 else (0,)):
                for ep in ([e for e in range(1, d + 1) if d % e == 0 and 4 % e == 0] if moe else [1]):
                    for name in names:
                        for v in (1,):
                            for b in (1, 2):
                                if (2 // d) % b:
                                    continue
                                total += 1
                                args = ["sim"] + simm + ["--global-batch", "2", "--micro-batch", str(b), "--tp", str(t),
                                        "--cp", str(c), "--dp", str(d), "--schedule", name, "--virtual", str(v),
                                        "--hw", "a100", "--json"] + (["--sp"] if sp else []) + (["--ep", str(ep)] if moe else [])
                                rc, o, e = run(args)
                                if rc != 0:
                                    continue
                                x = json.loads(o)
                                seen.add((t, c, sp, ep))
                                if best is None or x["step_s"] < best:
                                    best = x["step_s"]
    assert j["candidates"] == total, (moe, j["candidates"], total)
    got = j["best"][0]["step_s"]
    assert abs(got - best) <= 1e-9 * best, (moe, got, best)
    found = {(x["tp"], x["cp"], int(x["sp"]), x["ep"]) for x in j["best"]}
    assert found == seen, (moe, sorted(found ^ seen))
    assert {x[0] for x in found} == {x[1] for x in found} == {x[3] for x in found} == {1, 2}, found
    assert any(x[2] for x in found), found  # sp at tp 2
    print("ok", "moe" if moe else "dense", "best", j["best"][0], "of", total)
PYEOF
expect_fail "--top-k is a mixture-of-experts flag: give --experts too" "$PIPIT" plan --search --global-batch 8 --top-k 2
expect_fail "--ep 3 must be >= 1 and divide --experts 8" "$PIPIT" plan --search --global-batch 8 --model moe-tiny --ep 3
expect_fail "--sp and --no-sp" "$PIPIT" plan --search --global-batch 8 --sp --no-sp
expect_fail "--cp must be >= 1 (got 0)" "$PIPIT" plan --search --global-batch 8 --cp 0

# ---- bad inputs
expect_fail "--zero must be 0, 1, 2 or 3 (got 4)" "$PIPIT" plan --search --global-batch 8 --zero 4
expect_fail "--zero1 is --zero 1" "$PIPIT" plan --search --global-batch 8 --zero1 --zero 2
expect_fail "bad value 'some' for --recompute" "$PIPIT" plan --search --global-batch 8 --recompute some
expect_fail "zero1 is the ZeRO stage, 0 to 3 (got 5)" "$PIPIT" sim --layers 2 --hidden 8 --heads 2 --seq 4 --vocab 8 \
    --global-batch 2 --dp 2 --hw cpu --zero 5
expect_fail "--global-batch is required" "$PIPIT" plan --search
expect_fail "--mem-limit must be a number of bytes from 1 to 2^56 (got 0)" "$PIPIT" plan --search --global-batch 8 --mem-limit 0
expect_fail "--eager-limit must be >= 0 bytes" "$PIPIT" plan --search --global-batch 8 --eager-limit -5
expect_fail "not a multiple of --pp" "$PIPIT" plan --search --global-batch 8 --pp 3 --gpus 8 --hw a100
expect_fail "unknown hardware" "$PIPIT" plan --search --global-batch 8 --hw nope
expect_fail "unknown --model" "$PIPIT" plan --search --global-batch 8 --model gpt5
# plain plan keeps its flags and errors
expect_fail "--data is required" "$PIPIT" plan --pp 2

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "ok"
