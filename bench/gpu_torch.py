#!/usr/bin/env python3
"""PyTorch baseline for pipit's GPU step benchmark (bench/gpu.sh).

The same GPT-2 as pipit's (Hugging Face layout: pre-LN blocks, GELU tanh,
learned positions, tied lm head, LayerNorm eps 1e-5), random init, random
tokens; one full training step is forward, backward and AdamW (betas 0.9,
0.95, eps 1e-8, weight decay 0.1 on 2-D params, as pipit's defaults in
bench/gpu.sh), on one GPU, fp32 storage.

Precision: --precision fp32 (torch.backends.cuda.matmul.allow_tf32 = False,
full fp32 GEMMs, as pipit without --tf32), tf32 (allow_tf32 = True, as
pipit --tf32) or bf16 (torch.autocast bf16 around the forward, fp32
masters and AdamW, TF32 allowed for what stays fp32: as pipit --dtype
bf16). Attention: --attn sdpa (F.scaled_dot_product_attention,
causal: what a PyTorch user writes; in fp32 it runs the memory-efficient
kernel, never materialising [T, T] per head) or math (explicit softmax).
Mode: --mode eager, or compile (torch.compile of the model; the optimizer
step stays eager, fused=False foreach AdamW).

Timing: --warmup steps, then --steps timed steps, each bracketed by CUDA
events (and a synchronize), median reported. Prints one JSON line:
{"mode", "precision", "batch", "ms_per_step", "tokens_per_s", "tflops",
"mfu", ...} with the nanoGPT/PaLM FLOP count pipit uses,
  flops per step = (6 * N + 12 * L * C * T) * B * T,
N = every parameter but wpe, and MFU against --peak-tflops (bench/gpu.sh
passes the H200's dense peak for the precision). Out of memory: one JSON
line with "oom": true and exit status 3.

Usage: gpu_torch.py --batch B [--ctx 1024 --layers 12 --heads 12 --dim 768
       --vocab 50257 --precision tf32 --mode eager --steps 10 --warmup 3]
"""

import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, C, H, attn):
        super().__init__()
        self.H, self.attn = H, attn
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.c_attn = nn.Linear(C, 3 * C)
        self.c_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.c_fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(C, dim=2)
        q = q.view(B, T, self.H, C // self.H).transpose(1, 2)
        k = k.view(B, T, self.H, C // self.H).transpose(1, 2)
        v = v.view(B, T, self.H, C // self.H).transpose(1, 2)
        if self.attn == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
            mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
            y = att.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.c_proj(y)
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class GPT2(nn.Module):
    def __init__(self, V, T, L, H, C, attn):
        super().__init__()
        self.wte = nn.Embedding(V, C)
        self.wpe = nn.Embedding(T, C)
        self.h = nn.ModuleList(Block(C, H, attn) for _ in range(L))
        self.ln_f = nn.LayerNorm(C, eps=1e-5)
        for name, p in self.named_parameters():  # GPT-2's init
            if p.dim() >= 2:
                std = 0.02 / math.sqrt(2 * L) if name.endswith(("c_proj.weight", "mlp_proj.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)
            elif name.endswith("bias"):
                nn.init.zeros_(p)

    def forward(self, idx, tgt):
        T = idx.size(1)
        x = self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))
        for b in self.h:
            x = b(x)
        logits = self.ln_f(x) @ self.wte.weight.t()  # tied head
        return F.cross_entropy(logits.view(-1, logits.size(-1)), tgt.view(-1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--ctx", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--precision", choices=["fp32", "tf32", "bf16"], default="tf32")
    ap.add_argument("--mode", choices=["eager", "compile"], default="eager")
    ap.add_argument("--attn", choices=["sdpa", "math"], default="sdpa")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--peak-tflops", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print(json.dumps({"error": "no CUDA device"}))
        return 2

    # bf16: autocast bf16 around the forward (fp32 masters, AdamW in fp32), TF32 for what stays fp32
    tf32 = a.precision in ("tf32", "bf16")
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    torch.manual_seed(a.seed)
    dev = torch.device("cuda")
    V, T, L, H, C, B = a.vocab, a.ctx, a.layers, a.heads, a.dim, a.batch
    out = {"mode": a.mode, "precision": a.precision, "attn": a.attn, "batch": B, "ctx": T,
           "torch": torch.__version__, "device": torch.cuda.get_device_name(0)}
    try:
        model = GPT2(V, T, L, H, C, a.attn).to(dev)
        n_all = sum(p.numel() for p in model.parameters())
        n_flops = n_all - model.wpe.weight.numel()
        decay = [p for p in model.parameters() if p.dim() >= 2]
        nodecay = [p for p in model.parameters() if p.dim() < 2]
        opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": nodecay, "weight_decay": 0.0}],
                                lr=3e-4, betas=(0.9, 0.95), eps=1e-8)
        fwd = torch.compile(model) if a.mode == "compile" else model
        gen = torch.Generator(device=dev)
        gen.manual_seed(a.seed)

        def step():
            idx = torch.randint(0, V, (B, T), device=dev, generator=gen)
            tgt = torch.randint(0, V, (B, T), device=dev, generator=gen)
            opt.zero_grad(set_to_none=True)
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
                loss = fwd(idx, tgt)
            loss.backward()
            opt.step()
            return loss

        t_compile = time.perf_counter()
        for _ in range(a.warmup):
            step()
        torch.cuda.synchronize()
        out["warmup_s"] = round(time.perf_counter() - t_compile, 2)
        times = []
        for _ in range(a.steps):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            loss = step()
            e1.record()
            torch.cuda.synchronize()
            times.append(e0.elapsed_time(e1) / 1e3)
        out["loss"] = float(loss.item())
        out["max_memory_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    except torch.cuda.OutOfMemoryError as e:
        out.update({"oom": True, "error": str(e).splitlines()[0]})
        print(json.dumps(out))
        return 3
    sec = statistics.median(times)
    flops = (6 * n_flops + 12 * L * C * T) * B * T
    out.update({"ms_per_step": round(sec * 1e3, 3), "ms_min": round(min(times) * 1e3, 3),
                "tokens_per_s": round(B * T / sec, 1), "tflops": round(flops / sec / 1e12, 2),
                "params": n_all, "flops_per_step": flops})
    if a.peak_tflops > 0:
        out["mfu"] = round(flops / sec / 1e12 / a.peak_tflops, 4)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
