#!/usr/bin/env bash
# test_cli_llama.sh — the Llama family through the CLI: the presets' sizes
# (counted here from the architecture), a llama-tiny run whose loss falls,
# --resume continuing it bit for bit, pipelines and data parallelism (P x D,
# ZeRO-1, --auto-stages) giving the single-rank bits, eval, sample and plan
# on its checkpoints, and every bad input refused with a message naming it:
# GQA heads that do not divide, an odd head dimension, Llama flags on GPT-2,
# --tied with --untied, a checkpoint whose tensors are missing or mis-shaped,
# an unrecorded head count, and config.json keys pipit does not implement.
# (Numerics against transformers: test_llama_oracle.sh.)
# Usage: test_cli_llama.sh PIPIT SRCDIR
set -u

CLI_FIXED=1 # expected words are fixed strings
SRC=$(realpath -- "${2:?usage: test_cli_llama.sh PIPIT SRCDIR}")
source "$(dirname "$0")/cli_lib.sh"
cli_setup cli_llama "${1:-}"
field() { $PY -c 'import json,sys; print(json.loads(sys.stdin.read().splitlines()[-1])[sys.argv[1]])' "$1" <<<"$OUT"; }
losses() { grep -o '"loss":[^,]*' "${1:--}"; }
cat "$SRC"/README.md "$SRC"/docs/*.md > text.txt

# ---- presets: parameter counts from the architecture (V C L H KV F tied)
count() { # V C L H KV F TIED: embedding (+ head) + per layer q,k,v,o, gate,up,down, two norms + final norm
    $PY -c 'import sys; V,C,L,H,KV,F,t=map(int,sys.argv[1:]); D=C//H
print(V*C*(1 if t else 2) + L*(2*C*C + 2*C*KV*D + 3*C*F + 2*C) + C)' "$@"
}
for spec in "llama-tiny 256 128 4 4 2 352 0" "llama-100m 50257 768 10 12 4 2048 1"; do
    set -- $spec
    expect_ok "$PIPIT" train --model "$1" --print-config || continue
    want=$(count "$2" "$3" "$4" "$5" "$6" "$7" "$8")
    [ "$(field params)" = "$want" ] || fail "--model $1: $(field params) params, counted $want"
    [ "$(field kv-heads)/$(field ffn-hidden)" = "$6/$7" ] || fail "--model $1: $OUT"
done
# Meta's rule: dim 128 with --ffn-hidden 0 and multiple_of 32 is int(2*512/3) = 341 rounded up: 352
expect_ok "$PIPIT" train --model llama-tiny --ffn-hidden 0 --multiple-of 32 --print-config
[ "$(field ffn-hidden)" = 352 ] || fail "Meta's rule: $OUT"
echo '{"model": "llama-tiny", "kv-heads": 1, "rope-theta": 500000, "tied": true}' > c.json
expect_ok "$PIPIT" train --config c.json --print-config
[ "$(field kv-heads)/$(field rope-theta)/$(field tied)" = "1/500000/True" ] || fail "--config keys: $OUT"
# --print-config reads back through --config (the Llama keys are flags too)
echo "$OUT" | tail -1 > back.json
expect_ok "$PIPIT" train --config back.json --print-config
[ "$(field kv-heads)/$(field rope-theta)/$(field tied)" = "1/500000/True" ] || fail "--print-config round trip: $OUT"

# ---- a run: the loss falls; --resume continues it bit for bit
M=(--model llama-tiny --data text.txt --ctx 32 --layers 2 --micro-batch 4 --seed 5 --json)
expect_ok "$PIPIT" train "${M[@]}" --steps 30 --lr 3e-3 --save run.st
first=$(losses <<<"$OUT" | head -1 | cut -d: -f2) last=$(losses <<<"$OUT" | tail -1 | cut -d: -f2)
$PY -c "import sys; sys.exit(not float('$last') < float('$first') - 0.5)" || fail "loss did not fall: $first -> $last"
"$PIPIT" train "${M[@]}" --steps 4 --save full.st > full.log || fail "4 steps"
"$PIPIT" train "${M[@]}" --steps 2 --save half.st > /dev/null || fail "2 steps"
"$PIPIT" train --resume half.st --steps 4 --json > resumed.log || fail "--resume"
diff <(losses full.log | tail -2) <(losses resumed.log) > /dev/null || fail "resumed losses differ"
expect_fail "--heads 2 contradicts checkpoint 'half.st' (heads 4)" "$PIPIT" train --resume half.st --heads 2
expect_fail "--rope-theta 500 contradicts checkpoint" "$PIPIT" train --resume half.st --rope-theta 500

# ---- pipelines and replicas: the bits of one rank
L=(--model llama-tiny --data text.txt --ctx 16 --layers 4 --micro-batch 2 --steps 2 --seed 3 --save-weights-only)
"$PIPIT" train "${L[@]}" --dp 2 --microbatches 2 --save d1.st > /dev/null || fail "P=1 D=2"
"$PIPIT" train "${L[@]}" --pp 2 --dp 2 --microbatches 2 --save d2.st > /dev/null || fail "P=2 D=2"
"$PIPIT" train "${L[@]}" --pp 2 --dp 2 --zero1 --microbatches 2 --schedule zb-h1 --save d3.st > /dev/null || fail "ZeRO-1"
"$PIPIT" train "${L[@]}" --pp 4 --microbatches 4 --tied --save a1.st > /dev/null || fail "P=4 even"
"$PIPIT" train "${L[@]}" --pp 4 --microbatches 4 --tied --auto-stages --save a2.st > auto.log || fail "--auto-stages"
cmp -s d1.st d2.st || fail "--pp 2 --dp 2 differs from --dp 2"
cmp -s d1.st d3.st || fail "--zero1 with zb-h1 differs"
cmp -s a1.st a2.st || fail "--auto-stages changed the parameters"
grep -q "model.embed_tokens.weight" auto.log || fail "--auto-stages printed no cuts: $(cat auto.log)"
expect_ok "$PIPIT" plan "${L[@]}" --pp 2 --microbatches 2
grep -q "rope" <<<"$OUT" && grep -q "attention_qkv" <<<"$OUT" || fail "plan lacks the Llama ops: $OUT"

# ---- eval and sample on its checkpoint
expect_ok "$PIPIT" eval --init run.st --data text.txt --ctx 32 --micro-batch 4 --batches 2 --json
$PY -c 'import json,sys; l=json.loads(sys.argv[1])["loss"]; sys.exit(not 0 < l < 5)' "$OUT" || fail "eval: $OUT"
expect_ok "$PIPIT" sample --init run.st --prompt "the " --tokens 20 --seed 4 --no-echo
s1=$OUT
expect_ok "$PIPIT" sample --init run.st --prompt "the " --tokens 20 --seed 4 --no-echo
[ "$OUT" = "$s1" ] && [ ${#s1} -eq 20 ] || fail "sample: '$s1' then '$OUT'"

# ---- bad input, each named
expect_fail "heads 4 is not a multiple of kv_heads 3" "$PIPIT" train --model llama-tiny --data text.txt --kv-heads 3 --steps 1
expect_fail "head_dim 33 (dim 132 / heads 4) is odd: RoPE rotates pairs" "$PIPIT" train --model llama-tiny --data text.txt \
    --dim 132 --steps 1
expect_fail "--kv-heads applies to Llama models" "$PIPIT" train --data text.txt --kv-heads 2 --steps 1
expect_fail "--tied and --untied contradict each other" "$PIPIT" train --model llama-tiny --data text.txt --tied --untied
expect_fail "--model tiny is a GPT-2 model, but checkpoint 'run.st' holds a Llama model" "$PIPIT" train --model tiny \
    --init run.st --data text.txt --steps 1
expect_fail "--ffn-hidden 64 disagrees with checkpoint 'run.st' (352)" "$PIPIT" train --init run.st --data text.txt \
    --ffn-hidden 64 --steps 1
expect_fail "--tied disagrees with checkpoint 'run.st'" "$PIPIT" train --init run.st --data text.txt --tied --steps 1
# files edited by hand: a tensor missing, one mis-shaped, the metadata gone
$PY - <<EOF || fail "cannot edit checkpoints"
import sys
sys.path.insert(0, "$SRC/tests")
from gpt2_torch import load_safetensors, save_safetensors
import numpy as np
t, meta = load_safetensors("full.st")
w = {n: a for n, a in t.items() if not n.startswith("opt.")}
save_safetensors("nometa.st", w)
save_safetensors("missing.st", {n: a for n, a in w.items() if n != "model.layers.1.mlp.up_proj.weight"}, meta)
bad = dict(w)
bad["model.layers.0.self_attn.o_proj.weight"] = np.zeros((128, 64), np.float32)
save_safetensors("shape.st", bad, meta)
EOF
expect_fail "'model.layers.1.mlp.up_proj.weight'" "$PIPIT" eval --init missing.st --data text.txt --ctx 32 --micro-batch 1 --batches 1
expect_fail "model.layers.0.self_attn.o_proj.weight" "$PIPIT" eval --init shape.st --data text.txt --ctx 32 --micro-batch 1 --batches 1
expect_fail "checkpoint 'nometa.st' does not record its head count: pass --heads (or put its config.json beside it)" \
    "$PIPIT" eval --init nometa.st --data text.txt --ctx 32 --micro-batch 1 --batches 1
expect_ok "$PIPIT" eval --init nometa.st --heads 4 --data text.txt --ctx 32 --micro-batch 1 --batches 1 --json
# a config.json beside it: supplies what the file lacks, and refuses what pipit does not implement
mkdir hf && cp nometa.st hf/model.safetensors
printf '{"num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 128, "max_position_embeddings": 32,
 "rope_theta": 10000.0, "rms_norm_eps": 1e-05, "attention_bias": false}\n' > hf/config.json
expect_ok "$PIPIT" eval --init hf/model.safetensors --data text.txt --ctx 32 --micro-batch 1 --batches 1 --json
sed -i 's/"attention_bias": false/"attention_bias": true/' hf/config.json
expect_fail "\"attention_bias\" is not false" "$PIPIT" eval --init hf/model.safetensors --data text.txt --ctx 32 \
    --micro-batch 1 --batches 1
sed -i 's/"attention_bias": true/"mlp_bias": true/' hf/config.json
expect_fail "\"mlp_bias\" is not false" "$PIPIT" sample --init hf/model.safetensors --prompt a --tokens 1
sed -i 's/"mlp_bias": true/"head_dim": 64/' hf/config.json
expect_fail "\"head_dim\" 64 is not hidden_size 128 / num_attention_heads 4" "$PIPIT" eval --init hf/model.safetensors \
    --data text.txt --ctx 32 --micro-batch 1 --batches 1
sed -i 's/"hidden_size": 128/"hidden_size": 256/; s/, "head_dim": 64//' hf/config.json
expect_fail "hidden_size 256 disagrees with checkpoint 'hf/model.safetensors' (128, from its tensors)" "$PIPIT" eval \
    --init hf/model.safetensors --data text.txt --ctx 32 --micro-batch 1 --batches 1

[ "$failures" -eq 0 ] && echo "PASS: test_cli_llama" || echo "FAIL: $failures failure(s)"
exit $((failures > 0))
