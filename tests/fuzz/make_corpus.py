#!/usr/bin/env python3
"""make_corpus.py — writes the seed corpora tests/fuzz/corpus/<target>/.

Usage: python3 tests/fuzz/make_corpus.py [OUT_DIR]   (default: tests/fuzz/corpus)

Small valid files of every format plus a few invalid ones next to the
boundaries the readers check, so a short fuzzing run starts deep in each
parser. Deterministic: rerunning it rewrites the same bytes (the files are
committed; keep the total small). See docs/fuzzing.md.
"""

import json
import os
import struct
import sys

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(target, name, data):
    d = os.path.join(OUT, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


# ------------------------------------------------------------- safetensors
DT = {"F32": ("<f", 4), "F64": ("<d", 8), "I32": ("<i", 4)}


def safetensors(tensors, meta=None, pad_to=8, raw_header=None):
    """tensors: list of (name, dtype, shape, values)."""
    hdr, blob = {}, b""
    for name, dt, shape, vals in tensors:
        fmt, size = DT[dt]
        data = b"".join(struct.pack(fmt, v) for v in vals)
        hdr[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(blob), len(blob) + len(data)]}
        blob += data
    if meta is not None:
        hdr["__metadata__"] = meta
    h = raw_header if raw_header is not None else json.dumps(hdr, separators=(",", ":")).encode()
    while len(h) % pad_to:
        h += b" "
    return struct.pack("<Q", len(h)) + h + blob


def vals(n, scale=0.01):
    return [((i * 37) % 17 - 8) * scale for i in range(n)]


put("safetensors", "valid_two", safetensors(
    [("a", "F32", [2, 3], vals(6)), ("c", "I32", [2], [1, -2])], {"format": "pt"}))
put("safetensors", "valid_f64_scalar", safetensors([("x", "F64", [], [3.5]), ("e", "F32", [0], [])]))
put("safetensors", "valid_4d", safetensors([("t", "F32", [1, 2, 1, 2], vals(4))]))
put("safetensors", "empty_header", safetensors([], raw_header=b"{}"))
put("safetensors", "bad_overlap", safetensors([], raw_header=json.dumps(
    {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
     "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}).encode()) + b"\0" * 12)
put("safetensors", "bad_size", safetensors([], raw_header=json.dumps(
    {"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}).encode()) + b"\0" * 8)
put("safetensors", "bad_dtype", safetensors([], raw_header=json.dumps(
    {"a": {"dtype": "BF16", "shape": [1], "data_offsets": [0, 2]}}).encode()) + b"\0" * 2)
put("safetensors", "bad_hlen", struct.pack("<Q", 1 << 62) + b"{}")
put("safetensors", "short", b"\x02\0\0")

# -------------------------------------------------------------- checkpoint
# The model of fuzz_checkpoint.c: vocab 8, max_ctx 4, dim 4, 2 layers, 1 head.
V, T, C, L = 8, 4, 4, 2


def gpt2_params():
    p = [("wte.weight", [V, C]), ("wpe.weight", [T, C])]
    for l in range(L):
        for name, shape in [("ln_1.weight", [C]), ("ln_1.bias", [C]),
                            ("attn.c_attn.weight", [C, 3 * C]), ("attn.c_attn.bias", [3 * C]),
                            ("attn.c_proj.weight", [C, C]), ("attn.c_proj.bias", [C]),
                            ("ln_2.weight", [C]), ("ln_2.bias", [C]),
                            ("mlp.c_fc.weight", [C, 4 * C]), ("mlp.c_fc.bias", [4 * C]),
                            ("mlp.c_proj.weight", [4 * C, C]), ("mlp.c_proj.bias", [C])]:
            p.append((f"h.{l}.{name}", shape))
    p += [("ln_f.weight", [C]), ("ln_f.bias", [C])]
    return p


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


P = gpt2_params()
put("checkpoint", "gpt2_valid", safetensors([(n, "F32", s, vals(numel(s))) for n, s in P], {"heads": "1"}))
put("checkpoint", "gpt2_wrong_shape", safetensors(
    [(n, "F32", (s if n != "wpe.weight" else [T + 1, C]), vals(numel(s) if n != "wpe.weight" else (T + 1) * C))
     for n, s in P]))
put("checkpoint", "gpt2_missing", safetensors([(n, "F32", s, vals(numel(s))) for n, s in P[:-1]]))
put("checkpoint", "gpt2_f64", safetensors([(n, "F64" if n == "ln_f.bias" else "F32", s, vals(numel(s)))
                                           for n, s in P]))
opt = []
for n, s in P:
    opt.append((n + ".exp_avg", "F32", s, vals(numel(s), 0.001)))
    opt.append((n + ".exp_avg_sq", "F32", s, [abs(x) for x in vals(numel(s), 0.0001)]))
put("checkpoint", "optimizer_valid", safetensors(opt, {"format": "pipit-optimizer", "opt_steps": "3",
                                                        "next_step": "4"}))
put("checkpoint", "optimizer_bad_meta", safetensors(opt[:4], {"opt_steps": "-1", "next_step": "x"}))

# -------------------------------------------------------------------- data
# First byte of each input (fuzz_data.c): bit 0 = ".bin" name, bit 1 =
# sequential, bits 3.. = T - 1.


def ctl(binname, seq, T):
    return bytes([(1 if binname else 0) | (2 if seq else 0) | ((T - 1) << 3)])


def shard(tokens, magic=20240520, version=1, count=None):
    h = [magic, version, len(tokens) if count is None else count] + [0] * 253
    return struct.pack("<256i", *h) + struct.pack(f"<{len(tokens)}H", *tokens)


put("data", "shard_valid", ctl(1, 0, 4) + shard([i * 977 % 50257 for i in range(40)]))
put("data", "shard_seq_maxtok", ctl(1, 1, 2) + shard([65535, 0, 1, 2, 3]))
put("data", "shard_magic_txt_name", ctl(0, 1, 1) + shard([5, 6, 7]))
put("data", "shard_truncated", ctl(1, 0, 4) + shard(list(range(10)), count=11))
put("data", "shard_bad_version", ctl(1, 0, 4) + shard(list(range(10)), version=2))
put("data", "shard_negative", ctl(1, 0, 4) + shard([], count=-5))
put("data", "shard_short_header", ctl(1, 0, 4) + b"\x28\x33\x35\x01")
put("data", "text_valid", ctl(0, 0, 8) + b"hello, world: a tiny text file for the byte-level reader\n")
put("data", "text_seq_t1", ctl(0, 1, 1) + b"ab")
put("data", "text_too_short", ctl(0, 0, 32) + b"short")
put("data", "text_binary", ctl(0, 1, 3) + bytes(range(256)))

# ---------------------------------------------------------------- schedule
put("schedule", "gpipe_p2m2", "# gpipe\nstages: 0 1\nF0.0 F0.1 BW0.0 BW0.1\nF1.0 F1.1 BW1.0 BW1.1\n")
put("schedule", "1f1b_p2m3", "stages: 0 1\nF0.0 F0.1 BW0.0 F0.2 BW0.1 BW0.2\nF1.0 BW1.0 F1.1 BW1.1 F1.2 BW1.2\n")
put("schedule", "zb_split", "stages: 0 1\r\nF0.0 F0.1 B0.0 W0.0 B0.1 W0.1\r\nF1.0 B1.0 F1.1 B1.1 W1.0 W1.1\r\n")
put("schedule", "interleaved_v2", "stages: 0 1 0 1\nF0.0 F2.0 BW2.0 BW0.0\nF1.0 F3.0 BW3.0 BW1.0\n")
put("schedule", "single_rank", "stages: 0\nF0.0 BW0.0\n")
put("schedule", "mixed_forms", "stages: 0\nF0.0 F0.1 BW0.0 B0.1 W0.1\n")
put("schedule", "bad_deadlock", "stages: 0 1\nBW0.0 F0.0\nF1.0 BW1.0\n")
put("schedule", "bad_missing", "stages: 0 1\nF0.0\nF1.0 BW1.0\n")
put("schedule", "bad_token", "stages: 0 1\nF0.0 X0.0 BW0.0\nF1.0 BW1.0\n")
put("schedule", "bad_big", "stages: 0\nF0.99999999999 BW0.2147483648\n")
put("schedule", "bad_no_header", "F0.0 BW0.0\n")
put("schedule", "bad_rank", "stages: 0 7\nF0.0 BW0.0\nF1.0 BW1.0\n")

# ------------------------------------------------------------------- flags
# NUL-separated argv (fuzz_flags.c's table: steps int, seed u64, lr double,
# out string, verbose bool, s string, steps-max bool).


def argv(*a):
    return b"\0".join(x.encode() for x in a)


put("flags", "all_types", argv("--steps", "10", "--seed=18446744073709551615", "--lr", "3e-4", "--out=x.st",
                               "--verbose", "--s", "y"))
put("flags", "prefix", argv("--steps-max", "--steps=-2147483647"))
put("flags", "help", argv("--lr", "1", "--help"))
put("flags", "bad_int", argv("--steps", "2147483648"))
put("flags", "bad_u64", argv("--seed", "-1"))
put("flags", "bad_double", argv("--lr=inf"))
put("flags", "bool_value", argv("--verbose=1"))
put("flags", "missing_value", argv("--out"))
put("flags", "unknown", argv("--step", "1"))
put("flags", "positional", argv("train"))
put("flags", "empty_value", argv("--out=", "--steps="))


# ------------------------------------------------------------- tokenizer
# fuzz_tokenizer.c: byte 0 mod 3 picks tokenizer.json (0), vocab.json NUL
# merges.txt (1) or training (2, on the rest). The vocabulary: the 256
# bytes in GPT-2's byte characters (ids in character order, as GPT-2's),
# then "Ġt", "he", "Ġthe" and an added <|endoftext|>.
def byte_chars():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, k = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b); cs.append(256 + k); k += 1
    return sorted(chr(c) for c in cs)


def tok_vocab():
    v = {c: i for i, c in enumerate(byte_chars())}
    v.update({"\u0120t": 256, "he": 257, "\u0120the": 258, "<|endoftext|>": 259})
    return v


def tok_json(prefix_space=False, merges_as_pairs=False):
    merges = [["\u0120", "t"], ["h", "e"], ["\u0120t", "he"]]
    return json.dumps({
        "version": "1.0",
        "added_tokens": [{"id": 259, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": True, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": prefix_space, "trim_offsets": True, "use_regex": True},
        "post_processor": None, "decoder": None,
        "model": {"type": "BPE", "dropout": None, "vocab": tok_vocab(),
                  "merges": merges if merges_as_pairs else [" ".join(m) for m in merges]}}, ensure_ascii=False)


put("tokenizer", "json_gpt2_like", b"\x00" + tok_json().encode())
put("tokenizer", "json_prefix_space_pairs", b"\x03" + tok_json(True, True).encode())
put("tokenizer", "gpt2_pair", b"\x01" + json.dumps(tok_vocab(), ensure_ascii=False).encode() +
    b"\x00#version: 0.2\n\xc4\xa0 t\nh e\n\xc4\xa0t he\n")
put("tokenizer", "train_mixed", b"\x0b" + "it's the cat's   mat\n\n café 123 世界 ".encode() + b"\xff\xfe")
put("tokenizer", "train_words", b"\x0e" + b"the cat sat on the mat; the dog sat on the cat. " * 4)

# ---------------------------------------------------------------------- hw
# Hardware descriptions (fuzz_hw: pipit_hw_load): the built-in files, and
# one change each next to what the reader checks.
HW_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "data", "hw")
for name in sorted(os.listdir(HW_DIR)):
    if name.endswith(".json"):
        d = json.load(open(os.path.join(HW_DIR, name)))
        d.pop("about", None), d.pop("sources", None)  # keep the seeds small
        put("hw", "valid_" + name[:-5], json.dumps(d, separators=(",", ":")))
HW = {"name": "t", "peak_flops": {"fp32": 1e12, "bf16": 4e12}, "train_dtype": "bf16",
      "gemm_efficiency": [[64, 0.5], [1024, 0.9]], "mem_bandwidth": 1e11, "mem_efficiency": 0.8,
      "mem_capacity": 1e10, "gpus_per_node": 8, "intra_node": {"bandwidth": 1e11, "latency": 1e-6},
      "inter_node": {"bandwidth": 1e10, "latency": 1e-5}, "kernel_overhead": 2e-6}


def hw_with(**kv):
    d = dict(HW)
    d.update(kv)
    return json.dumps(d, separators=(",", ":"))


put("hw", "valid_small", hw_with())
put("hw", "bad_gpus_fraction", hw_with(gpus_per_node=2.5))
put("hw", "bad_curve_order", hw_with(gemm_efficiency=[[1024, 0.9], [64, 0.5]]))
put("hw", "bad_no_peak", hw_with(train_dtype="fp16"))
put("hw", "bad_link", hw_with(intra_node={"latency": 1e-6}))

# ----------------------------------------------------------------- profile
# Calibration profiles (fuzz_profile: pipit_hw_calibrate), as
# `pipit train --profile-out` writes them.
PROFILE = {"model": {"layers": 2, "dim": 64, "heads": 4, "ctx": 32, "vocab": 128, "micro_batch": 2,
                     "microbatches": 2, "pp": 1, "dp": 1, "threads": 1, "schedule": "1f1b", "virtual": 1},
           "steps": 3, "step_s": 0.25,
           "profile": {"ranks": [{"ops": {"matmul": 0.3, "attention": 0.02, "attn_dqkv": 0.03, "gelu": 0.05,
                                          "layernorm": 0.01, "add": 0.004},
                                  "instructions": {"optimizer update": 0.01, "recv": 0.001}}]}}


def profile_with(**kv):
    d = json.loads(json.dumps(PROFILE))
    d.update(kv)
    return json.dumps(d, separators=(",", ":"))


put("profile", "valid", profile_with())
put("profile", "valid_two_ranks", profile_with(profile={"ranks": PROFILE["profile"]["ranks"] * 2}))
put("profile", "bad_no_matmul", profile_with(profile={"ranks": [{"ops": {"gelu": 0.1}}]}))
put("profile", "bad_model", profile_with(model={"layers": 2}))
put("profile", "bad_steps_zero", profile_with(steps=0))

# ------------------------------------------------------------------ config
# --config files (fuzz_config.c's table: layers int, seed u64, lr double,
# schedule string, remat bool; "model" is skipped).
put("config", "valid_all", json.dumps({"layers": 6, "seed": 7, "lr": 3e-4, "schedule": "1f1b", "remat": True,
                                       "model": "gpt2"}))
put("config", "valid_empty", "{}")
put("config", "bad_type", json.dumps({"lr": "fast"}))
put("config", "bad_range", json.dumps({"layers": 1e12}))
put("config", "bad_unknown", json.dumps({"layer": 6}))
put("config", "bad_not_object", "[1, 2]")
put("config", "bad_model_type", json.dumps({"model": 5}))
