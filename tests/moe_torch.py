#!/usr/bin/python3
"""PyTorch oracle for pipit's Hugging Face mixtures of experts and Qwen2
(CPU, float32): transformers' MixtralForCausalLM, Qwen2MoeForCausalLM and
Qwen2ForCausalLM where the Python running this imports transformers (--impl
hf), otherwise a straight PyTorch implementation written from transformers'
modeling_mixtral.py / modeling_qwen2_moe.py / modeling_qwen2.py (--impl
torch): tests/llama_torch.py's Llama (RMSNorm, RoPE, GQA) with Qwen2's q/k/v
biases, and the sparse MoE block: router logits x Wg^T, softmax (float32),
top-k (torch.topk), the k weights renormalised (Mixtral; Qwen2-MoE only with
norm_topk_prob true), each token's output the weighted sum of its k experts'
SwiGLU outputs (every choice computed: dropless), plus (Qwen2-MoE) the shared
expert times sigmoid(x w_gate). The load-balancing term is transformers'
load_balancing_loss_func (E sum_e f_e P_e, f_e the fraction of tokens whose
top-k holds e, P_e the mean router probability), taken PER LAYER and summed
times router_aux_loss_coef, which is pipit's definition (docs/architecture.md
section 12); transformers' own training loss applies it once to all layers'
router logits concatenated, which differs when more than one layer is MoE:
--eval prints both.

Usage (any python with torch; transformers optional):
  moe_torch.py --make KIND DIR [--aux COEF] [--seed S]
      KIND mixtral | qwen2_moe | qwen2: a tiny model (vocab 256, dim 32, 2
      layers, 4 heads, 2 kv heads; MoE 4 experts top-2, expert width 24,
      Qwen2-MoE a shared expert of width 48) written as a save_pretrained
      folder (transformers), or the same files by hand (config.json as
      save_pretrained writes the keys pipit reads, model.safetensors);
      --aux COEF > 0 sets output_router_logits with router_aux_loss_coef COEF;
      --no-norm-topk: Qwen2-MoE's norm_topk_prob false (its default).
  moe_torch.py --eval DIR... --data FILE --ctx T --micro-batch B --batches K
      per folder one {"eval": DIR, "loss": x, "ce": .., "aux_layers": ..,
      "aux_transformers": ..} line over sequences 0 .. K*B-1: loss = the mean
      cross-entropy ce plus (when the config asks for router logits) coef x
      the per-layer balance terms summed (aux_layers, pipit's definition);
      aux_transformers is transformers' own term (all layers concatenated).
      With transformers, from_pretrained must
      report no missing, unexpected or mismatched weights.
  moe_torch.py --train DIR --data FILE --ctx T --micro-batch B --microbatches M
      --steps N --lr X [--weight-decay X --clip X] --json --save OUT
      tests/gpt2_torch.py's training loop on the folder's model.
  moe_torch.py --selftest   straight model = transformers' (when importable)
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
from llama_torch import rms_norm, rope_cos_sin, rotate_half  # noqa: E402

V, C, L, H, KV, FF, E, K = 256, 32, 2, 4, 2, 24, 4, 2


def have_transformers():
    try:
        import transformers  # noqa: F401
        return True
    except Exception:
        return False


def make_config(kind, aux, norm_topk=True):
    """The config.json dict of a tiny model of this kind (transformers' keys)."""
    c = {"vocab_size": V, "hidden_size": C, "num_hidden_layers": L, "num_attention_heads": H,
         "num_key_value_heads": KV, "max_position_embeddings": 64, "rms_norm_eps": 1e-6, "rope_theta": 500.0,
         "tie_word_embeddings": False, "hidden_act": "silu", "attention_dropout": 0.0, "torch_dtype": "float32"}
    if kind == "qwen2":
        c.update(model_type="qwen2", architectures=["Qwen2ForCausalLM"], intermediate_size=FF,
                 use_sliding_window=False)
    elif kind == "mixtral":
        c.update(model_type="mixtral", architectures=["MixtralForCausalLM"], intermediate_size=FF,
                 num_local_experts=E, num_experts_per_tok=K, sliding_window=None, router_jitter_noise=0.0)
    elif kind == "qwen2_moe":
        c.update(model_type="qwen2_moe", architectures=["Qwen2MoeForCausalLM"], intermediate_size=FF,
                 moe_intermediate_size=FF, shared_expert_intermediate_size=2 * FF, num_experts=E,
                 num_experts_per_tok=K, norm_topk_prob=norm_topk, decoder_sparse_step=1, mlp_only_layers=[],
                 use_sliding_window=False)
    else:
        raise SystemExit(f"unknown kind {kind}")
    if kind != "qwen2":
        c.update(output_router_logits=aux > 0, router_aux_loss_coef=aux if aux > 0 else 0.001)
    return c


def shapes(c):
    kind = c["model_type"]
    D = C // H
    s = {"model.embed_tokens.weight": (V, C), "model.norm.weight": (C,), "lm_head.weight": (V, C)}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        s[p + "input_layernorm.weight"] = (C,)
        s[p + "post_attention_layernorm.weight"] = (C,)
        s[p + "self_attn.q_proj.weight"] = (C, C)
        s[p + "self_attn.k_proj.weight"] = (KV * D, C)
        s[p + "self_attn.v_proj.weight"] = (KV * D, C)
        s[p + "self_attn.o_proj.weight"] = (C, C)
        if kind in ("qwen2", "qwen2_moe"):
            s[p + "self_attn.q_proj.bias"] = (C,)
            s[p + "self_attn.k_proj.bias"] = (KV * D,)
            s[p + "self_attn.v_proj.bias"] = (KV * D,)
        if kind == "qwen2":
            s[p + "mlp.gate_proj.weight"] = (FF, C)
            s[p + "mlp.up_proj.weight"] = (FF, C)
            s[p + "mlp.down_proj.weight"] = (C, FF)
        elif kind == "mixtral":
            s[p + "block_sparse_moe.gate.weight"] = (E, C)
            for e in range(E):
                q = p + f"block_sparse_moe.experts.{e}."
                s[q + "w1.weight"], s[q + "w3.weight"], s[q + "w2.weight"] = (FF, C), (FF, C), (C, FF)
        else:
            s[p + "mlp.gate.weight"] = (E, C)
            for e in range(E):
                q = p + f"mlp.experts.{e}."
                s[q + "gate_proj.weight"], s[q + "up_proj.weight"], s[q + "down_proj.weight"] = (FF, C), (FF, C), (C, FF)
            S = c["shared_expert_intermediate_size"]
            s[p + "mlp.shared_expert.gate_proj.weight"] = (S, C)
            s[p + "mlp.shared_expert.up_proj.weight"] = (S, C)
            s[p + "mlp.shared_expert.down_proj.weight"] = (C, S)
            s[p + "mlp.shared_expert_gate.weight"] = (1, C)
    return s


# ------------------------------------------------------------ straight model

def swiglu(x, wg, wu, wd):
    return (F.silu(x @ wg.t()) * (x @ wu.t())) @ wd.t()


def attention(x, P, p, c):
    B, T, _ = x.shape
    D = C // H
    bias = c["model_type"] in ("qwen2", "qwen2_moe")

    def proj(n, heads):
        y = x @ P[p + f"self_attn.{n}_proj.weight"].t()
        if bias:
            y = y + P[p + f"self_attn.{n}_proj.bias"]
        return y.view(B, T, heads, D).transpose(1, 2)

    q, k, v = proj("q", H), proj("k", KV), proj("v", KV)
    cos, sin = rope_cos_sin(T, D, c["rope_theta"], x.dtype)
    q = q * cos + rotate_half(q) * sin
    k = k * cos + rotate_half(k) * sin
    k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
    att = (q @ k.transpose(2, 3)) / math.sqrt(D)
    att = att.masked_fill(~torch.ones(T, T, dtype=torch.bool).tril(), float("-inf")).softmax(-1)
    return (att @ v).transpose(1, 2).reshape(B, T, C) @ P[p + "self_attn.o_proj.weight"].t()


def moe(x, P, p, c):
    """The sparse block on x [N, C]: (output [N, C], router logits [N, E])."""
    mix = c["model_type"] == "mixtral"
    pre = p + ("block_sparse_moe." if mix else "mlp.")
    logits = x @ P[pre + "gate.weight"].t()
    probs = torch.softmax(logits, dim=-1, dtype=torch.float)
    w, idx = torch.topk(probs, c["num_experts_per_tok"], dim=-1)
    if mix or c.get("norm_topk_prob", False):  # Qwen2MoeConfig's default: false, the probabilities as they are
        w = w / w.sum(dim=-1, keepdim=True)
    names = ("w1", "w3", "w2") if mix else ("gate_proj", "up_proj", "down_proj")
    Y = torch.stack([swiglu(x, *(P[pre + f"experts.{e}.{n}.weight"] for n in names))
                     for e in range(P[pre + "gate.weight"].shape[0])])  # every expert on every token: [E, N, C]
    rows = torch.arange(x.shape[0])
    out = sum(w[:, j, None] * Y[idx[:, j], rows] for j in range(idx.shape[1]))
    if not mix:
        sh = swiglu(x, *(P[p + f"mlp.shared_expert.{n}.weight"] for n in names))
        out = out + torch.sigmoid(x @ P[p + "mlp.shared_expert_gate.weight"].t()) * sh
    return out, logits


def straight_forward(P, idx, c):
    """(logits [B, T, V], per-layer router logits)."""
    x = P["model.embed_tokens.weight"][idx]
    B, T, _ = x.shape
    eps, routers = c["rms_norm_eps"], []
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        x = x + attention(rms_norm(x, P[p + "input_layernorm.weight"], eps), P, p, c)
        h = rms_norm(x, P[p + "post_attention_layernorm.weight"], eps)
        if c["model_type"] == "qwen2":
            x = x + swiglu(h, *(P[p + f"mlp.{n}.weight"] for n in ("gate_proj", "up_proj", "down_proj")))
        else:
            y, r = moe(h.reshape(B * T, C), P, p, c)
            x = x + y.reshape(B, T, C)
            routers.append(r)
    x = rms_norm(x, P["model.norm.weight"], eps)
    return x @ P["lm_head.weight"].t(), routers


def balance(logits, E_, k):
    """transformers' load_balancing_loss_func of one layer's router logits."""
    probs = torch.softmax(logits, dim=-1)
    _, sel = torch.topk(probs, k, dim=-1)
    mask = F.one_hot(sel, E_).float()  # [N, k, E]
    return torch.sum(mask.mean(0) * probs.mean(0).unsqueeze(0)) * E_


# --------------------------------------------------------- transformers' own

def hf_class(c):
    import transformers
    return getattr(transformers, c["architectures"][0])


def hf_forward(m, idx, c):
    out = m(input_ids=idx, use_cache=False, output_router_logits=c["model_type"] != "qwen2")
    return out.logits, list(out.router_logits) if c["model_type"] != "qwen2" else []


def losses(logits, routers, tgt, c):
    """(cross-entropy + coef x sum of per-layer balance terms, transformers' global balance term)."""
    ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))
    if not c.get("output_router_logits"):
        return ce, 0.0
    E_, k, coef = routers[0].shape[1], c["num_experts_per_tok"], c["router_aux_loss_coef"]
    per = sum(balance(r, E_, k) for r in routers)
    glob = balance(torch.cat(routers, 0), E_, k)
    return ce + coef * per, float(coef * glob)


# ------------------------------------------------------------------ commands

def load_folder(d):
    c = json.load(open(os.path.join(d, "config.json")))
    arrays, _ = load_safetensors(os.path.join(d, "model.safetensors"))
    return c, arrays


def pick_impl(args):
    hf = have_transformers()
    if args.impl == "hf" and not hf:
        raise SystemExit("--impl hf: transformers is not importable by " + sys.executable)
    impl = "hf" if args.impl == "hf" or (args.impl == "auto" and hf) else "torch"
    print(f"moe oracle: {'transformers' if impl == 'hf' else 'straight PyTorch'} ({sys.executable})", file=sys.stderr)
    return impl


def model_of(d, impl):
    """(forward(idx) -> (logits, routers), params dict, config)."""
    c, arrays = load_folder(d)
    if impl == "hf":
        m, info = hf_class(c).from_pretrained(d, torch_dtype=torch.float32, output_loading_info=True)
        bad = {k: v for k, v in info.items() if v}
        if bad:
            raise SystemExit(f"{d}: from_pretrained reports {bad}")
        m.train()  # no dropout (attention_dropout 0, no router jitter): train == eval numerics
        return (lambda idx: hf_forward(m, idx, c)), dict(m.named_parameters()), c
    want = shapes(c)
    if set(want) != set(arrays):
        raise SystemExit(f"{d}: tensors differ: missing {sorted(set(want) - set(arrays))[:4]} "
                         f"extra {sorted(set(arrays) - set(want))[:4]}")
    P = {n: torch.tensor(arrays[n], dtype=torch.float32).requires_grad_(True) for n in want}
    return (lambda idx: straight_forward(P, idx, c)), P, c


def run_make(args):
    kind, d = args.make
    c = make_config(kind, args.aux, not args.no_norm_topk)
    os.makedirs(d, exist_ok=True)
    torch.manual_seed(args.seed)
    if have_transformers() and args.impl != "torch":
        cls = hf_class(c)
        cfg = cls.config_class(**{k: v for k, v in c.items() if k not in ("architectures", "model_type", "torch_dtype")})
        m = cls(cfg).float()
        with torch.no_grad():  # norms and biases off their init, so that they matter
            for n, p in m.named_parameters():
                if p.dim() == 1:
                    p.add_(0.1 * torch.randn_like(p))
        m.save_pretrained(d, safe_serialization=True)
        return 0
    arrays = {}
    for n, s in shapes(c).items():
        t = torch.randn(s) * 0.02 if len(s) == 2 else (1.0 if n.endswith("norm.weight") else 0.0) + 0.1 * torch.randn(s)
        arrays[n] = t.numpy().astype(np.float32)
    save_safetensors(os.path.join(d, "model.safetensors"), arrays, {"format": "pt"})
    json.dump(c, open(os.path.join(d, "config.json"), "w"), indent=2)
    return 0


def run_eval(args):
    impl = pick_impl(args)
    data = ByteData(args.data, args.ctx)
    for d in args.eval:
        fwd, _, c = model_of(d, impl)
        tot, ces, glob = 0.0, 0.0, 0.0
        with torch.no_grad():
            for k in range(args.batches):
                idx, tgt = data.sequences(k * args.micro_batch, args.micro_batch)
                logits, routers = fwd(idx)
                l, g = losses(logits, routers, tgt, c)
                ce = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1)).item()
                tot, ces, glob = tot + l.item(), ces + ce, glob + g
        n = args.batches
        # loss: pipit's definition (cross-entropy + coef x the per-layer terms summed); transformers' own
        # training loss is ce + aux_transformers (one term over all layers' router logits concatenated)
        print(json.dumps({"eval": d, "loss": float("%.9g" % (tot / n)), "ce": float("%.9g" % (ces / n)),
                          "aux_layers": float("%.9g" % ((tot - ces) / n)),
                          "aux_transformers": float("%.9g" % (glob / n))}), flush=True)
    return 0


def run_train(args):
    impl = pick_impl(args)
    fwd, P, c = model_of(args.train, impl)
    data = ByteData(args.data, args.ctx)

    def loss(idx, tgt):
        logits, routers = fwd(idx)
        return losses(logits, routers, tgt, c)[0]

    train(P, data, args, H, c["num_hidden_layers"], loss=loss)
    if args.save:
        save_safetensors(args.save, {n: p.detach().numpy() for n, p in P.items()}, {"format": "pt"})
    return 0


def selftest(args):
    if not have_transformers():
        print("selftest: transformers not importable: straight model only")
        return 0
    import tempfile
    bad = 0
    torch.manual_seed(0)
    idx = torch.randint(0, V, (2, 12))
    for kind in ("mixtral", "qwen2_moe", "qwen2"):
        with tempfile.TemporaryDirectory() as d:
            run_make(argparse.Namespace(make=(kind, d), aux=0.02, seed=3, impl="hf", no_norm_topk=kind == "qwen2_moe"))
            fh, _, c = model_of(d, "hf")
            fs, _, _ = model_of(d, "torch")
            with torch.no_grad():
                (a, ra), (b, rb) = fh(idx), fs(idx)
            diff = (a - b).abs().max().item()
            rd = max([(x - y).abs().max().item() for x, y in zip(ra, rb)] or [0.0])
            ok = diff < 1e-5 and rd < 1e-5
            print(f"selftest {kind}: straight vs transformers logits max diff {diff:.2e}, router {rd:.2e} "
                  f"{'ok' if ok else 'MISMATCH'}")
            bad += not ok
    return 1 if bad else 0


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_train_args(ap)
    ap.add_argument("--make", nargs=2, metavar=("KIND", "DIR"))
    ap.add_argument("--aux", type=float, default=0.0)
    ap.add_argument("--no-norm-topk", action="store_true", help="qwen2_moe: norm_topk_prob false")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--eval", nargs="+")
    ap.add_argument("--train")
    ap.add_argument("--batches", type=int, default=1)
    ap.add_argument("--impl", choices=["auto", "hf", "torch"], default="auto")
    args = ap.parse_args(argv)
    torch.set_num_threads(max(1, args.threads))
    if args.selftest:
        return selftest(args)
    if args.make:
        return run_make(args)
    if args.eval:
        return run_eval(args)
    if args.train:
        return run_train(args)
    ap.error("one of --selftest --make --eval --train")


if __name__ == "__main__":
    sys.exit(main())
