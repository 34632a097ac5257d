"""Llama (Hugging Face LlamaForCausalLM) sizes, parameter names and shapes,
and Hugging Face's init, numpy only.

Shared by the PyTorch oracle (tests/llama_torch.py) and the benchmark peers
in bench/ (which may run in an interpreter without torch, e.g. JAX's).
"""

import numpy as np


class Cfg:
    """The sizes and settings of one model: vocab V, width C, layers L,
    heads H, key/value heads KV, MLP width F, RoPE theta, RMSNorm eps, a head
    tied to the embedding or not, max positions."""

    def __init__(self, V, C, L, H, KV, Fh, theta=10000.0, eps=1e-5, tied=False, max_ctx=4096):
        self.V, self.C, self.L, self.H, self.KV, self.F = V, C, L, H, KV, Fh
        self.theta, self.eps, self.tied, self.max_ctx = theta, eps, tied, max_ctx
        self.D = C // H
        self.scaling = None  # rope_type "llama3": (factor, low_freq_factor, high_freq_factor, original max positions)


def param_shapes(c):
    """name -> shape, in LlamaForCausalLM's order; nn.Linear weights [out, in]."""
    kvd = c.KV * c.D
    s = {"model.embed_tokens.weight": (c.V, c.C)}
    for i in range(c.L):
        p = f"model.layers.{i}."
        s.update({p + "self_attn.q_proj.weight": (c.C, c.C), p + "self_attn.k_proj.weight": (kvd, c.C),
                  p + "self_attn.v_proj.weight": (kvd, c.C), p + "self_attn.o_proj.weight": (c.C, c.C),
                  p + "mlp.gate_proj.weight": (c.F, c.C), p + "mlp.up_proj.weight": (c.F, c.C),
                  p + "mlp.down_proj.weight": (c.C, c.F), p + "input_layernorm.weight": (c.C,),
                  p + "post_attention_layernorm.weight": (c.C,)})
    s["model.norm.weight"] = (c.C,)
    if not c.tied:
        s["lm_head.weight"] = (c.V, c.C)
    return s


def param_names(c):
    return list(param_shapes(c))


def init_params(c, seed=0):
    """Hugging Face's init: every matrix N(0, 0.02), RMSNorm weights 1 (float32)."""
    rng = np.random.default_rng(seed)
    return {n: np.ones(s, np.float32) if len(s) == 1 else (0.02 * rng.standard_normal(s)).astype(np.float32)
            for n, s in param_shapes(c).items()}


def flops_params(c):
    """Params that multiply activations (an untied embedding is only gathered)."""
    n = sum(int(np.prod(s)) for s in param_shapes(c).values())
    return n - (0 if c.tied else c.V * c.C)
