#!/usr/bin/env bash
# test_hf_export.sh — `pipit export --hf DIR --init FILE`: from a training
# checkpoint (optimizer state inside) it writes model.safetensors with the
# weights alone, each one's bytes those of the checkpoint, under exactly
# Hugging Face GPT-2's names (the list is built here from the sizes), and a
# config.json of those sizes; pipit reads the file back with the same eval
# loss. With transformers (from $PIPIT_HF_PYTHON, default
# /tmp/venv-hf/bin/python: a venv with --system-site-packages for Debian's
# torch and `pip install "transformers<4.45"`, the last line that runs on
# torch 1.13), from_pretrained(DIR) and AutoTokenizer load it with no
# warning at all, and its loss on the same windows equals `pipit eval`'s
# (byte-level model and a model over `pipit tokenize` shards); without it
# that part is skipped with a note. config.json names bos_token_id and
# eos_token_id, ids of the model's vocabulary (the tokenizer's
# <|endoftext|>, else the last id; without them transformers assumes GPT-2's
# 50256), and a tokenizer with more tokens than the model is refused.
# Usage: test_hf_export.sh PIPIT SRCDIR
set -u

source "$(dirname "$0")/cli_lib.sh"
cli_setup hf_export "${1:-}"

cli_hf_python "import transformers, torch; transformers.GPT2LMHeadModel"

$PY - <<'EOF' || { echo "cannot write test data"; exit 1; }
import random
r = random.Random(3)
words = ["the ", "cat ", "sat ", "on ", "a ", "mat. ", "dog ", "ran ", "to ", "the park, ", "and ", "we ", "saw "]
open("text.txt", "w").write("".join(r.choice(words) for _ in range(3000)))
EOF

M=(--ctx 16 --layers 2 --heads 2 --dim 32 --micro-batch 2 --microbatches 2 --lr 3e-3 --steps 8)
expect_ok "$PIPIT" train --data text.txt "${M[@]}" --save run.st || exit 1
expect_ok "$PIPIT" export --hf hf --init run.st
grep -q "wrote hf" <<<"$OUT" || fail "no 'wrote' line: $OUT"

cat >check.py <<'EOF'
import json, struct, sys
def load(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    meta = h.pop("__metadata__", {})
    return {k: (v["dtype"], v["shape"], raw[8 + n + v["data_offsets"][0]:8 + n + v["data_offsets"][1]]) for k, v in h.items()}, meta
hf, meta = load(sys.argv[1])
ck, _ = load(sys.argv[2])
V, C, L, P = (int(x) for x in sys.argv[3:7])
# Hugging Face GPT2LMHeadModel's weights (lm_head is tied to wte: not stored)
names = {"wte.weight": [V, C], "wpe.weight": [P, C], "ln_f.weight": [C], "ln_f.bias": [C]}
for l in range(L):
    for k, s in [("ln_1.weight", [C]), ("ln_1.bias", [C]), ("attn.c_attn.weight", [C, 3 * C]), ("attn.c_attn.bias", [3 * C]),
                 ("attn.c_proj.weight", [C, C]), ("attn.c_proj.bias", [C]), ("ln_2.weight", [C]), ("ln_2.bias", [C]),
                 ("mlp.c_fc.weight", [C, 4 * C]), ("mlp.c_fc.bias", [4 * C]), ("mlp.c_proj.weight", [4 * C, C]),
                 ("mlp.c_proj.bias", [C])]:
        names[f"h.{l}.{k}"] = s
if set(hf) != set(names):
    sys.exit(f"names differ: extra {sorted(set(hf) - set(names))[:4]}, missing {sorted(set(names) - set(hf))[:4]}")
for k, s in names.items():
    if hf[k][0] != "F32" or hf[k][1] != s:
        sys.exit(f"{k}: {hf[k][0]} {hf[k][1]}, want F32 {s}")
    if hf[k][2] != ck[k][2]:
        sys.exit(f"{k}: bytes differ from the checkpoint's")
if meta.get("format") != "pt":
    sys.exit(f"metadata format is {meta.get('format')!r}, not 'pt'")
if not any(k.startswith("opt.") for k in ck):
    sys.exit("the training checkpoint holds no optimizer state: the test proves nothing")
c = json.load(open(sys.argv[8]))
want = {"model_type": "gpt2", "vocab_size": V, "n_embd": C, "n_layer": L, "n_head": int(sys.argv[7]), "n_positions": P,
        "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5, "tie_word_embeddings": True}
bos = int(sys.argv[9]) if len(sys.argv) > 9 else V - 1  # the tokenizer's <|endoftext|>, else the last id
want.update(bos_token_id=bos, eos_token_id=bos)
bad = {k: (c.get(k), v) for k, v in want.items() if c.get(k) != v}
if bad:
    sys.exit(f"config.json: {bad}")
EOF
$PY check.py hf/model.safetensors run.st 256 32 2 16 2 hf/config.json || fail "exported files are not GPT-2's"

# pipit reads its export back: the same loss
EV=(eval --data text.txt --ctx 16 --micro-batch 4 --batches 3 --json)
expect_ok "$PIPIT" "${EV[@]}" --init run.st
a=$OUT
expect_ok "$PIPIT" "${EV[@]}" --init hf/model.safetensors
[ "$a" = "$OUT" ] || fail "eval of the export ($OUT) differs from the checkpoint's ($a)"

# a model over tokenizer shards, exported with its tokenizer
expect_ok "$PIPIT" tokenize --train 300 --data text.txt --out tok
TV=$(sed -n 's/.* --vocab \([0-9]*\).*/\1/p' <<<"$OUT") # the text runs out of pairs before 300
[ -n "$TV" ] || fail "tokenize printed no vocabulary size: $OUT"
# with <|endoftext|> as an added token (id TV): the model has TV + 1 rows
$PY - "$TV" <<'EOF'
import json, sys
t = json.load(open("tok/tokenizer.json"))
t["added_tokens"].append({"id": int(sys.argv[1]), "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True})
json.dump(t, open("tok/eot.json", "w"))
EOF
expect_ok "$PIPIT" train --data 'tok/train_*.bin' --vocab "$((TV + 1))" "${M[@]}" --save tok.st
expect_ok "$PIPIT" export --hf hf2 --init tok.st --tokenizer tok/eot.json
[ -f hf2/tokenizer.json ] && [ -f hf2/tokenizer_config.json ] || fail "no tokenizer files in hf2: $(ls hf2)"
$PY check.py hf2/model.safetensors tok.st "$((TV + 1))" 32 2 16 2 hf2/config.json "$TV" ||
    fail "hf2's config.json does not name the tokenizer's <|endoftext|> ($TV) as bos/eos"
# without <|endoftext|>: the last id of the model's vocabulary
expect_ok "$PIPIT" export --hf hf3 --init tok.st --tokenizer tok/tokenizer.json
$PY check.py hf3/model.safetensors tok.st "$((TV + 1))" 32 2 16 2 hf3/config.json || fail "hf3's bos/eos"
# a tokenizer with ids the model has no rows for (before: written, exit 0)
expect_fail "--tokenizer 'tok/tokenizer.json' has $TV tokens, but the model in 'run.st' has a vocabulary of 256" \
    "$PIPIT" export --hf e --init run.st --tokenizer tok/tokenizer.json
[ ! -e e ] || fail "a refused export left folder e"

# errors
expect_fail "--kind 'bert': pipit exports gpt2 or llama" "$PIPIT" export --hf e --init run.st --kind bert
expect_fail "--kind llama: checkpoint 'run.st' holds a GPT-2 model" "$PIPIT" export --hf e --init run.st --kind llama
expect_fail "export: --init is required" "$PIPIT" export --hf e
expect_fail "no-such.st" "$PIPIT" export --hf e --init no-such.st
expect_fail "--heads 3 disagrees with checkpoint" "$PIPIT" export --hf e --init run.st --heads 3

if [ -z "$HFPY" ]; then
    echo "SKIP part: no Python with transformers and torch (set PIPIT_HF_PYTHON); checked the files without it"
else
    cat >hf.py <<'EOF'
import io, json, logging, struct, sys, warnings
import torch, transformers
from transformers import AutoTokenizer, GPT2LMHeadModel
log = io.StringIO()
transformers.utils.logging.set_verbosity_warning()
transformers.utils.logging.add_handler(logging.StreamHandler(log))
d, data, T, B, K, want = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), json.loads(sys.argv[6])
with warnings.catch_warnings(record=True) as w:
    warnings.simplefilter("always")
    model = GPT2LMHeadModel.from_pretrained(d).eval()
    tok = AutoTokenizer.from_pretrained(d) if len(sys.argv) > 7 else None
said = [str(x.message) for x in w] + [l for l in log.getvalue().splitlines() if l.strip()]
if said:
    sys.exit(f"{d}: loading said: {said}")
if data.endswith(".bin"):
    raw = open(data, "rb").read()
    n = struct.unpack("<i", raw[8:12])[0]
    ids = list(struct.unpack(f"<{n}H", raw[1024:1024 + 2 * n]))
else:
    ids = list(open(data, "rb").read())
windows = torch.tensor([ids[k * T:k * T + T + 1] for k in range(B * K)])
with torch.no_grad():
    logits = model(windows[:, :-1]).logits
loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), windows[:, 1:].reshape(-1)).item()
if abs(loss - want["loss"]) > 1e-5:
    sys.exit(f"{d}: transformers' loss {loss!r} != pipit eval's {want['loss']!r}")
if tok is not None:
    text = sys.argv[7]
    got = tok(text)["input_ids"]
    if tok.decode(got) != text or len(tok) != model.config.vocab_size:
        sys.exit(f"{d}: the tokenizer does not round-trip {text!r} or has {len(tok)} tokens")
print(f"{d}: no warning; loss {loss:.9f} = pipit's {want['loss']:.9f}")
EOF
    "$HFPY" hf.py hf text.txt 16 4 3 "$a" || fail "transformers does not load hf as pipit computes it"
    expect_ok "$PIPIT" eval --data 'tok/train_*.bin' --ctx 16 --micro-batch 4 --batches 3 --json --init tok.st
    "$HFPY" hf.py hf2 tok/train_000000.bin 16 4 3 "$OUT" "the cat sat on the mat" ||
        fail "transformers does not load hf2 (with its tokenizer) as pipit computes it"
fi

if [ "$failures" -ne 0 ]; then
    echo "test_hf_export: $failures failure(s)" >&2
    exit 1
fi
echo "test_hf_export: ok"
