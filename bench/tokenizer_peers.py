#!/usr/bin/env python3
"""tokenizer_peers.py — the Python peers of bench/tokenizer.sh: encodes TEXT,
cut into the same chunks as build/bench_tokenize (a chunk ends at the first
newline CHUNK or more bytes after its start), with the `tokenizers` package
(Hugging Face, Rust) and, when importable, `tiktoken` (OpenAI, Rust) built
from the same vocabulary and GPT-2's pattern; checks that both give
pipit's ids (IDS, int32 written by build/bench_tokenize) before timing
each: best of REPS, one thread (encode_batch with RAYON_NUM_THREADS=1,
encode_ordinary_batch with num_threads=1).

Usage: tokenizer_peers.py TOKENIZER.json TEXT IDS [REPS] [CHUNK]
"""
import json, os, struct, sys, time

os.environ.setdefault("RAYON_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def best_of(reps, f):
    best = 1e300
    for _ in range(reps):
        t0 = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t0)
    return best


def byte_decoder():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, k = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b); cs.append(256 + k); k += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def main():
    tok_path, text_path, ids_path = sys.argv[1:4]
    reps = int(sys.argv[4]) if len(sys.argv) > 4 else 3
    chunk = int(sys.argv[5]) if len(sys.argv) > 5 else 4096
    data = open(text_path, "rb").read()
    nbytes, chunks, at = len(data), [], 0
    while at < len(data):
        end = min(at + chunk, len(data))
        while end < len(data) and data[end - 1] != 0x0A:
            end += 1
        chunks.append(data[at:end].decode())
        at = end
    raw = open(ids_path, "rb").read()
    want = list(struct.unpack(f"<{len(raw) // 4}i", raw))
    from tokenizers import Tokenizer
    hf = Tokenizer.from_file(tok_path)
    if [i for e in hf.encode_batch(chunks) for i in e.ids] != want:
        sys.exit("tokenizers gives other ids than pipit: nothing timed")
    dt = best_of(reps, lambda: hf.encode_batch(chunks))
    print(f"tokenizers encode: {nbytes / dt / 1e6:.2f} MB/s (best of {reps}: {dt:.3f} s)")
    try:
        import tiktoken
    except ImportError:
        print("tiktoken encode: not installed (pip install tiktoken)")
        return
    vocab = json.load(open(tok_path, encoding="utf-8"))["model"]["vocab"]
    dec = byte_decoder()
    ranks = {bytes(dec[c] for c in t): i for t, i in vocab.items()}
    if sorted(ranks.values()) != list(range(len(ranks))):
        print("tiktoken encode: the vocabulary's ids are not merge ranks: skipped")
        return
    enc = tiktoken.Encoding("pipit-bench", mergeable_ranks=ranks, special_tokens={},
                            pat_str=r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""")
    if [i for e in enc.encode_ordinary_batch(chunks, num_threads=1) for i in e] != want:
        sys.exit("tiktoken gives other ids than pipit: nothing timed")
    dt = best_of(reps, lambda: enc.encode_ordinary_batch(chunks, num_threads=1))
    print(f"tiktoken encode: {nbytes / dt / 1e6:.2f} MB/s (best of {reps}: {dt:.3f} s)")


if __name__ == "__main__":
    main()
