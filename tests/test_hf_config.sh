#!/usr/bin/env bash
# test_hf_config.sh — what pipit reads from a Hugging Face Llama folder
# (model.safetensors and the config.json beside it), as `pipit eval --init`
# meets it:
#   - RoPE spelled by transformers >= 5 ("rope_parameters": {"rope_theta",
#     "rope_type"}) is the RoPE spelled by transformers < 5 (top-level
#     "rope_theta", "rope_scaling"): the same loss, and not theta 10000's;
#     llama3 scaling likewise in both spellings (its numerics against the
#     published rule: test_llama_oracle.sh and ops_torch_oracle); two
#     spellings that disagree and a rope_type pipit lacks are refused;
#   - a tensor the Llama builder would not read (Qwen2's q/k/v biases beside a Llama config.json) is
#     refused by name;
#   - config.json contradicting the checkpoint (its tensors or pipit's
#     metadata: max_position_embeddings 1 with a model trained at ctx 32,
#     heads, eps, theta, RoPE scaling, vocab) is refused naming both;
#   - a key twice or text after the object, in config.json and in
#     tokenizer.json, is refused.
# Usage: test_hf_config.sh PIPIT SRCDIR
set -u

CLI_FIXED=1
source "$(dirname "$0")/cli_lib.sh"
cli_setup hf_config "${1:-}"
cat "$2"/README.md > text.txt

M=(--model llama-tiny --ctx 32 --layers 2 --heads 4 --kv-heads 2 --dim 32 --ffn-hidden 48 --micro-batch 2)
# enough steps that attention is not near-uniform: RoPE variants then move the loss by
# more than a float32 ulp whatever the text (3 steps tied llama3 and plain RoPE on one README)
expect_ok "$PIPIT" train --data text.txt "${M[@]}" --steps 20 --lr 0.01 --save run.st || exit 1
expect_ok "$PIPIT" export --hf ex --init run.st || exit 1
EV=(eval --data text.txt --ctx 32 --micro-batch 2 --batches 2 --json)
loss() { "$PIPIT" "${EV[@]}" --init "$1" 2>/dev/null | tail -1; }

# hf/: the weights as transformers writes them (no pipit metadata, no
# checksums), the config.json rewritten by edit.py; extra tensors by add.py
cat >edit.py <<'EOF'
import json, sys
c = json.load(open("ex/config.json"))
for k in ("rope_theta", "rope_scaling"):
    c.pop(k)
c.update(json.loads(sys.argv[1]))
json.dump(c, open("hf/config.json", "w"), indent=1)
EOF
cat >add.py <<'EOF'
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
h.pop("__metadata__", None)
data = raw[8 + n:]
for name in sys.argv[3:]:  # each a [32] f32 tensor of zeros
    h[name] = {"dtype": "F32", "shape": [32], "data_offsets": [len(data), len(data) + 128]}
    data += bytes(128)
hb = json.dumps(h).encode()
hb += b" " * (-len(hb) % 8)
open(sys.argv[2], "wb").write(struct.pack("<Q", len(hb)) + hb + data)
EOF
mkdir -p hf
$PY add.py ex/model.safetensors hf/model.safetensors || exit 1
hf_loss() { $PY edit.py "$1" && loss hf/model.safetensors; }

# RoPE: theta 500000 in either spelling (before the fix rope_parameters was
# ignored: theta 10000, exit 0)
old=$(hf_loss '{"rope_theta": 500000.0, "rope_scaling": null}')
new=$(hf_loss '{"rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"}}')
base=$(hf_loss '{"rope_theta": 10000.0}')
[ -n "$old" ] && [ "$old" = "$new" ] || fail "rope_parameters theta 500000: $new, rope_theta 500000: $old"
[ "$new" != "$base" ] || fail "theta 500000 evaluates as theta 10000 ($base)"
# llama3 scaling in both spellings (one frequency of the head of 8 in each band of L = 64)
L3='"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 64'
old=$(hf_loss "{\"rope_theta\": 500.0, \"rope_scaling\": {$L3}}")
new=$(hf_loss "{\"rope_parameters\": {\"rope_theta\": 500.0, $L3}}")
both=$(hf_loss "{\"rope_theta\": 500.0, \"rope_scaling\": {$L3}, \"rope_parameters\": {\"rope_theta\": 500.0, $L3}}")
plain=$(hf_loss '{"rope_theta": 500.0}')
[ -n "$old" ] && [ "$old" = "$new" ] && [ "$old" = "$both" ] || fail "llama3 spellings: $old, $new, $both"
[ "$old" != "$plain" ] || fail "llama3 scaling evaluates as plain RoPE ($plain)"
# refused: spellings that disagree, rope types pipit lacks, llama3 without its numbers
$PY edit.py '{"rope_theta": 10000.0, "rope_parameters": {"rope_theta": 500000.0}}'
expect_fail '"rope_theta" and "rope_parameters.rope_theta" disagree' "$PIPIT" "${EV[@]}" --init hf/model.safetensors
$PY edit.py '{"rope_parameters": {"rope_theta": 500000.0, "rope_type": "yarn", "factor": 4.0}}'
expect_fail '"rope_parameters.rope_type" is "yarn": pipit implements rope_type "default" and "llama3"' \
    "$PIPIT" "${EV[@]}" --init hf/model.safetensors
$PY edit.py '{"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}'
expect_fail 'rope_type "llama3" needs "low_freq_factor"' "$PIPIT" "${EV[@]}" --init hf/model.safetensors

# a Qwen2's biases beside a Llama config.json (model_type llama: no biases), and a layer after a gap: refused by name
$PY edit.py '{"rope_theta": 10000.0}'
$PY add.py ex/model.safetensors hf/model.safetensors model.layers.0.self_attn.q_proj.bias
expect_fail "its model_type has no q/k/v biases but checkpoint 'hf/model.safetensors' holds 'model.layers.0.self_attn.q_proj.bias'" \
    "$PIPIT" "${EV[@]}" --init hf/model.safetensors
$PY add.py ex/model.safetensors hf/model.safetensors model.layers.3.input_layernorm.weight
expect_fail "tensor 'model.layers.3.input_layernorm.weight' is not used by the llama builder" \
    "$PIPIT" "${EV[@]}" --init hf/model.safetensors

# config.json against pipit's checkpoint (its metadata and tensors)
edit_ex() { $PY - "$1" <<'EOF'
import json, sys
c = json.load(open("ex/config.json"))
c.update(json.loads(sys.argv[1]))
json.dump(c, open("ex2/config.json", "w"), indent=1)
EOF
}
mkdir -p ex2 && cp ex/model.safetensors ex2/
edit_ex '{}'
expect_ok "$PIPIT" "${EV[@]}" --init ex2/model.safetensors
for case in '{"max_position_embeddings": 1}|max_position_embeddings 1 disagrees with checkpoint' \
            '{"max_position_embeddings": 16}|max_position_embeddings 16 disagrees' \
            '{"num_attention_heads": 2, "head_dim": 16}|num_attention_heads 2 disagrees with checkpoint' \
            '{"rms_norm_eps": 1e-06}|rms_norm_eps 9.9999999999999995e-07 disagrees' \
            '{"rope_theta": 500000}|rope_theta 500000 disagrees' \
            '{"rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8}}|RoPE (rope_type llama3, factor 8' \
            '{"vocab_size": 300}|vocab_size 300 disagrees with checkpoint' \
            '{"num_hidden_layers": 3}|num_hidden_layers 3 disagrees'; do
    edit_ex "${case%%|*}"
    expect_fail "${case#*|}" "$PIPIT" "${EV[@]}" --init ex2/model.safetensors
done
# without pipit's metadata: max_position_embeddings 1 is below the ctx asked for
$PY edit.py '{"rope_theta": 10000.0, "max_position_embeddings": 1}'
$PY add.py ex/model.safetensors hf/model.safetensors
expect_fail "its max_position_embeddings is 1; pass --ctx 1 or less" "$PIPIT" "${EV[@]}" --init hf/model.safetensors

# JSON that cJSON alone would accept: a key twice (the first read, the
# second ignored) and text after the object
printf '{"vocab_size": 256, "rope_theta": 10000.0, "rope_theta": 500000.0}\n' >hf/config.json
expect_fail "key \"rope_theta\" appears twice in one object" "$PIPIT" "${EV[@]}" --init hf/model.safetensors
$PY edit.py '{"rope_theta": 10000.0}' && printf '{"num_attention_heads": 2}\n' >>hf/config.json
expect_fail "text follows the JSON value" "$PIPIT" "${EV[@]}" --init hf/model.safetensors
expect_ok "$PIPIT" tokenize --train 270 --data text.txt --out tok
$PY - <<'EOF'
t = open("tok/tokenizer.json").read()
open("dup.json", "w").write(t.replace('"model": {', '"model": {"type": "WordPiece", ', 1))
open("trail.json", "w").write(t + "\n{}\n")
EOF
expect_fail "key \"model.type\" appears twice in one object" "$PIPIT" export --hf e --init run.st --tokenizer dup.json
expect_fail "text follows the JSON value" "$PIPIT" export --hf e --init run.st --tokenizer trail.json

if [ "$failures" -ne 0 ]; then
    echo "test_hf_config: $failures failure(s)" >&2
    exit 1
fi
echo "test_hf_config: ok"
