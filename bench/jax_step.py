#!/usr/bin/env python3
"""JAX peer for pipit's step benchmark (CPU, float32, jax.jit).

The GPT-2 of tests/gpt2_torch.py (pre-LN blocks, Conv1D weight layout
[in, out], GELU tanh, tied wte head, LayerNorm eps 1e-5) written in
jax.numpy, with the same GPT-2 init (tests/gpt2_init.py, seed 0) and AdamW
written out with torch.optim.AdamW's semantics (decoupled weight decay 0.1 on
2-D params only, lr 3e-4, betas 0.9 / 0.95, eps 1e-8, bias correction). One
jitted function does the whole training step (forward, backward, AdamW) with
the params and both moments donated, so XLA updates them in place; each step
feeds B sequences of T random tokens and waits for the loss.

With --arch llama: the Llama of tests/llama_torch.py (Hugging Face's
LlamaForCausalLM: RMSNorm, RoPE rotate-half with float32 angles, grouped-query
causal attention, SwiGLU, nn.Linear [out, in] weights, tied or untied head)
in jax.numpy, with Hugging Face's init (tests/llama_init.py).

Usage (a python with jax, e.g. a venv under /tmp):
  python bench/jax_step.py --vocab V --ctx T --layers L --heads H --dim C \\
      --micro-batch B --threads N [--steps K --warmup W]
      [--arch llama --kv-heads K --ffn-hidden F --tied] [--dtype bf16]

Threads: XLA:CPU sizes its thread pools from the CPUs the process may run on,
so the caller pins it with taskset (bench/peers.py does); with --threads 1
this script also turns off Eigen's multi-threading
(XLA_FLAGS=--xla_cpu_multi_thread_eigen=false). The thread check of
bench/peer_meter.py measures what it actually used.

Prints one JSON line like bench/torch_step.py (ms_per_step = median over the
timed steps, gflops with the same FLOP count, compile_s = the first call).
"""

import argparse
import json
import math
import os
import statistics
import sys
import time


HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, HERE)
import peer_meter  # noqa: E402


def _pin_threads():
    n = peer_meter.threads_from_argv(sys.argv)
    flags = os.environ.get("XLA_FLAGS", "")
    if n == "1" and "xla_cpu_multi_thread_eigen" not in flags:
        flags = (flags + " --xla_cpu_multi_thread_eigen=false").strip()
    if flags:
        os.environ["XLA_FLAGS"] = flags
    os.environ.setdefault("JAX_PLATFORMS", "cpu")


_pin_threads()
import numpy as np  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import gpt2_init  # noqa: E402
import llama_init  # noqa: E402

LN_EPS = 1e-5


def layer_norm(x, w, b):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) * jax.lax.rsqrt(var + LN_EPS) * w + b


def attention(x, P, p, H):
    B, T, C = x.shape
    D = C // H
    qkv = x @ P[p + "attn.c_attn.weight"] + P[p + "attn.c_attn.bias"]
    q, k, v = (z.reshape(B, T, H, D).transpose(0, 2, 1, 3) for z in jnp.split(qkv, 3, axis=2))
    att = (q @ k.transpose(0, 1, 3, 2)) * (1.0 / math.sqrt(D))
    att = jnp.where(jnp.tril(jnp.ones((T, T), dtype=bool)), att, -jnp.inf)
    att = jax.nn.softmax(att, axis=-1)
    y = (att @ v).transpose(0, 2, 1, 3).reshape(B, T, C)
    return y @ P[p + "attn.c_proj.weight"] + P[p + "attn.c_proj.bias"]


def mlp(x, P, p):
    h = jax.nn.gelu(x @ P[p + "mlp.c_fc.weight"] + P[p + "mlp.c_fc.bias"], approximate=True)
    return h @ P[p + "mlp.c_proj.weight"] + P[p + "mlp.c_proj.bias"]


def loss_fn(P, idx, tgt, H, L):
    T = idx.shape[1]
    x = P["wte.weight"][idx] + P["wpe.weight"][:T][None]
    for i in range(L):
        p = f"h.{i}."
        x = x + attention(layer_norm(x, P[p + "ln_1.weight"], P[p + "ln_1.bias"]), P, p, H)
        x = x + mlp(layer_norm(x, P[p + "ln_2.weight"], P[p + "ln_2.bias"]), P, p)
    x = layer_norm(x, P["ln_f.weight"], P["ln_f.bias"])
    logits = x @ P["wte.weight"].T
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return -jnp.take_along_axis(logp, tgt[..., None], axis=-1).mean()


def rms_norm(x, w, eps):
    return w * (x * jax.lax.rsqrt((x * x).mean(-1, keepdims=True) + eps))


def rotate_half(x):
    h = x.shape[-1] // 2
    return jnp.concatenate((-x[..., h:], x[..., :h]), axis=-1)


def llama_loss_fn(P, idx, tgt, c):
    B, T = idx.shape
    inv = 1.0 / (c.theta ** (jnp.arange(0, c.D, 2, dtype=jnp.float32) / c.D))
    ang = jnp.arange(T, dtype=jnp.float32)[:, None] * inv[None, :]
    cos, sin = jnp.cos(jnp.concatenate((ang, ang), -1)), jnp.sin(jnp.concatenate((ang, ang), -1))
    mask = jnp.tril(jnp.ones((T, T), dtype=bool))
    x = P["model.embed_tokens.weight"][idx]
    for i in range(c.L):
        p = f"model.layers.{i}."
        h = rms_norm(x, P[p + "input_layernorm.weight"], c.eps)
        q = (h @ P[p + "self_attn.q_proj.weight"].T).reshape(B, T, c.H, c.D).transpose(0, 2, 1, 3)
        k = (h @ P[p + "self_attn.k_proj.weight"].T).reshape(B, T, c.KV, c.D).transpose(0, 2, 1, 3)
        v = (h @ P[p + "self_attn.v_proj.weight"].T).reshape(B, T, c.KV, c.D).transpose(0, 2, 1, 3)
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        k, v = jnp.repeat(k, c.H // c.KV, axis=1), jnp.repeat(v, c.H // c.KV, axis=1)
        att = jnp.where(mask, (q @ k.transpose(0, 1, 3, 2)) / math.sqrt(c.D), -jnp.inf)
        y = (jax.nn.softmax(att, axis=-1) @ v).transpose(0, 2, 1, 3).reshape(B, T, c.C)
        x = x + y @ P[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, P[p + "post_attention_layernorm.weight"], c.eps)
        gu = jax.nn.silu(h @ P[p + "mlp.gate_proj.weight"].T) * (h @ P[p + "mlp.up_proj.weight"].T)
        x = x + gu @ P[p + "mlp.down_proj.weight"].T
    x = rms_norm(x, P["model.norm.weight"], c.eps)
    logits = x @ (P["model.embed_tokens.weight"] if c.tied else P["lm_head.weight"]).T
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return -jnp.take_along_axis(logp, tgt[..., None], axis=-1).mean()


def mixed(loss_of):
    """--dtype bf16, mixed precision as pipit's: the fp32 params cast to bf16
    for the forward (their gradients come back in fp32 through the cast, so
    AdamW and its state stay fp32); the log-softmax and the loss in fp32."""
    return lambda P, idx, tgt: loss_of({n: a.astype(jnp.bfloat16) for n, a in P.items()}, idx, tgt)


def make_step(loss_of, lr=3e-4, b1=0.9, b2=0.95, eps=1e-8, wd=0.1):
    def step(P, m, v, t, idx, tgt):
        loss, g = jax.value_and_grad(loss_of)(P, idx, tgt)
        bc1 = 1.0 - b1 ** t
        bc2 = 1.0 - b2 ** t
        newP, newm, newv = {}, {}, {}
        for n in P:
            p = P[n] * (1.0 - lr * wd) if P[n].ndim >= 2 else P[n]
            mn = b1 * m[n] + (1.0 - b1) * g[n]
            vn = b2 * v[n] + (1.0 - b2) * g[n] * g[n]
            newP[n] = p - (lr / bc1) * mn / (jnp.sqrt(vn) / jnp.sqrt(bc2) + eps)
            newm[n], newv[n] = mn, vn
        return newP, newm, newv, loss

    return jax.jit(step, donate_argnums=(0, 1, 2))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    peer_meter.add_step_args(ap)
    ap.add_argument("--dtype", choices=("f32", "bf16"), default="f32",
                    help="bf16: compute in bf16 with fp32 params, gradients and AdamW (mixed precision)")
    args = ap.parse_args()
    V, T, L, H, C, B = args.vocab, args.ctx, args.layers, args.heads, args.dim, args.micro_batch
    if C % H:
        ap.error("--heads must divide --dim")

    if args.arch == "llama":
        c = peer_meter.llama_cfg(args)
        host = llama_init.init_params(c, seed=args.seed)
        n_flops = llama_init.flops_params(c)
        loss_of = lambda P, idx, tgt: llama_loss_fn(P, idx, tgt, c)  # noqa: E731
    else:
        host = gpt2_init.init_params(V, T, C, L, seed=args.seed)
        n_flops = sum(a.size for a in host.values()) - host["wpe.weight"].size
        loss_of = lambda P, idx, tgt: loss_fn(P, idx, tgt, H, L)  # noqa: E731
    step = make_step(mixed(loss_of) if args.dtype == "bf16" else loss_of)
    n_all = sum(a.size for a in host.values())
    P = {n: jnp.asarray(a) for n, a in host.items()}
    del host
    m = {n: jnp.zeros_like(a) for n, a in P.items()}
    v = {n: jnp.zeros_like(a) for n, a in P.items()}
    rng = np.random.default_rng(args.seed)
    t = 0

    def one():
        nonlocal P, m, v, t
        t += 1
        idx = jnp.asarray(rng.integers(0, V, (B, T), dtype=np.int32))
        tgt = jnp.asarray(rng.integers(0, V, (B, T), dtype=np.int32))
        P, m, v, loss = step(P, m, v, jnp.float32(t), idx, tgt)
        return float(loss)

    t0 = time.perf_counter()
    one()
    compile_s = time.perf_counter() - t0
    for _ in range(max(args.warmup - 1, 0)):
        one()
    times = []
    meter = peer_meter.ThreadMeter()
    meter.start()
    for _ in range(args.steps):
        t0 = time.perf_counter()
        last = one()
        times.append(time.perf_counter() - t0)
    check = meter.stop(args.steps)

    tokens = B * T
    flops = (6 * n_flops + 12 * L * C * T) * tokens
    sec = statistics.median(times)
    import jaxlib
    print(json.dumps({
        "ms_per_step": round(sec * 1e3, 4),
        "dtype": args.dtype,
        "tokens_per_s": round(tokens / sec, 2),
        "gflops": round(flops / sec / 1e9, 4),
        "ms_min": round(min(times) * 1e3, 4),
        "params": int(n_all),
        "flops_per_step": int(flops),
        "loss": round(last, 4),
        "compile_s": round(compile_s, 2),
        "config": peer_meter.config_of(args),
        "jax": jax.__version__,
        "jaxlib": getattr(jaxlib, "__version__", "?"),
        "devices": [str(d) for d in jax.devices()],
        **peer_meter.process_report(check),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
