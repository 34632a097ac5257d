#!/usr/bin/python3
"""PyTorch baseline for pipit's step benchmark (CPU, float32).

Builds the GPT-2 model of tests/gpt2_torch.py with random GPT-2 init (or,
with --arch llama, the Llama of tests/llama_torch.py with Hugging Face's
init: the straight module, or transformers' LlamaForCausalLM itself with
--impl hf), feeds synthetic random tokens and times full training steps
(forward, backward, AdamW update) of one batch of B sequences of T tokens.

Usage (Debian's python, which has torch, or a venv's torch 2.x):
  /usr/bin/python3 bench/torch_step.py --vocab V --ctx T --layers L --heads H \
      --dim C --micro-batch B --threads N [--steps K --warmup W]
      [--adamw loop|foreach|fused] [--arch llama --kv-heads K --ffn-hidden F
      --tied --impl straight|hf] [--autocast bf16]
bench/peers.py runs it with each peer's settings (malloc tunables, OpenMP
wait policy, taskset) next to pipit's step.

Prints one JSON line: {"ms_per_step" (median over --steps timed steps),
"tokens_per_s", "gflops", ...}, where
gflops is achieved GFLOP/s with the nanoGPT/PaLM estimate
  flops per step = (6 * N + 12 * L * C * T) * B * T
and N counts every parameter except the position embedding wpe (nanoGPT's
non-embedding count; wte stays in since it is the output head too); for
Llama every parameter except an untied embedding (pipit_llama_flops_per_token).
The JSON also has the thread check of bench/peer_meter.py over the timed
steps (cpu_per_wall, busy_threads), torch's thread counts, the BLAS torch
was built with, the relevant environment and the peak RSS.
"""

import argparse
import json
import os
import re
import statistics
import sys
import time


sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import peer_meter  # noqa: E402


def _pin_threads():
    """Debian's torch does its matrix products in OpenBLAS, whose own thread
    pool ignores torch.set_num_threads: without this, "--threads 1" would use
    every core for GEMMs (and --threads 2 oversubscribes). Both pools must get
    the thread count before torch (and OpenBLAS) load."""
    n = peer_meter.threads_from_argv(sys.argv)
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = n


_pin_threads()
import torch  # noqa: E402

import gpt2_torch as g  # noqa: E402


def blas_info():
    m = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
    return m.group(1) if m else "?"


def pool_threads():
    """The thread counts torch's pools report (OpenMP, MKL when present)."""
    info = torch.__config__.parallel_info()
    out = {}
    for key in ("omp_get_max_threads", "mkl_get_max_threads"):
        m = re.search(key + r"\(\) : (\d+)", info)
        if m:
            out[key.split("_")[0]] = int(m.group(1))
    return out


def llama_model(args):
    """(params by name, loss(idx, tgt), N for the FLOP count) of the Llama the
    options describe, Hugging Face's init."""
    import llama_init
    import llama_torch
    c = peer_meter.llama_cfg(args)
    host = llama_init.init_params(c, seed=args.seed)
    if args.impl == "hf":
        m = llama_torch.hf_model(c, host)
        P = dict(m.named_parameters())  # tied: one parameter, listed once

        def loss(idx, tgt):
            return torch.nn.functional.cross_entropy(llama_torch.hf_logits(m, idx).reshape(-1, c.V), tgt.reshape(-1))
    else:
        P = {n: torch.tensor(a).requires_grad_(True) for n, a in host.items()}

        def loss(idx, tgt):
            return llama_torch.loss_fn(P, idx, tgt, c)
    return P, loss, llama_init.flops_params(c)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    peer_meter.add_step_args(ap)
    ap.add_argument("--adamw", choices=("loop", "foreach", "fused"), default="loop",
                    help="torch.optim.AdamW implementation: the per-param loop (the CPU default), "
                         "foreach=True, or fused=True (CPU since torch 2.4)")
    ap.add_argument("--autocast", choices=("off", "bf16"), default="off",
                    help="bf16: each forward under torch.autocast('cpu', torch.bfloat16), PyTorch's mixed precision")
    ap.add_argument("--impl", choices=("straight", "hf"), default="straight",
                    help="llama: tests/llama_torch.py's module or transformers' LlamaForCausalLM")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.set_num_interop_threads(1)
    torch.manual_seed(args.seed)
    V, T, L, H, C, B = args.vocab, args.ctx, args.layers, args.heads, args.dim, args.micro_batch
    if C % H:
        ap.error("--heads must divide --dim")

    loss_fn = lambda idx, tgt: g.loss_fn(P, idx, tgt, H, L)  # noqa: E731
    if args.arch == "llama":
        P, loss_fn, n_flops = llama_model(args)
    else:
        P = {n: torch.tensor(a).requires_grad_(True)
             for n, a in g.init_params(V, T, C, L, seed=args.seed).items()}
        n_flops = sum(p.numel() for p in P.values()) - P["wpe.weight"].numel()
    n_all = sum(p.numel() for p in P.values())
    decay = [p for p in P.values() if p.dim() >= 2]
    nodecay = [p for p in P.values() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": nodecay, "weight_decay": 0.0}],
                            lr=3e-4, betas=(0.9, 0.95), eps=1e-8,
                            **({"foreach": True} if args.adamw == "foreach" else
                               {"fused": True} if args.adamw == "fused" else {"foreach": False}))

    def step():
        idx = torch.randint(0, V, (B, T))
        tgt = torch.randint(0, V, (B, T))
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast == "bf16"):
            loss = loss_fn(idx, tgt)
        loss.backward()
        opt.step()
        return loss.item()

    for _ in range(args.warmup):
        step()
    times = []
    meter = peer_meter.ThreadMeter()
    meter.start()
    for _ in range(args.steps):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    check = meter.stop(args.steps)

    tokens = B * T
    flops = (6 * n_flops + 12 * L * C * T) * tokens
    sec = statistics.median(times) if times else float("nan")
    print(json.dumps({
        "ms_per_step": round(sec * 1e3, 4),
        "tokens_per_s": round(tokens / sec, 2),
        "gflops": round(flops / sec / 1e9, 4),
        "ms_min": round(min(times) * 1e3, 4) if times else None,
        "ms_mean": round(statistics.mean(times) * 1e3, 4) if times else None,
        "params": n_all,
        "flops_per_step": flops,
        "flops_formula": "(6*N + 12*L*C*T) * B*T, N = params excluding wpe (Llama: an untied embedding)",
        "impl": args.impl if args.arch == "llama" else "gpt2_torch",
        "config": peer_meter.config_of(args),
        "torch": torch.__version__,
        "blas": blas_info(),
        "adamw": args.adamw,
        "autocast": args.autocast,
        "torch_threads": torch.get_num_threads(),
        "interop_threads": torch.get_num_interop_threads(),
        "pool_threads": pool_threads(),
        **peer_meter.process_report(check),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
