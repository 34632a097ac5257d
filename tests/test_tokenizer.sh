#!/usr/bin/env bash
# test_tokenizer.sh — `pipit tokenize` and `pipit sample --tokenizer`
# against the Python `tokenizers` package (the reference: what Hugging Face
# uses) on a corpus made here (every kind of character the pattern tells
# apart: letters and numbers of many scripts, White_Space and the
# U+001C..U+001F that are not, contractions, emoji, CR, no-break spaces):
#   - `--train V` gives the vocabulary and merges, in order, of the package's
#     BpeTrainer (byte-level alphabet, min_frequency 0), and the shard holds
#     the package's encoding of the files, one after the other;
#   - a tokenizer.json the package wrote (with an added token, with and
#     without add_prefix_space) and its vocab.json + merges.txt encode
#     every file exactly as the package does;
#   - runs of spaces up to 20000 long (one piece each) encode as the
#     package encodes them, with a tokenizer trained on them;
#   - --val-split puts the stream's tail in val_000000.bin;
#   - sample --tokenizer prints the decoding of what --prompt-ids prints.
# The package comes from $PIPIT_HF_PYTHON (default /tmp/venv-hf/bin/python:
#   python3 -m venv --system-site-packages /tmp/venv-hf &&
#   /tmp/venv-hf/bin/pip install tokenizers
# ), else the system python3 if it has it; without it those checks are
# skipped with a note and the rest (shard layout, decoding the shards with
# an independent Python decoder back to the text, errors: among them an
# empty text and vocab.json without --merges) still runs.
# Usage: test_tokenizer.sh PIPIT SRCDIR
set -u

source "$(dirname "$0")/cli_lib.sh"
cli_setup tokenizer "${1:-}"

cli_hf_python "import tokenizers"

$PY - <<'EOF' || { echo "cannot write test data"; exit 1; }
import random
r = random.Random(5)
pool = [chr(c) for c in range(0x20, 0x7f)] + list("\t\n\r\x0b\x0c\x1c\x1d\x1e\x1f\x85\xa0\u1680\u2000\u2009\u2028\u2029\u202f\u205f\u3000")
pool += [chr(c) for c in range(0xa1, 0x250)] + [chr(c) for c in r.sample(range(0x370, 0x2000), 300)]
pool += [chr(c) for c in r.sample(range(0x4e00, 0x9fff), 200)]
pool += ["\U0001F600", "\U0001D7D8", "\u2167", "\u00bd", "\u0663", "\u1d2c", "'s", "'t", "'re", "'ve", "'m", "'ll", "'d", "'S"]
pool += [" ", "  ", "   ", "\n\n", " \n ", "\r\n"]
words = ["the", " the", "cat", " sat", "Grüße", " naïve", "123", " 4567", "x²", "ΑΒΓ", "漢字", "it's", "don't", "I'LL"]
def text(n):
    return "".join(r.choice(words) if r.random() < 0.5 else r.choice(pool) for _ in range(n))
open("a.txt", "w", encoding="utf-8", newline="").write(text(30000))
open("b.txt", "w", encoding="utf-8", newline="").write(text(10000) + "<|endoftext|>" + text(2000))
# runs of spaces, up to 20000 long (one piece each; merging them was O(n log n)), between words and at the end
runs = [" " * r.choice([1, 2, 3, 4, 7, 8, 9, 15, 16, 17, 100, 1000, 20000]) for _ in range(300)]
open("c.txt", "w", encoding="utf-8", newline="").write("".join(w + s for w, s in zip((r.choice(words) for _ in runs), runs)))
EOF

# shards.py: the tokens of shards (llm.c header checked), and decoding with
# a tokenizer.json's vocabulary by hand (GPT-2's byte characters inverted).
cat >shards.py <<'EOF'
import json, struct, sys
def tokens(paths):
    out = []
    for p in paths:
        raw = open(p, "rb").read()
        magic, version, n = struct.unpack("<3i", raw[:12])
        assert magic == 20240520 and version == 1, f"{p}: header {magic} {version}"
        assert len(raw) == 1024 + 2 * n, f"{p}: {len(raw)} bytes for {n} tokens"
        out += struct.unpack(f"<{n}H", raw[1024:])
    return out
def byte_of():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, k = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b); cs.append(256 + k); k += 1
    return {chr(c): b for b, c in zip(bs, cs)}
def decode(tokjson, ids):
    j = json.load(open(tokjson, encoding="utf-8"))
    inv = {i: t for t, i in j["model"]["vocab"].items()}
    added = {a["id"]: a["content"].encode() for a in j["added_tokens"]}
    m = byte_of()
    return b"".join(added[i] if i in added else bytes(m[c] for c in inv[i]) for i in ids)
if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "decode":  # decode TOKENIZER.json TEXT... -- SHARDS...: the shards decode to the texts
        k = sys.argv.index("--")
        want = b"".join(open(p, "rb").read() for p in sys.argv[3:k])
        got = decode(sys.argv[2], tokens(sys.argv[k + 1:]))
        if got != want:
            i = next(i for i in range(min(len(got), len(want))) if got[i] != want[i]) if got[:len(want)] != want[:len(got)] else min(len(got), len(want))
            sys.exit(f"decoded shards differ from the text at byte {i} of {len(want)} ({len(got)} decoded)")
    elif cmd == "count":
        print(len(tokens(sys.argv[2:])))
    elif cmd == "ids":
        print(",".join(map(str, tokens(sys.argv[2:]))))
EOF

# ---- without the package: layout, text order, the tail as validation, decoding back
expect_ok "$PIPIT" tokenize --train 600 --data a.txt,b.txt --out t1 --val-split 0.2 || exit 1
[ -f t1/train_000000.bin ] && [ -f t1/val_000000.bin ] && [ -f t1/tokenizer.json ] || fail "t1: files missing: $(ls t1)"
grep -q "train with: pipit train --data 't1/train_\*.bin' --vocab 600 --val-data 't1/val_\*.bin'" <<<"$OUT" ||
    fail "no 'train with' line: $OUT"
$PY shards.py decode t1/tokenizer.json a.txt b.txt -- t1/train_000000.bin t1/val_000000.bin ||
    fail "train + val shards do not decode to a.txt then b.txt"
ntr=$($PY shards.py count t1/train_000000.bin)
nva=$($PY shards.py count t1/val_000000.bin)
$PY -c "import math,sys; n=$ntr+$nva; sys.exit(0 if $nva == math.ceil(0.2*n) else 1)" ||
    fail "--val-split 0.2: $nva of $((ntr + nva)) tokens held out"
expect_ok "$PIPIT" tokenize --tokenizer t1/tokenizer.json --data a.txt --out t2 --shard-tokens 5000
n=$(ls t2/train_*.bin | wc -l)
total=$($PY shards.py count t2/train_*.bin)
[ "$n" -eq $(((total + 4999) / 5000)) ] || fail "--shard-tokens 5000: $n shards for $total tokens"
$PY shards.py decode t1/tokenizer.json a.txt -- t2/train_*.bin || fail "shards of t2 do not decode to a.txt"
[ ! -f t2/val_000000.bin ] || fail "a val shard without --val-split"
# the folder as --tokenizer, and its tokenizer.json written back
expect_ok "$PIPIT" tokenize --tokenizer t1 --data b.txt --out t3
cmp -s t1/tokenizer.json t3/tokenizer.json || fail "tokenizer.json written back differs from the one read"

# runs of spaces, with a tokenizer that merges them (trained on them), decode back to the text
expect_ok "$PIPIT" tokenize --train 400 --data c.txt --out t5
$PY shards.py decode t5/tokenizer.json c.txt -- t5/train_000000.bin || fail "the shard of c.txt does not decode to it"

# ---- errors
expect_fail "give --train VOCAB_SIZE or --tokenizer" "$PIPIT" tokenize --data a.txt --out e
expect_fail "give --train VOCAB_SIZE or --tokenizer" "$PIPIT" tokenize --train 300 --tokenizer t1 --data a.txt --out e
expect_fail "--train 100: the vocabulary must be 256 .. 65536" "$PIPIT" tokenize --train 100 --data a.txt --out e
expect_fail "--merges goes with --tokenizer" "$PIPIT" tokenize --train 300 --merges m.txt --data a.txt --out e
expect_fail "no file matches 'nope\*.txt'" "$PIPIT" tokenize --train 300 --data 'a.txt,nope*.txt' --out e
expect_fail "--val-split must be between 0 and 1" "$PIPIT" tokenize --train 300 --data a.txt --out e --val-split 1
mkdir empty
expect_fail "neither tokenizer.json nor vocab.json" "$PIPIT" tokenize --tokenizer empty --data a.txt --out e2
echo '{"model": {"type": "Unigram"}, "pre_tokenizer": {"type": "ByteLevel"}}' >uni.json
expect_fail "model type \"Unigram\" is not implemented" "$PIPIT" tokenize --tokenizer uni.json --data a.txt --out e
echo "x" >a.json
expect_fail "'a.json': not JSON" "$PIPIT" tokenize --tokenizer a.json --data a.txt --out e
# GPT-2's vocab.json alone: it asks for its merges.txt
$PY -c "import json; json.dump(json.load(open('t1/tokenizer.json'))['model']['vocab'], open('v.json', 'w'))"
expect_fail "'v.json' is GPT-2's vocab.json (token -> id): give its merges.txt with --merges" \
    "$PIPIT" tokenize --tokenizer v.json --data a.txt --out e
# an empty text has no tokens: refused (it wrote a folder without shards and exited 0), no folder made
: >blank.txt
: >blank2.txt
expect_fail "'blank.txt' is empty: nothing to tokenize" "$PIPIT" tokenize --train 300 --data blank.txt --out e3
expect_fail "'blank.txt' is empty: nothing to tokenize" "$PIPIT" tokenize --tokenizer t1 --data blank.txt --out e3
expect_fail "the 2 files ('blank.txt', ...) are empty: nothing to tokenize" \
    "$PIPIT" tokenize --tokenizer t1 --data blank.txt,blank2.txt --out e3
[ ! -e e3 ] || fail "an empty text made the folder e3"
expect_ok "$PIPIT" tokenize --tokenizer t1 --data blank.txt,a.txt --out t6 # an empty file among others adds nothing
$PY shards.py decode t1/tokenizer.json a.txt -- t6/train_000000.bin || fail "blank.txt + a.txt does not decode to a.txt"

# ---- sample --tokenizer: the text of the ids --prompt-ids gives
head -c 20000 a.txt >small.txt
expect_ok "$PIPIT" tokenize --train 300 --data small.txt --out tm
expect_ok "$PIPIT" train --data 'tm/train_*.bin' --vocab 300 --ctx 16 --layers 1 --heads 2 --dim 32 --micro-batch 4 \
    --steps 20 --lr 3e-3 --save tm.st
ids=$("$PIPIT" sample --init tm.st --prompt-ids 84,72,69 --tokens 12 --seed 4) || fail "sample --prompt-ids failed"
"$PIPIT" sample --init tm.st --tokenizer tm/tokenizer.json --prompt-ids 84,72,69 --tokens 12 --seed 4 >s.txt ||
    fail "sample --tokenizer failed"
$PY - "$ids" <<'EOF' || fail "sample --tokenizer does not print the decoding of the ids ($ids)"
import sys; sys.path.insert(0, ".")
import shards
want = shards.decode("tm/tokenizer.json", [int(x) for x in sys.argv[1].split()])
sys.exit(0 if open("s.txt", "rb").read() == want else 1)
EOF
expect_ok "$PIPIT" sample --init tm.st --tokenizer tm --prompt "the cat" --tokens 5 --seed 1
expect_fail "--tokenizer has 600 tokens but the model in 'tm.st' only 300" \
    "$PIPIT" sample --init tm.st --tokenizer t1 --prompt "the" --tokens 2

# ---- against the `tokenizers` package
if [ -z "$HFPY" ]; then
    echo "SKIP part: no Python with the 'tokenizers' package (set PIPIT_HF_PYTHON); checked the rest"
else
    cat >ref.py <<'EOF'
import json, os, sys
sys.path.insert(0, ".")
import shards
from tokenizers import Tokenizer, models, pre_tokenizers, trainers, decoders, AddedToken
texts = [open(p, encoding="utf-8", newline="").read() for p in os.environ.get("TEXTS", "a.txt,b.txt").split(",")]
def ids_of(tok, kind):
    return [i for t in texts for i in tok.encode(t).ids]
def check(name, got_shards, tok):
    want = ids_of(tok, name)
    got = shards.tokens(got_shards)
    if got != want:
        i = next((i for i, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
        sys.exit(f"{name}: pipit's tokens differ from the package's at {i} ({len(got)} vs {len(want)})")
cmd = sys.argv[1]
if cmd == "train":  # the package's trainer on the same texts: vocabulary and merges in order
    V = int(sys.argv[2])
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(texts, trainers.BpeTrainer(vocab_size=V, min_frequency=0, show_progress=False,
                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), special_tokens=[]))
    ref, mine = json.loads(tok.to_str())["model"], json.load(open("h1/tokenizer.json", encoding="utf-8"))["model"]
    rm = [m if isinstance(m, str) else " ".join(m) for m in ref["merges"]]
    if ref["vocab"] != mine["vocab"]:
        sys.exit(f"trained vocabularies differ ({len(ref['vocab'])} vs {len(mine['vocab'])} tokens)")
    if rm != mine["merges"]:
        i = next((i for i, (a, b) in enumerate(zip(rm, mine["merges"])) if a != b), min(len(rm), len(mine["merges"])))
        sys.exit(f"trained merges differ at {i}: package {rm[i:i+1]} pipit {mine['merges'][i:i+1]}")
    check("trained", ["h1/train_000000.bin"], Tokenizer.from_file("h1/tokenizer.json"))
elif cmd == "write":  # the package's own files: tokenizer.json (added token; prefix space or not), vocab + merges
    tok = Tokenizer.from_file("h1/tokenizer.json")
    tok.add_special_tokens([AddedToken("<|endoftext|>", special=True, normalized=False)])
    tok.save("ref.json")
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    tok.save("ref_prefix.json")
    tok.model.save(".", "ref")  # ref-vocab.json, ref-merges.txt
else:  # check NAME TOKENIZER SHARDS...
    name, spec = sys.argv[2], sys.argv[3]
    if spec.endswith("vocab.json"):
        tok = Tokenizer(models.BPE.from_file(spec, spec.replace("vocab.json", "merges.txt")))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        tok = Tokenizer.from_file(spec)
    check(name, sys.argv[4:], tok)
EOF
    expect_ok "$PIPIT" tokenize --train 2000 --data a.txt,b.txt --out h1
    "$HFPY" ref.py train 2000 || fail "--train 2000 differs from the package's BpeTrainer"
    "$HFPY" ref.py write || fail "the package could not write its tokenizer files"
    expect_ok "$PIPIT" tokenize --tokenizer ref.json --data a.txt,b.txt --out h2
    "$HFPY" ref.py check "tokenizer.json + <|endoftext|>" ref.json h2/train_000000.bin || fail "ref.json encodes differently"
    expect_ok "$PIPIT" tokenize --tokenizer ref_prefix.json --data a.txt,b.txt --out h3
    "$HFPY" ref.py check "add_prefix_space" ref_prefix.json h3/train_000000.bin || fail "ref_prefix.json encodes differently"
    expect_ok "$PIPIT" tokenize --tokenizer ref-vocab.json --merges ref-merges.txt --data a.txt,b.txt --out h4
    "$HFPY" ref.py check "vocab.json + merges.txt" ref-vocab.json h4/train_000000.bin || fail "vocab + merges encode differently"
    TEXTS=c.txt "$HFPY" ref.py check "runs of spaces" t5/tokenizer.json t5/train_000000.bin ||
        fail "runs of spaces encode differently"
    echo "compared with tokenizers $("$HFPY" -c 'import tokenizers; print(tokenizers.__version__)')"
fi

if [ "$failures" -ne 0 ]; then
    echo "test_tokenizer: $failures failure(s)" >&2
    exit 1
fi
echo "test_tokenizer: ok"
