#!/usr/bin/python3
"""PyTorch oracle for pipit's Llama training (CPU, float32).

The model is Hugging Face's LlamaForCausalLM: transformers' own class where
the Python running this can import it (--impl hf), otherwise a straight
PyTorch implementation written from transformers' modeling_llama.py (--impl
torch): RMSNorm (mean of squares in float32, x * rsqrt(var + eps) * w),
rotary embeddings in the rotate-half convention with inv_freq =
1 / theta^(arange(0, D, 2) / D) and angles formed in float32, grouped-query
causal attention (query head h reads key/value head h // (H / KV)), the
SwiGLU MLP down(silu(gate(x)) * up(x)), nn.Linear weights [out, in], a final
RMSNorm and an lm head tied to the embedding or not. --impl auto (the
default) takes hf when transformers imports, and says which ran on stderr.
The training loop is tests/gpt2_torch.py's (sequential byte windows, M
microbatches with gradients summed as sum(grad(loss_m) / M), global-norm
clipping, AdamW with decay on 2-D params or SGD).

Usage (any python with torch; transformers optional):
  llama_torch.py --init FILE --data FILE --ctx T --micro-batch B --microbatches M
      --steps N --lr X [--weight-decay X --clip X --optimizer adamw|sgd]
      [--heads H --kv-heads K --rope-theta X --norm-eps X] [--impl auto|hf|torch]
      [--save OUT.safetensors] [--json]
  llama_torch.py --selftest     # straight model vs a naive einsum version (f64,
                                # GQA, RoPE, tied and untied), finite
                                # differences, and vs transformers if importable
  llama_torch.py --make-hf DIR --vocab V --dim C --layers L --heads H --kv-heads K
      --ffn-hidden F --max-ctx N [--seed S]
                                # LlamaForCausalLM(config) saved by save_pretrained
                                # as DIR/untied and DIR/tied
  llama_torch.py --eval DIR_OR_FILE... --data FILE --ctx T --micro-batch B --batches K
                                # per target, the mean loss of sequences 0 .. K*B-1
                                # with transformers' model: from_pretrained(DIR), or
                                # a pipit checkpoint FILE built from its metadata
Heads, kv heads, theta and eps default to the checkpoint's metadata.
"""

import argparse
import json
import math
import os
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt2_torch import ByteData, add_train_args, load_safetensors, save_safetensors, train  # noqa: E402
from llama_init import Cfg, param_names, param_shapes  # noqa: E402,F401


def have_transformers():
    try:
        import transformers  # noqa: F401
        return True
    except Exception:
        return False


# ----------------------------------------------------------------- the model

def rms_norm(x, w, eps):
    # in x's dtype (transformers rounds to float32 first: the same for float32)
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def llama3_inv_freq(inv, factor, lo, hi, L):
    """RoPE frequency scaling of Llama 3.1 and later (rope_type "llama3"), from
    the published rule (Meta's apply_scaling; transformers'
    _compute_llama3_parameters): a frequency of wavelength w = 2 pi / f keeps
    f when w < L / hi, becomes f / factor when w > L / lo, and in between
    blends the two with s = (L / w - lo) / (hi - lo): (1 - s) f / factor + s f.
    Each step is a tensor op in inv's dtype (float32 for a float32 model, the
    Python numbers meeting the tensor as scalars), so the values are the ones
    transformers forms."""
    wave = (2 * math.pi) / inv
    low_band, high_band = wave > L / lo, wave < L / hi
    kept = torch.where(low_band, inv / factor, inv)
    s = (L / wave - lo) / (hi - lo)
    blend = (1 - s) * kept / factor + s * kept
    return torch.where(~low_band & ~high_band, blend, kept)


def rope_cos_sin(T, D, theta, dtype, scaling=None):
    # as LlamaRotaryEmbedding: inv_freq and the angles in float32 for a float32
    # model (in float64 for the float64 self-test); scaling = (factor, lo, hi,
    # L) of rope_type "llama3", or None
    inv_freq = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.int64).to(dtype) / D))
    if scaling:
        inv_freq = llama3_inv_freq(inv_freq, *scaling)
    freqs = torch.arange(T, dtype=dtype)[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def attention(x, P, p, c):
    B, T, _ = x.shape
    q = (x @ P[p + "self_attn.q_proj.weight"].t()).view(B, T, c.H, c.D).transpose(1, 2)
    k = (x @ P[p + "self_attn.k_proj.weight"].t()).view(B, T, c.KV, c.D).transpose(1, 2)
    v = (x @ P[p + "self_attn.v_proj.weight"].t()).view(B, T, c.KV, c.D).transpose(1, 2)
    cos, sin = rope_cos_sin(T, c.D, c.theta, x.dtype, c.scaling)
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    rep = c.H // c.KV  # repeat_kv: kv head j serves query heads j*rep .. j*rep+rep-1
    k = k.repeat_interleave(rep, dim=1)
    v = v.repeat_interleave(rep, dim=1)
    att = (q @ k.transpose(2, 3)) / math.sqrt(c.D)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    att = att.masked_fill(~mask, float("-inf"))
    att = torch.softmax(att, dim=-1)
    y = (att @ v).transpose(1, 2).reshape(B, T, c.C)
    return y @ P[p + "self_attn.o_proj.weight"].t()


def mlp(x, P, p):
    g = F.silu(x @ P[p + "mlp.gate_proj.weight"].t())
    return (g * (x @ P[p + "mlp.up_proj.weight"].t())) @ P[p + "mlp.down_proj.weight"].t()


def forward_logits(P, idx, c):
    x = P["model.embed_tokens.weight"][idx]
    for i in range(c.L):
        p = f"model.layers.{i}."
        x = x + attention(rms_norm(x, P[p + "input_layernorm.weight"], c.eps), P, p, c)
        x = x + mlp(rms_norm(x, P[p + "post_attention_layernorm.weight"], c.eps), P, p)
    x = rms_norm(x, P["model.norm.weight"], c.eps)
    head = P["model.embed_tokens.weight"] if c.tied else P["lm_head.weight"]
    return x @ head.t()


def loss_fn(P, idx, tgt, c):
    logits = forward_logits(P, idx, c)
    return F.cross_entropy(logits.reshape(-1, c.V), tgt.reshape(-1))


# ---- naive second formulation (for --selftest only) ----

def naive_loss(P, idx, tgt, c):
    """Einsums, RoPE as explicit 2x2 rotations of channel pairs (i, i + D/2),
    GQA by an explicit head map, one-hot embedding, manual cross-entropy."""
    B, T = idx.shape
    E = P["model.embed_tokens.weight"]
    x = torch.einsum("btv,vc->btc", F.one_hot(idx, c.V).to(E.dtype), E)
    half = c.D // 2
    freq = [c.theta ** (-2.0 * i / c.D) for i in range(half)]
    if c.scaling:  # Meta's apply_scaling, one Python float at a time
        factor, lo, hi, L = c.scaling
        for i, f in enumerate(freq):
            w = 2 * math.pi / f
            if L / hi <= w <= L / lo:
                s = (L / w - lo) / (hi - lo)
                freq[i] = (1 - s) * f / factor + s * f
            elif w > L / lo:
                freq[i] = f / factor
    ang = torch.tensor([[t * freq[i] for i in range(half)] for t in range(T)], dtype=E.dtype)
    kv_of = torch.tensor([h * c.KV // c.H for h in range(c.H)])

    def nrm(z, w):
        return z / torch.sqrt((z * z).mean(-1, keepdim=True) + c.eps) * w

    def rot(z):  # z [B,T,n,D]
        a, b = z[..., :half], z[..., half:]
        co, si = torch.cos(ang)[None, :, None, :], torch.sin(ang)[None, :, None, :]
        return torch.cat((a * co - b * si, b * co + a * si), dim=-1)

    tri = torch.arange(T).view(T, 1) >= torch.arange(T).view(1, T)
    for i in range(c.L):
        p = f"model.layers.{i}."
        h = nrm(x, P[p + "input_layernorm.weight"])
        q = rot(torch.einsum("btc,oc->bto", h, P[p + "self_attn.q_proj.weight"]).reshape(B, T, c.H, c.D))
        k = rot(torch.einsum("btc,oc->bto", h, P[p + "self_attn.k_proj.weight"]).reshape(B, T, c.KV, c.D))
        v = torch.einsum("btc,oc->bto", h, P[p + "self_attn.v_proj.weight"]).reshape(B, T, c.KV, c.D)
        s = torch.einsum("bthd,bshd->bhts", q, k[:, :, kv_of]) / math.sqrt(c.D)
        s = torch.where(tri, s, torch.full_like(s, -1e30))
        e = torch.exp(s - s.max(-1, keepdim=True).values) * tri
        y = torch.einsum("bhts,bshd->bthd", e / e.sum(-1, keepdim=True), v[:, :, kv_of]).reshape(B, T, c.C)
        x = x + torch.einsum("btc,oc->bto", y, P[p + "self_attn.o_proj.weight"])
        h = nrm(x, P[p + "post_attention_layernorm.weight"])
        g = torch.einsum("btc,fc->btf", h, P[p + "mlp.gate_proj.weight"])
        u = torch.einsum("btc,fc->btf", h, P[p + "mlp.up_proj.weight"])
        x = x + torch.einsum("btf,cf->btc", g / (1 + torch.exp(-g)) * u, P[p + "mlp.down_proj.weight"])
    x = nrm(x, P["model.norm.weight"])
    logits = torch.einsum("btc,vc->btv", x, E if c.tied else P["lm_head.weight"])
    mx = logits.max(-1, keepdim=True).values
    lse = (logits - mx).exp().sum(-1).log() + mx.squeeze(-1)
    return (lse - (logits * F.one_hot(tgt, c.V).to(logits.dtype)).sum(-1)).mean()


# ------------------------------------------------------------- transformers

def hf_config(c):
    from transformers import LlamaConfig
    scaling = None
    if c.scaling:
        scaling = dict(zip(("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
                           c.scaling), rope_type="llama3")
    return LlamaConfig(vocab_size=c.V, hidden_size=c.C, intermediate_size=c.F, num_hidden_layers=c.L,
                       num_attention_heads=c.H, num_key_value_heads=c.KV, max_position_embeddings=c.max_ctx,
                       rms_norm_eps=c.eps, rope_theta=c.theta, tie_word_embeddings=c.tied, attention_bias=False,
                       mlp_bias=False, rope_scaling=scaling, hidden_act="silu")


def hf_model(c, arrays, dtype=torch.float32):
    """transformers' LlamaForCausalLM holding the given weights exactly."""
    from transformers import LlamaForCausalLM
    torch.manual_seed(0)
    m = LlamaForCausalLM(hf_config(c)).to(dtype)
    sd = {n: torch.tensor(np.asarray(a), dtype=dtype) for n, a in arrays.items()}
    missing, unexpected = m.load_state_dict(sd, strict=False)
    missing = [n for n in missing if not (c.tied and n == "lm_head.weight") and "rotary_emb" not in n]
    if missing or unexpected:
        raise ValueError(f"weights do not fit LlamaForCausalLM: missing {missing[:5]}, unexpected {unexpected[:5]}")
    if c.tied:
        m.tie_weights()
    m.train()  # no dropout in Llama (attention_dropout 0): train == eval numerics
    return m


def hf_logits(m, idx):
    return m(input_ids=idx, use_cache=False).logits


# -------------------------------------------------------------------- selftest

def random_params(c, seed, dtype):
    g = torch.Generator().manual_seed(seed)
    P = {}
    for n, s in param_shapes(c).items():
        base = 1.0 if len(s) == 1 else 0.0
        P[n] = (base + 0.3 * torch.randn(s, generator=g, dtype=torch.float64)).to(dtype).requires_grad_(True)
    return P


def selftest():
    failures = 0

    def check(what, ok, detail=""):
        nonlocal failures
        print(f"{'ok  ' if ok else 'FAIL'} {what} {detail}")
        failures += 0 if ok else 1

    hf = have_transformers()
    for tied, scaled in ((False, False), (True, False), (False, True)):
        c = Cfg(V=37, C=24 if scaled else 16, L=2, H=4, KV=2, Fh=24, theta=500.0, eps=1e-5, tied=tied, max_ctx=32)
        # llama3 scaling: head size 6 has wavelengths 6.3, 50 and 395, one in each band of L = 128
        # (kept below L / 4 = 32, blended up to L, divided by the factor above)
        c.scaling = (8.0, 1.0, 4.0, 128) if scaled else None
        tag = ("tied" if tied else "untied") + (", llama3 RoPE" if scaled else "")
        P = random_params(c, 3, torch.float64)
        g = torch.Generator().manual_seed(4)
        idx = torch.randint(0, c.V, (3, 9), generator=g)
        tgt = torch.randint(0, c.V, (3, 9), generator=g)
        la = loss_fn(P, idx, tgt, c)
        ga = torch.autograd.grad(la, list(P.values()))
        lb = naive_loss(P, idx, tgt, c)
        gb = torch.autograd.grad(lb, list(P.values()))
        check(f"{tag}: loss vs naive einsum", abs(la.item() - lb.item()) < 1e-10, f"{la.item():.12f} {lb.item():.12f}")
        gerr = max(float((a - b).abs().max()) for a, b in zip(ga, gb))
        check(f"{tag}: grads vs naive einsum", gerr < 1e-10, f"max diff {gerr:.3e}")
        with torch.no_grad():
            lo1 = forward_logits(P, idx, c)
            idx2 = idx.clone()
            idx2[:, -1] = (idx2[:, -1] + 1) % c.V
            d = float((lo1[:, :-1] - forward_logits(P, idx2, c)[:, :-1]).abs().max())
        check(f"{tag}: causal mask", d == 0.0, f"max diff {d:.3e}")
        name = "model.layers.1.self_attn.k_proj.weight"
        gk = ga[list(P).index(name)]
        worst = 0.0
        with torch.no_grad():
            for (r, col) in [(0, 0), (3, 11), (7, 15)]:
                eps = 1e-6
                P[name][r, col] += eps
                lp = loss_fn(P, idx, tgt, c).item()
                P[name][r, col] -= 2 * eps
                lm = loss_fn(P, idx, tgt, c).item()
                P[name][r, col] += eps
                worst = max(worst, abs((lp - lm) / (2 * eps) - gk[r, col].item()))
        check(f"{tag}: finite differences", worst < 1e-7, f"max diff {worst:.3e}")
        if hf:  # in float32: transformers' RMSNorm and RoPE compute in float32 whatever the dtype
            P32 = {n: p.detach().float() for n, p in P.items()}
            m = hf_model(c, {n: p.numpy() for n, p in P32.items()})
            with torch.no_grad():
                ref = forward_logits(P32, idx, c)
                d = float((hf_logits(m, idx) - ref).abs().max()) / float(ref.abs().max())
            check(f"{tag}: straight model vs transformers' LlamaForCausalLM (f32 logits)", d < 1e-6,
                  f"max rel diff {d:.3e}")
    if not hf:
        print("note: transformers is not importable here: the straight model was not compared with it")
    print("selftest:", "PASS" if failures == 0 else f"{failures} FAILURES")
    return 0 if failures == 0 else 1


# ------------------------------------------------------------------------ main

def config_of(arrays, meta, args):
    V, C = arrays["model.embed_tokens.weight"].shape
    L = 0
    while f"model.layers.{L}.input_layernorm.weight" in arrays:
        L += 1
    H = args.heads or int(meta.get("heads", 0))
    if H <= 0 or C % H:
        raise ValueError(f"heads {H} unknown or not dividing dim {C}: pass --heads")
    KV = arrays["model.layers.0.self_attn.k_proj.weight"].shape[0] // (C // H)
    if args.kv_heads and args.kv_heads != KV:
        raise ValueError(f"--kv-heads {args.kv_heads} disagrees with k_proj ({KV})")
    Fh = arrays["model.layers.0.mlp.gate_proj.weight"].shape[0]
    theta = args.rope_theta or float(meta.get("rope_theta", 10000.0))
    eps = args.norm_eps or float(meta.get("norm_eps", 1e-6))
    c = Cfg(V, C, L, H, KV, Fh, theta, eps, "lm_head.weight" not in arrays, int(meta.get("max_ctx", 0)) or 4096)
    c.scaling = None
    if meta.get("rope_type", "default") == "llama3":  # pipit's metadata for rope_type "llama3"
        c.scaling = (float(meta["rope_factor"]), float(meta["rope_low_freq_factor"]),
                     float(meta["rope_high_freq_factor"]), int(meta["rope_original_max_position_embeddings"]))
    elif meta.get("rope_type", "default") != "default":
        raise ValueError(f"rope_type {meta['rope_type']!r}: the oracle implements default and llama3")
    want = param_shapes(c)
    if set(want) != {n for n in arrays if "rotary_emb" not in n}:
        raise ValueError(f"tensor names differ from Llama's: missing {sorted(set(want) - set(arrays))[:5]}, "
                         f"extra {sorted(set(arrays) - set(want))[:5]}")
    for n, s in want.items():
        if tuple(arrays[n].shape) != s:
            raise ValueError(f"{n}: shape {tuple(arrays[n].shape)}, expected {s}")
    return c


def pick_impl(args):
    hf = have_transformers()
    if args.impl == "hf" and not hf:
        raise SystemExit("--impl hf: transformers is not importable by " + sys.executable)
    impl = "hf" if args.impl == "hf" or (args.impl == "auto" and hf) else "torch"
    print(f"llama oracle: {'transformers LlamaForCausalLM' if impl == 'hf' else 'straight PyTorch'} "
          f"({sys.executable})", file=sys.stderr)
    return impl


def run_train(args):
    arrays, meta = load_safetensors(args.init)
    c = config_of(arrays, meta, args)
    data = ByteData(args.data, args.ctx)
    if pick_impl(args) == "hf":
        m = hf_model(c, arrays)
        P = dict(m.named_parameters())  # tied: embed_tokens and lm_head are one parameter, listed once

        def loss(idx, tgt):
            return F.cross_entropy(hf_logits(m, idx).reshape(-1, c.V), tgt.reshape(-1))

        train(P, data, args, c.H, c.L, loss=loss)
        out = {n: p.detach().numpy() for n, p in P.items()}
    else:
        P = {n: torch.tensor(arrays[n], dtype=torch.float32).requires_grad_(True) for n in param_names(c)}
        train(P, data, args, c.H, c.L, loss=lambda idx, tgt: loss_fn(P, idx, tgt, c))
        out = {n: p.detach().numpy() for n, p in P.items()}
    if args.save:
        save_safetensors(args.save, {n: out[n] for n in param_names(c)}, dict(meta))
    return 0


def run_make_hf(args):
    """DIR/untied and DIR/tied: two LlamaForCausalLM written by save_pretrained."""
    from transformers import LlamaForCausalLM
    for tied in (False, True):
        torch.manual_seed(args.seed)
        c = Cfg(args.vocab, args.dim, args.layers, args.heads, args.kv_heads, args.ffn_hidden,
                args.rope_theta or 10000.0, args.norm_eps or 1e-5, tied, args.max_ctx)
        m = LlamaForCausalLM(hf_config(c)).float()
        with torch.no_grad():  # norms off 1, so their weights matter in the comparison
            for n, p in m.named_parameters():
                if p.dim() == 1:
                    p.add_(0.1 * torch.randn_like(p))
        m.save_pretrained(os.path.join(args.make_hf, "tied" if tied else "untied"), safe_serialization=True)
    return 0


def run_eval(args):
    """One {"eval": target, "loss": x} line per target (one import of transformers for all)."""
    from transformers import LlamaForCausalLM
    data = ByteData(args.data, args.ctx)
    for target in args.eval:
        if os.path.isdir(target):
            m = LlamaForCausalLM.from_pretrained(target, torch_dtype=torch.float32)
            V = m.config.vocab_size
        else:  # a pipit checkpoint: transformers' model built from its metadata, its weights loaded by name
            arrays, meta = load_safetensors(target)
            c = config_of(arrays, meta, args)
            m, V = hf_model(c, arrays), c.V
        m.eval()
        total = 0.0
        with torch.no_grad():
            for k in range(args.batches):
                idx, tgt = data.sequences(k * args.micro_batch, args.micro_batch)
                total += F.cross_entropy(hf_logits(m, idx).reshape(-1, V), tgt.reshape(-1)).item()
        print(json.dumps({"eval": target, "loss": float("%.9g" % (total / args.batches))}), flush=True)
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_train_args(ap)
    ap.add_argument("--make-hf")
    ap.add_argument("--eval", nargs="+")
    ap.add_argument("--batches", type=int, default=1)
    ap.add_argument("--kv-heads", type=int, default=0)
    ap.add_argument("--rope-theta", type=float, default=0.0)
    ap.add_argument("--norm-eps", type=float, default=0.0)
    ap.add_argument("--vocab", type=int)
    ap.add_argument("--dim", type=int)
    ap.add_argument("--layers", type=int)
    ap.add_argument("--ffn-hidden", type=int)
    ap.add_argument("--max-ctx", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--impl", choices=["auto", "hf", "torch"], default="auto")
    args = ap.parse_args(argv)
    torch.set_num_threads(max(1, args.threads))
    if args.selftest:
        return selftest()
    if args.make_hf:
        return run_make_hf(args)
    if args.eval:
        return run_eval(args)
    for req in ("init", "data", "ctx"):
        if getattr(args, req) is None:
            ap.error(f"--{req} is required")
    return run_train(args)


if __name__ == "__main__":
    sys.exit(main())
