#!/usr/bin/env python3
"""ops_torch.py — the PyTorch side of tests/test_ops_torch.c.

Usage: ops_torch.py DIR CASE...

For each case, DIR/CASE.meta lists tensors ("name ndim d0 d1 ...") whose
float32 data is in DIR/CASE.<name>: the params, R, pipit's output y and
pipit's gradients grad_<param> of sum(y * R). This recomputes y and the
gradients with torch autograd in float32, the way Hugging Face's Llama code
computes them (modeling_llama: LlamaRotaryEmbedding's inv_freq and cos/sin
in float32, rotate_half, LlamaRMSNorm, repeat_kv + eager softmax attention),
and requires max |pipit - torch| <= TOL * max(1, max |torch|) per tensor.
Prints one line per tensor; exits 1 on any mismatch.
"""
import sys

import numpy as np
import torch

from llama_torch import llama3_inv_freq

TOL = 2e-6


def load(d, case):
    t = {}
    with open(f"{d}/{case}.meta") as f:
        for line in f:
            parts = line.split()
            name, nd = parts[0], int(parts[1])
            shape = [int(s) for s in parts[2:2 + nd]]
            data = np.fromfile(f"{d}/{case}.{name}", dtype=np.float32).reshape(shape)
            t[name] = torch.from_numpy(data.copy())
    return t


# ---- Hugging Face Llama, written out (modeling_llama.py) ----

def rope_cos_sin(dim, base, positions, scaling=None):
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    if scaling:  # rope_type "llama3": (factor, low_freq_factor, high_freq_factor, original max positions)
        inv_freq = llama3_inv_freq(inv_freq, *scaling)
    freqs = (inv_freq[None, :, None].float() @ positions[None, None, :].float()).transpose(1, 2)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos()[0], emb.sin()[0]  # [T, D]


def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rope(x, heads, base, pos0, scaling=None):
    B, T = x.shape[0], x.shape[1]
    xh = x.reshape(B, T, heads, -1)  # [B, T, H, D]
    cos, sin = rope_cos_sin(xh.shape[-1], base, torch.arange(pos0, pos0 + T), scaling)
    cos, sin = cos[None, :, None, :], sin[None, :, None, :]
    return ((xh * cos) + (rotate_half(xh) * sin)).reshape(x.shape)


def rmsnorm(x, w, eps):
    v = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(v + eps))


def attention(q, k, v, hq, hkv, causal, scale):
    B, T, S = q.shape[0], q.shape[1], k.shape[1]
    D = q.shape[2] // hq
    qh = q.reshape(B, T, hq, D).transpose(1, 2)
    kh = k.reshape(B, S, hkv, D).transpose(1, 2)
    vh = v.reshape(B, S, hkv, D).transpose(1, 2)
    rep = hq // hkv  # repeat_kv
    kh = kh[:, :, None].expand(B, hkv, rep, S, D).reshape(B, hq, S, D)
    vh = vh[:, :, None].expand(B, hkv, rep, S, D).reshape(B, hq, S, D)
    w = torch.matmul(qh, kh.transpose(2, 3)) * scale
    if causal:
        w = w + torch.triu(torch.full((T, S), float("-inf")), diagonal=1)
    w = torch.softmax(w, dim=-1, dtype=torch.float32)
    return torch.matmul(w, vh).transpose(1, 2).reshape(B, T, hq * D)


CASES = {
    "rope": lambda t: rope(t["x"], 3, 10000.0, 0),
    "rope_ex": lambda t: rope(t["x"], 2, 500000.0, 3),
    "rope_long": lambda t: rope(t["x"], 1, 10000.0, 0),
    # Llama 3.1's scaling at positions past its original 8192: head size 128
    # has frequencies in each of the three bands
    "rope_llama3": lambda t: rope(t["x"], 2, 500000.0, 9000, (8.0, 1.0, 4.0, 8192)),
    "rmsnorm": lambda t: rmsnorm(t["x"], t["w"], 1e-6),
    "attn_gqa": lambda t: attention(t["q"], t["k"], t["v"], 4, 2, True, 8 ** -0.5),
    "attn_cross": lambda t: attention(t["q"], t["k"], t["v"], 2, 1, False, 0.3),
    "silu": lambda t: torch.nn.functional.silu(t["x"]),
    "sigmoid": lambda t: torch.sigmoid(t["x"]),
    "tanh": lambda t: torch.tanh(t["x"]),
    "softmax": lambda t: torch.softmax(t["x"], -1),
    "log_softmax": lambda t: torch.log_softmax(t["x"], -1),
    "swiglu": lambda t: torch.nn.functional.silu(t["x"]) * t["u"],
    "bcast": lambda t: (t["a"] - t["b"]) / torch.exp(t["c"]) * t["d"] + t["a"],
    "reduce": lambda t: (t["x"] + t["x"].mean(-1, keepdim=True)) * t["x"].max(1, keepdim=True).values
    + t["x"].sum(0),
}


def check(case, what, got, ref):
    scale = max(1.0, float(ref.abs().max()))
    err = float((got - ref).abs().max()) / scale
    ok = err <= TOL
    print(f"{'ok  ' if ok else 'FAIL'} {case:12s} {what:10s} max rel err {err:.2e}")
    return ok


def check_freqs(path):
    """--freqs FILE: lines "theta D factor lo hi L bits..." of pipit's float32
    inverse frequencies (factor 0: no scaling), each equal to torch's bit for bit."""
    ok = True
    for line in open(path):
        f = line.split()
        theta, D, factor, lo, hi, L = float(f[0]), int(f[1]), float(f[2]), float(f[3]), float(f[4]), int(f[5])
        got = np.array([int(b, 16) for b in f[6:]], dtype=np.uint32).view(np.float32)
        scaling = (factor, lo, hi, L) if factor > 0 else None
        inv = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))
        ref = (llama3_inv_freq(inv, *scaling) if scaling else inv).numpy()
        bad = np.nonzero(got.view(np.uint32) != ref.view(np.uint32))[0]
        print(f"{'ok  ' if not len(bad) else 'FAIL'} inv_freq theta {theta:g} D {D} scaling {scaling}: "
              f"{len(got) - len(bad)}/{len(got)} bitwise" + (f", first differs at {bad[0]}: {got[bad[0]]!r} vs "
                                                            f"{ref[bad[0]]!r}" if len(bad) else ""))
        ok &= not len(bad) and len(got) == D // 2
    return ok


def main():
    if sys.argv[1] == "--freqs":
        sys.exit(0 if check_freqs(sys.argv[2]) else 1)
    d, cases = sys.argv[1], sys.argv[2:]
    ok = True
    for case in cases:
        t = load(d, case)
        params = {n: t[n].clone().requires_grad_(True) for n in t if n not in ("R", "y") and not n.startswith("grad_")}
        y = CASES[case](params)
        (y * t["R"]).sum().backward()
        ok &= check(case, "y", t["y"], y.detach())
        for n, p in params.items():
            ok &= check(case, "d" + n, t["grad_" + n], p.grad)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
