#!/usr/bin/env bash
# test_cli_sim.sh — `pipit sim`: the JSON interface (one object with
# step_s, tflops_per_gpu, mfu, bubble, peak_bytes_per_rank, links, ranks),
# the text report, --weak-scaling and --vs-gpipe on GPT-3 175B / H100, a
# hardware file given by path, and a clear error with a non-zero exit for
# every bad input.
# Usage: test_cli_sim.sh PIPIT SRCDIR
set -u

source "$(dirname "$0")/cli_lib.sh"
cli_setup cli_sim "${1:-}"
SRC=${2:-}

GPT3=(--layers 96 --hidden 12288 --heads 96 --seq 2048 --vocab 51200 --micro-batch 1 --tp 8 --pp 8
      --schedule interleaved-1f1b --recompute full --hw h100)
SMALL=(--layers 24 --hidden 2304 --heads 24 --seq 2048 --vocab 51200 --global-batch 512 --dp 32 --hw a100)

# ---- JSON: one object, the keys scripts rely on, self-consistent numbers
expect_ok "$PIPIT" sim "${GPT3[@]}" --global-batch 128 --dp 2 --json
$PY - "$OUT" <<'PYEOF' || fail "sim --json: $OUT"
import json, sys
j = json.loads(sys.argv[1])
for k in ["step_s", "tflops_per_gpu", "mfu", "bubble", "peak_bytes_per_rank", "links", "ranks", "stages"]:
    assert k in j, k
assert j["gpus"] == 128 and j["microbatches"] == 64 and j["virtual"] == 2, j
# TFLOP/s per GPU is Megatron's count over the step and the GPUs
b, s, l, h, V = 128, 2048, 96, 12288, 51200
flops = 96 * b * s * l * h * h * (1 + s / (6 * h) + V / (16 * l * h))
assert abs(flops / j["step_s"] / 128 / 1e12 / j["tflops_per_gpu"] - 1) < 1e-5, j["tflops_per_gpu"]
assert 0 < j["bubble"] < 0.5 and 0 < j["mfu"] < j["hfu"] < 1
assert len(j["ranks"]) == 8 and len(j["stages"]) == 16
assert max(r["peak_bytes"] for r in j["ranks"]) == j["peak_bytes_per_rank"]
# interleaved: 16 stages on 8 ranks, 15 boundaries; each carries 64 activations of 2048 x 12288 x 2 B
# (per GPU: each of a stage's 8 tensor-parallel GPUs sends its counterpart the whole activation)
links = {(x["from"], x["to"]): x for x in j["links"]}
assert set(links) == {(r, (r + 1) % 8) for r in range(8)}, links
msg = 2048 * 12288 * 2
# (the JSON has 9 significant digits)
assert abs(links[(0, 1)]["fwd_bytes"] / (2 * 64 * msg) - 1) < 1e-8 and abs(links[(7, 0)]["fwd_bytes"] / (64 * msg) - 1) < 1e-8
PYEOF

# ---- text report
expect_ok "$PIPIT" sim "${SMALL[@]}" --recompute full
grep -q "TFLOP/s per GPU" <<<"$OUT" || fail "text report: $OUT"
grep -q "tp 1 x pp 1 x dp 32 = 32 GPUs of a100" <<<"$OUT" || fail "text report mesh line: $OUT"

# ---- weak scaling of GPT-3 175B from 128 to 1024 H100s, and the gain over GPipe at equal memory
expect_ok "$PIPIT" sim "${GPT3[@]}" --global-batch 128 --dp 2 --weak-scaling 2,4,8,16 --json
$PY - "$OUT" <<'PYEOF' || fail "weak scaling: $OUT"
import json, sys
rows = [json.loads(l) for l in sys.argv[1].splitlines()]
assert [r["gpus"] for r in rows] == [128, 256, 512, 1024]
assert [r["global_batch"] for r in rows] == [128, 256, 512, 1024]
eff = [r["efficiency"] for r in rows]
assert eff[0] == 1 and all(0.9 < e <= 1 for e in eff) and eff == sorted(eff, reverse=True), eff
# the exchange overlaps the backward: some of it hidden, and what is not is what the step pays
for r in rows:
    assert 0 < r["dp_hidden"] < 1 and abs(r["dp_exposed_s"] - (1 - r["dp_hidden"]) * r["dp_total_s"]) < 1e-5 * r["dp_total_s"], r
PYEOF
expect_ok "$PIPIT" sim "${GPT3[@]}" --global-batch 128 --dp 2 --vs-gpipe --json
$PY - "$OUT" <<'PYEOF' || fail "vs-gpipe: $OUT"
import json, sys
main, g = [json.loads(l) for l in sys.argv[1].splitlines()]
assert g["gpipe_peak_bytes_per_rank"] <= main["peak_bytes_per_rank"]
assert g["gpipe_microbatches_per_flush"] * g["gpipe_flushes"] == 64
assert g["gain"] > 0 and abs(g["gpipe_step_s"] / main["step_s"] - 1 - g["gain"]) < 1e-6
PYEOF

# ---- a hardware file by path works like the built-in it copies
cp "$SRC/data/hw/a100.json" mine.json
expect_ok "$PIPIT" sim "${SMALL[@]}" --json
A=$OUT
expect_ok "$PIPIT" sim "${SMALL[@]/a100/mine.json}" --json
[ "$($PY -c 'import json,sys; print(json.loads(sys.argv[1])["step_s"])' "$A")" = \
  "$($PY -c 'import json,sys; print(json.loads(sys.argv[1])["step_s"])' "$OUT")" ] || fail "file vs built-in differ"

# ---- link constants on the command line: a slow inter-node link slows a pipeline across nodes
PIPE=(--layers 24 --hidden 2304 --heads 24 --seq 2048 --vocab 51200 --global-batch 64 --pp 4 --hw a100 --json)
step() { $PY -c 'import json,sys; print(json.loads(sys.argv[1])["step_s"])' "$OUT"; }
expect_ok "$PIPIT" sim "${PIPE[@]}"
fast=$(step)
expect_ok "$PIPIT" sim "${PIPE[@]}" --link inter=100Mbit:1ms,gpus-per-node=1
slow=$(step)
expect_ok "$PIPIT" sim "${PIPE[@]}" --inter-node-bw 100Mbit --inter-node-lat 1ms --gpus-per-node 1
[ "$(step)" = "$slow" ] || fail "--inter-node-bw/--inter-node-lat/--gpus-per-node differ from the same --link"
$PY -c 'import sys; a, b = map(float, sys.argv[1:]); assert b > 1.5 * a, (a, b)' "$fast" "$slow" || fail "slow link: $fast -> $slow"
expect_ok "$PIPIT" plan --search --global-batch 16 --pp 2 --link inter=100Mbit,gpus-per-node=1 --json
# MPI's rendezvous above an eager limit: each stage message waits for its receiver, which waits it out
expect_ok "$PIPIT" sim "${PIPE[@]}" --link inter=100Mbit:1ms,gpus-per-node=1 --eager-limit 65536
pulled=$(step)
$PY -c 'import sys; a, b = map(float, sys.argv[1:]); assert b > a, (a, b)' "$slow" "$pulled" || fail "rendezvous: $slow -> $pulled"
expect_ok "$PIPIT" sim "${PIPE[@]}" --link inter=100Mbit:1ms,gpus-per-node=1 --eager-limit 1e12
[ "$(step)" = "$slow" ] || fail "an eager limit above the message size changed the step: $slow -> $(step)"
expect_fail "eager limit must be a finite number >= 0 bytes" "$PIPIT" sim "${PIPE[@]}" --eager-limit -1
expect_fail "bad value 'inf' for --eager-limit" "$PIPIT" sim "${PIPE[@]}" --eager-limit inf
expect_fail "bad value 'nan' for --eager-limit" "$PIPIT" sim "${PIPE[@]}" --eager-limit nan
expect_fail "--link: pipit_hw_parse_links: link inter 'fast'" "$PIPIT" sim "${PIPE[@]}" --link inter=fast
expect_fail "--inter-node-lat: pipit_hw_parse_links: link inter-lat '5parsecs'" "$PIPIT" sim "${PIPE[@]}" --inter-node-lat 5parsecs
expect_fail "--gpus-per-node: pipit_hw_parse_links: link gpus-per-node '0'" "$PIPIT" plan --search --global-batch 16 --gpus-per-node 0

# ---- bad inputs: a clear message and a non-zero exit
BASE=(--layers 24 --hidden 2304 --heads 24 --seq 2048 --vocab 51200 --global-batch 512)
expect_fail "heads 24 is not divisible by tp 5" "$PIPIT" sim "${BASE[@]}" --tp 5 --hw a100
expect_fail "layers 24 cannot be split into pp 32" "$PIPIT" sim "${BASE[@]}" --pp 32 --hw a100
expect_fail "pp 4 x virtual 7" "$PIPIT" sim "${BASE[@]}" --pp 4 --schedule interleaved-1f1b --virtual 7 --hw a100
expect_fail "heads 24 is not a multiple of kv heads 5" "$PIPIT" sim "${BASE[@]}" --kv-heads 5 --hw a100
expect_fail "kv heads 2 is not divisible by tp 4" "$PIPIT" sim "${BASE[@]}" --kv-heads 2 --tp 4 --hw a100
expect_fail "ffn hidden 5000 or as ffn multiplier 3, not both" "$PIPIT" sim "${BASE[@]}" --ffn-hidden 5000 --ffn-mult 3 --hw a100
expect_fail "bad value 'bert' for --arch" "$PIPIT" sim "${BASE[@]}" --arch bert --hw a100
expect_fail "global batch 512 is not divisible by micro-batch 1 x dp 3" "$PIPIT" sim "${BASE[@]}" --dp 3 --hw a100
expect_fail "multiple of P" "$PIPIT" sim "${BASE[@]}" --pp 3 --schedule interleaved-1f1b --hw a100
expect_fail "tp 16 spans more than one node" "$PIPIT" sim --layers 24 --hidden 4096 --heads 32 --seq 2048 --vocab 51200 \
    --global-batch 512 --tp 16 --hw a100
expect_fail "must be >= 1" "$PIPIT" sim "${BASE[@]}" --dp 0 --hw a100
expect_fail "unknown hardware 'a10'.*did you mean 'a100'" "$PIPIT" sim "${BASE[@]}" --hw a10
echo '{"name": "x", "peak_flops": {"fp32": 1e12}' > broken.json
expect_fail "broken.json: not a JSON object" "$PIPIT" sim "${BASE[@]}" --hw broken.json
echo '{"name": "x", "peak_flops": {"fp32": 1e12}, "train_dtype": "fp32", "gemm_efficiency": [[1, 1]]}' > partial.json
expect_fail '"mem_bandwidth" is missing' "$PIPIT" sim "${BASE[@]}" --hw partial.json
expect_fail "unknown schedule 'gpip'.*did you mean 'gpipe'" "$PIPIT" sim "${BASE[@]}" --schedule gpip --hw a100
expect_fail "bad value 'some' for --recompute" "$PIPIT" sim "${BASE[@]}" --recompute some --hw a100
expect_fail "--hw is required" "$PIPIT" sim "${BASE[@]}"
expect_fail "unknown dtype 'int4'" "$PIPIT" sim "${BASE[@]}" --dtype int4 --hw a100
expect_fail "bad value 'x' for --weak-scaling" "$PIPIT" sim "${BASE[@]}" --weak-scaling x --hw a100
expect_fail "--calibrate takes only --out" "$PIPIT" sim --calibrate p.json --layers 2
expect_fail "cannot open" "$PIPIT" sim --calibrate missing.json

# ---- calibration: train --profile-out writes the profile, sim --calibrate fits a description from it
$PY -c 'import random; r = random.Random(3); open("t.txt", "w").write("".join(r.choice(["ab ", "cd ", "ef. "]) for _ in range(3000)))'
expect_ok "$PIPIT" train --data t.txt --ctx 16 --layers 2 --heads 2 --dim 32 --micro-batch 2 --microbatches 2 --pp 2 \
    --steps 3 --profile-out prof.json
$PY - <<'PYEOF' || fail "profile JSON"
import json
j = json.load(open("prof.json"))
assert j["model"] == {"arch": "gpt2", "layers": 2, "dim": 32, "heads": 2, "ctx": 16, "vocab": 256, "micro_batch": 2, "microbatches": 2,
                      "pp": 2, "tp": 1, "dp": 1, "threads": 1, "schedule": "1f1b", "virtual": 1}, j["model"]
assert j["steps"] == 2 and j["step_s"] > 0
assert [r["rank"] for r in j["profile"]["ranks"]] == [0, 1]
assert all(r["ops"]["matmul"] > 0 for r in j["profile"]["ranks"])
PYEOF
expect_ok "$PIPIT" sim --calibrate prof.json --out cpu_here.json
# one process: the link between two threads was measured, gpus_per_node is unbounded
$PY - <<'PYEOF' || fail "calibrated links: $(cat cpu_here.json)"
import json
j = json.load(open("cpu_here.json"))
assert j["gpus_per_node"] == 4096, j["gpus_per_node"]
assert j["intra_node"]["bandwidth"] > 0 and j["intra_node"]["latency"] > 0
assert any("two threads of one process" in s and "inter_node not measured" in s for s in j["sources"]), j["sources"]
PYEOF
expect_ok "$PIPIT" sim --layers 2 --hidden 32 --heads 2 --seq 16 --vocab 256 --micro-batch 2 --global-batch 4 --pp 2 \
    --hw cpu_here.json --json
$PY -c 'import json,sys; j=json.loads(sys.argv[1]); assert j["hw"] == "cpu" and j["step_s"] > 0' "$OUT" || fail "calibrated sim: $OUT"
# a Llama profile carries the kv heads and the MLP width; calibration prices them
expect_ok "$PIPIT" train --model llama-tiny --data t.txt --ctx 16 --layers 2 --micro-batch 2 --microbatches 2 --pp 2 \
    --steps 3 --profile-out lprof.json
$PY - <<'PYEOF' || fail "Llama profile JSON"
import json
m = json.load(open("lprof.json"))["model"]
assert m["arch"] == "llama" and m["layers"] == 2 and 1 <= m["kv_heads"] <= m["heads"] and m["ffn_hidden"] > 0, m
PYEOF
expect_ok "$PIPIT" sim --calibrate lprof.json --out cpu_llama.json
$PY -c 'import json; j = json.load(open("cpu_llama.json")); assert "of Llama (2 layers" in j["about"], j["about"]' ||
    fail "Llama calibration: $(cat cpu_llama.json)"
# --arch llama: SwiGLU at Meta's width rule (Llama 2 7B: h 4096 -> 11008), RoPE, flash-style attention
expect_ok "$PIPIT" sim --arch llama --layers 32 --hidden 4096 --heads 32 --seq 4096 --vocab 32000 --global-batch 8 --hw a100 --json
$PY - "$OUT" <<'PYEOF' || fail "sim --arch llama: $OUT"
import json, sys
j = json.loads(sys.argv[1])
assert (j["ffn_hidden"], j["mlp"], j["positions"], j["attention"], j["kv_heads"]) == (11008, "swiglu", "rope", "flash", 32), j
PYEOF
echo '{"model": {"layers": 2}}' > badprof.json
expect_fail "badprof.json.*lacks" "$PIPIT" sim --calibrate badprof.json
expect_fail "--profile-out .*cannot create a file there" "$PIPIT" train --data t.txt --ctx 16 --layers 2 --heads 2 --dim 32 \
    --micro-batch 2 --steps 2 --profile-out /nonexistent/dir/p.json

# ---- sequence parallelism, context parallelism, MoE and EP: hand-computed bytes (docs/sim.md)
# (bf16 on h100: e = 2 bytes; T = b s = 512 tokens; h = 256; t = 4)
SP=(--layers 2 --hidden 256 --heads 8 --seq 512 --vocab 1024 --micro-batch 1 --global-batch 1 --tp 4 --pp 2 --hw h100 --json)
expect_ok "$PIPIT" sim "${SP[@]}"; NOSP=$OUT
expect_ok "$PIPIT" sim "${SP[@]}" --sp; WITHSP=$OUT
expect_ok "$PIPIT" sim "${SP[@]}" --arch llama; LNOSP=$OUT
expect_ok "$PIPIT" sim "${SP[@]}" --arch llama --sp; LSP=$OUT
$PY - "$NOSP" "$WITHSP" "$LNOSP" "$LSP" <<'PYEOF' || fail "sp: the norm regions' bytes are not cut by t"
import json, sys
a, b, la, lb = (json.loads(x) for x in sys.argv[1:])
# one layer a stage; GPT keeps two norm inputs, two matmul inputs (2 bytes each) and two 1-byte dropout
# masks per token and hidden unit outside the TP matmuls: 512 x 256 x 10 bytes, which SP cuts to 1/4
# (the last stage also keeps the final norm's input and output, 2 x 2 bytes, also cut)
for x, y in zip(a["stages"], b["stages"]):
    assert x["act_bytes"] - y["act_bytes"] == 512 * 256 * (10 + 4 * x["stage"]) * 3 / 4, (x, y)
# Llama: no dropout masks, 8 bytes
for x, y in zip(la["stages"], lb["stages"]):
    assert x["act_bytes"] - y["act_bytes"] == 512 * 256 * (8 + 4 * x["stage"]) * 3 / 4, (x, y)
# stage messages: the whole activation per GPU without SP, 1/t with it
assert a["p2p_message_bytes"] == 512 * 256 * 2 and b["p2p_message_bytes"] == 512 * 256 * 2 / 4
assert b["sp"] is True and a["sp"] is False
# the same FLOPs; the same all-reduce bytes moved as all-gather + reduce-scatter, norms on 1/t: not slower
assert a["model_flops"] == b["model_flops"] and b["stages"][0]["f_s"] < a["stages"][0]["f_s"]
PYEOF
# context parallelism: c = 4, GQA 2 kv heads of 32: K and V of the whole sequence (1024 tokens x 64 x 2
# tensors x 2 bytes) all-gathered, 3/4 of it from the other ranks: 196608 bytes a layer
CP=(--arch llama --layers 2 --hidden 256 --heads 8 --kv-heads 2 --seq 1024 --vocab 1024 --global-batch 1 --hw h100 --json)
expect_ok "$PIPIT" sim "${CP[@]}"; CP1=$OUT
expect_ok "$PIPIT" sim "${CP[@]}" --cp 4; CP4=$OUT
expect_ok "$PIPIT" sim "${CP[@]}" --cp 4 --tp 2; CP4T2=$OUT
$PY - "$CP1" "$CP4" "$CP4T2" <<'PYEOF' || fail "cp: bytes differ from the hand formula"
import json, sys
a, b, c = (json.loads(x) for x in sys.argv[1:])
assert b["gpus"] == 4 and b["cp"] == 4 and c["gpus"] == 8, (b["gpus"], c["gpus"])
assert a["cp_allgather_bytes_per_layer"] == 0 and b["cp_allgather_bytes_per_layer"] == 196608
assert c["cp_allgather_bytes_per_layer"] == 196608 / 2  # each TP rank gathers its kv head
# each rank keeps a quarter of the sequence's activations plus the gathered K and V, 2 layers
assert abs(b["stages"][0]["act_bytes"] - (a["stages"][0]["act_bytes"] / 4 + 2 * 196608)) < 1e-6 * b["stages"][0]["act_bytes"]
assert b["params_total"] == a["params_total"] and b["ranks"][0]["params"] == a["ranks"][0]["params"]  # replicated
PYEOF
# time: at 32K tokens each of 4 ranks does a quarter of the work (the causal attention balanced over the
# 2c chunks) plus the all-gathers; on a 100 GB/s, 1 us NVLink, each of 2 layers' all-gather (forward) and
# reduce-scatter (backward) of 3/4 x 32768 x 2 x 1024 x 2 bytes takes 1.00663296 ms + 3 x 1 us
CPL=(--arch llama --layers 2 --hidden 4096 --heads 32 --kv-heads 8 --seq 32768 --vocab 1024 --global-batch 1 --hw h100
     --link intra=100GB:1us --json)
expect_ok "$PIPIT" sim "${CPL[@]}"; CPL1=$OUT
expect_ok "$PIPIT" sim "${CPL[@]}" --cp 4; CPL4=$OUT
$PY - "$CPL1" "$CPL4" <<'PYEOF' || fail "cp: time differs from the hand formula"
import json, sys
a, b = (json.loads(x) for x in sys.argv[1:])
ag = 3 / 4 * 32768 * 2 * 1024 * 2
assert b["cp_allgather_bytes_per_layer"] == ag
assert abs(b["cp_s_per_microbatch"] - 2 * 2 * (ag / 100e9 + 3 * 1e-6)) < 1e-12, b["cp_s_per_microbatch"]
assert a["step_s"] / 4 < b["step_s"] < a["step_s"] / 3, (a["step_s"], b["step_s"])  # (+ the gradients reduced over cp)
PYEOF
# MoE: moe-tiny's shape (4 layers, h 64, 4 heads of 16, 2 kv heads, 8 SwiGLU experts of 144, top-2, vocab 256).
# Per layer: attention 2 x 64^2 + 2 x 64 x 32 = 12288, RMSNorms 2 x 64, router 8 x 64, an expert 3 x 144 x 64
MOE=(--arch llama --layers 4 --hidden 64 --heads 4 --kv-heads 2 --ffn-hidden 144 --vocab 256 --seq 64 --global-batch 4
     --dp 4 --experts 8 --top-k 2 --hw h100 --json)
expect_ok "$PIPIT" sim "${MOE[@]}"; EP1=$OUT
expect_ok "$PIPIT" sim "${MOE[@]}" --ep 4; EP4=$OUT
expect_ok "$PIPIT" sim "${MOE[@]}" --moe-every 2 --shared-experts 1; EVERY2=$OUT
$PY - "$EP1" "$EP4" "$EVERY2" <<'PYEOF' || fail "moe: counts differ from the hand formula"
import json, sys, math
a, b, c = (json.loads(x) for x in sys.argv[1:])
attn, router, expert, ends = 12288 + 128, 512, 3 * 144 * 64, 256 * 64 + 64
assert a["params_total"] == 4 * (attn + router + 8 * expert) + ends, a["params_total"]
assert a["params_active"] == 4 * (attn + router + 2 * expert) + ends, a["params_active"]
# layers 1 and 3 MoE (with a shared expert), 0 and 2 a dense SwiGLU of 144
assert c["params_total"] == 2 * (attn + expert) + 2 * (attn + router + 9 * expert) + ends, c["params_total"]
assert c["params_active"] == 2 * (attn + expert) + 2 * (attn + router + 3 * expert) + ends, c["params_active"]
# capacity: ceil(1.25 x 64 tokens x 2 / 8) = 20 slots per expert
assert a["expert_slots"] == 20 == math.ceil(1.25 * 64 * 2 / 8)
# EP 4: each rank holds 2 of the 8 experts: expert parameters and their bytes (16 a parameter in mixed
# precision, no ZeRO) a quarter; the all-to-all sends 3/4 of the 8 x 20 slots x 64 x 2 bytes
assert a["stages"][0]["expert_params"] == 4 * 8 * expert and b["stages"][0]["expert_params"] == 4 * 2 * expert
assert a["ranks"][0]["static_bytes"] - b["ranks"][0]["static_bytes"] == 4 * 6 * expert * 16
assert a["a2a_bytes_per_layer"] == 0 and b["a2a_bytes_per_layer"] == 3 / 4 * 8 * 20 * 64 * 2
# model FLOPs: active parameters only (k = 2 experts a token), the same with and without EP
assert a["model_flops"] == b["model_flops"]
PYEOF
SPB=(--layers 2 --hidden 256 --heads 8 --vocab 1024 --global-batch 1 --hw h100)
MOEB=(--arch llama --layers 4 --hidden 64 --heads 4 --kv-heads 2 --ffn-hidden 144 --vocab 256 --seq 64 --experts 8 --hw h100)
expect_fail "sequence parallelism (sp) needs tp > 1 (got tp 1)" "$PIPIT" sim "${SPB[@]}" --seq 512 --sp
expect_fail "seq 510 is not divisible by tp 4" "$PIPIT" sim "${SPB[@]}" --seq 510 --tp 4 --sp
expect_fail "seq 1024 is not divisible by 2 x cp = 6" "$PIPIT" sim "${CP[@]}" --cp 3
expect_fail "cp must be >= 1 (got 0)" "$PIPIT" sim "${CP[@]}" --cp 0
expect_fail "experts 8 is not divisible by ep 3" "$PIPIT" sim "${MOEB[@]}" --ep 3 --dp 3 --global-batch 3
expect_fail "dp 4 is not divisible by ep 8" "$PIPIT" sim "${MOE[@]}" --ep 8
expect_fail "top-k 9 is more than the experts (8)" "$PIPIT" sim "${MOEB[@]}" --global-batch 1 --top-k 9
expect_fail "capacity-factor must be > 0 (got 0)" "$PIPIT" sim "${MOE[@]}" --capacity-factor 0
expect_fail "top-k is a mixture-of-experts setting: give experts too" "$PIPIT" sim "${CP[@]}" --top-k 2
expect_fail "ep must be >= 1 (got 0)" "$PIPIT" sim "${MOE[@]}" --ep 0

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "ok"
