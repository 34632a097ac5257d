#!/usr/bin/python3
"""PyTorch peer for pipit's MoE step benchmark (CPU, float32; bench/moe.sh).

The model of `pipit train --model moe-100m` (or llama-50m with --experts 0):
a Llama (RMSNorm eps 1e-5, RoPE theta 1e4, GQA, tied head, no biases) whose
MLPs are Mixtral-style sparse blocks: router logits x Wr^T, softmax, top-k,
the k weights renormalised, each token's output the weighted sum of its k
experts' SwiGLU outputs. Two dispatches:

  --dispatch capacity  pipit's semantics (pipit_moe.h): a static capacity of
      ceil(factor x N x k / E) slots per expert (at most N), slots taken in
      token order then choice order, a choice past its expert's capacity
      dropped (its output zero); the experts run as one batched product on
      the [E, cap, C] grid (zeros in the empty slots), as pipit does.
  --dispatch hf        transformers' MixtralSparseMoeBlock loop: per expert,
      the rows of the tokens that chose it (torch.where), its SwiGLU on them,
      index_add_ back times the routing weight: dropless, no padding.

Every step is forward, backward and AdamW (torch.optim.AdamW, weight decay
0.1 on matrices) of B sequences of T random tokens. Prints one JSON line:
median wall ms per step over --steps timed steps after --warmup, the process
CPU ms per step over them (time.process_time: what a shared machine's other
processes do not inflate at one thread), tokens/s from the median, params.

Usage: moe_torch_step.py --threads N [--ctx 256 --micro-batch 2 --layers 8
    --heads 8 --kv-heads 2 --dim 512 --ffn-hidden 768 --experts 8 --top-k 2
    --vocab 50257 --capacity-factor 1.25 --dispatch capacity|hf --steps 3
    --warmup 1 --attention explicit|sdpa]
(--experts 0: the dense Llama of --ffn-hidden, e.g. llama-50m's 1536.)
"""

import argparse
import json
import math
import os
import statistics
import sys
import time


def _threads_from_argv():
    a = sys.argv
    for i, x in enumerate(a):
        if x == "--threads" and i + 1 < len(a):
            return a[i + 1]
        if x.startswith("--threads="):
            return x.split("=", 1)[1]
    return "1"


# The BLAS and OpenMP pools must get the thread count before torch loads
# (Debian's torch does its GEMMs in OpenBLAS, whose pool ignores set_num_threads).
for _v in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_v] = _threads_from_argv()
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402


def rms_norm(x, w, eps=1e-5):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope(T, D, theta=1e4):
    inv = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.float32) / D))
    f = torch.outer(torch.arange(T, dtype=torch.float32), inv)
    e = torch.cat((f, f), dim=-1)
    return e.cos(), e.sin()


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


def attention(x, P, p, a, cos, sin):
    B, T, C = x.shape
    H, KV = a.heads, a.kv_heads
    D = C // H
    q = (x @ P[p + "q"].t()).view(B, T, H, D).transpose(1, 2)
    k = (x @ P[p + "k"].t()).view(B, T, KV, D).transpose(1, 2)
    v = (x @ P[p + "v"].t()).view(B, T, KV, D).transpose(1, 2)
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
    if a.attention == "sdpa":
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    else:
        att = (q @ k.transpose(2, 3)) / math.sqrt(D)
        att = att.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf")).softmax(-1)
        o = att @ v
    return o.transpose(1, 2).reshape(B, T, C) @ P[p + "o"].t()


def swiglu(x, wg, wu, wd):
    return (F.silu(x @ wg.transpose(-1, -2)) * (x @ wu.transpose(-1, -2))) @ wd.transpose(-1, -2)


def route(x, wr, k):
    probs = torch.softmax(x @ wr.t(), dim=-1)
    w, idx = torch.topk(probs, k, dim=-1)
    return w / w.sum(dim=-1, keepdim=True), idx


def moe_capacity(x, P, p, a):
    """pipit's static-capacity dispatch, batched experts, weighted combine."""
    N, C = x.shape
    E, k = a.experts, a.top_k
    cap = min(N, max(1, math.ceil(a.capacity_factor * N * k / E)))
    w, idx = route(x, P[p + "router"], k)
    flat = idx.reshape(-1)  # choices in token order, then choice order
    pos = (torch.cumsum(F.one_hot(flat, E), dim=0) - 1).gather(1, flat[:, None]).squeeze(1)
    keep = pos < cap
    slot = (flat * cap + pos)[keep]
    tok = torch.arange(N).repeat_interleave(k)[keep]
    xe = x.new_zeros(E * cap, C).index_copy(0, slot, x[tok]).view(E, cap, C)
    ye = swiglu(xe, P[p + "wg"], P[p + "wu"], P[p + "wd"]).reshape(E * cap, C)
    contrib = ye[slot] * w.reshape(-1)[keep][:, None]
    return x.new_zeros(N, C).index_add(0, tok, contrib)


def moe_hf(x, P, p, a):
    """transformers' MixtralSparseMoeBlock.forward (the expert loop)."""
    N, C = x.shape
    w, idx = route(x, P[p + "router"], a.top_k)
    out = x.new_zeros(N, C)
    mask = F.one_hot(idx, a.experts).permute(2, 1, 0)  # [E, k, N]
    for e in range(a.experts):
        j, t = torch.where(mask[e])
        if t.numel() == 0:
            continue
        y = swiglu(x[t], P[p + "wg"][e], P[p + "wu"][e], P[p + "wd"][e]) * w[t, j, None]
        out = out.index_add(0, t, y)
    return out


def build(a):
    g = torch.Generator().manual_seed(a.seed)
    C, Fh, E, V = a.dim, a.ffn_hidden, a.experts, a.vocab
    D = C // a.heads

    def n(*shape):
        return (torch.randn(*shape, generator=g) * 0.02).requires_grad_(True)

    P = {"embed": n(V, C), "norm": torch.ones(C, requires_grad=True)}
    for i in range(a.layers):
        p = f"l{i}."
        P[p + "q"], P[p + "k"], P[p + "v"], P[p + "o"] = n(C, C), n(a.kv_heads * D, C), n(a.kv_heads * D, C), n(C, C)
        P[p + "n1"], P[p + "n2"] = torch.ones(C, requires_grad=True), torch.ones(C, requires_grad=True)
        if E:
            P[p + "router"] = n(E, C)
            P[p + "wg"], P[p + "wu"], P[p + "wd"] = n(E, Fh, C), n(E, Fh, C), n(E, C, Fh)
        else:
            P[p + "wg"], P[p + "wu"], P[p + "wd"] = n(Fh, C), n(Fh, C), n(C, Fh)
    return P


def loss_fn(P, idx, tgt, a, cos, sin):
    B, T = idx.shape
    x = P["embed"][idx]
    moe = moe_capacity if a.dispatch == "capacity" else moe_hf
    for i in range(a.layers):
        p = f"l{i}."
        x = x + attention(rms_norm(x, P[p + "n1"]), P, p, a, cos, sin)
        h = rms_norm(x, P[p + "n2"])
        if a.experts:
            x = x + moe(h.reshape(B * T, -1), P, p, a).reshape(B, T, -1)
        else:
            x = x + swiglu(h, P[p + "wg"], P[p + "wu"], P[p + "wd"])
    logits = rms_norm(x, P["norm"]) @ P["embed"].t()
    return F.cross_entropy(logits.reshape(-1, a.vocab), tgt.reshape(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    for k, v in (("threads", 1), ("ctx", 256), ("micro-batch", 2), ("layers", 8), ("heads", 8), ("kv-heads", 2),
                 ("dim", 512), ("ffn-hidden", 768), ("experts", 8), ("top-k", 2), ("vocab", 50257), ("steps", 3),
                 ("warmup", 1), ("seed", 7)):
        ap.add_argument("--" + k, type=int, default=v)
    ap.add_argument("--capacity-factor", type=float, default=1.25)
    ap.add_argument("--dispatch", choices=("capacity", "hf"), default="capacity")
    ap.add_argument("--attention", choices=("explicit", "sdpa"), default="explicit",
                    help="explicit: q k^T, mask, softmax, x v (as tests/llama_torch.py); sdpa: "
                         "F.scaled_dot_product_attention (torch >= 2.0)")
    a = ap.parse_args()
    if a.experts and not 1 <= a.top_k <= a.experts:
        ap.error("--top-k must be in 1..--experts")
    if a.dim % a.heads or a.heads % a.kv_heads:
        ap.error("--heads must divide --dim and --kv-heads --heads")
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(a.seed)
    P = build(a)
    decay = [p for p in P.values() if p.dim() >= 2]
    nodecay = [p for p in P.values() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": nodecay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8, foreach=False)
    B, T = a.micro_batch, a.ctx
    cos, sin = rope(T, a.dim // a.heads)

    def step():
        idx = torch.randint(0, a.vocab, (B, T))
        tgt = torch.randint(0, a.vocab, (B, T))
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(P, idx, tgt, a, cos, sin)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(a.warmup):
        step()
    times = []
    c0 = time.process_time()
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    cpu = (time.process_time() - c0) / max(a.steps, 1)
    sec = statistics.median(times)
    print(json.dumps({
        "ms_per_step": round(sec * 1e3, 2), "cpu_ms_per_step": round(cpu * 1e3, 2),
        "tokens_per_s": round(B * T / sec, 2), "ms_all": [round(t * 1e3, 1) for t in times],
        "params": sum(p.numel() for p in P.values()), "dispatch": a.dispatch if a.experts else "dense",
        "attention": a.attention, "threads": a.threads, "torch": torch.__version__,
        "torch_threads": torch.get_num_threads()}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
