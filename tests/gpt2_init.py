"""GPT-2 parameter names and GPT-2 style random init, numpy only.

Shared by the PyTorch oracle (tests/gpt2_torch.py) and the benchmark peers
in bench/ (which may run in an interpreter without torch, e.g. JAX's).
"""

import math

import numpy as np


def param_names(L):
    names = ["wte.weight", "wpe.weight"]
    for i in range(L):
        p = f"h.{i}."
        names += [p + "ln_1.weight", p + "ln_1.bias",
                  p + "attn.c_attn.weight", p + "attn.c_attn.bias",
                  p + "attn.c_proj.weight", p + "attn.c_proj.bias",
                  p + "ln_2.weight", p + "ln_2.bias",
                  p + "mlp.c_fc.weight", p + "mlp.c_fc.bias",
                  p + "mlp.c_proj.weight", p + "mlp.c_proj.bias"]
    names += ["ln_f.weight", "ln_f.bias"]
    return names


def init_params(V, maxT, C, L, seed=0):
    """GPT-2 style init (numpy): normal(0, .02), c_proj weights / sqrt(2L)."""
    rng = np.random.default_rng(seed)
    P = {}
    for n in param_names(L):
        if n.endswith("ln_1.weight") or n.endswith("ln_2.weight") or n == "ln_f.weight":
            shape = (C,)
            P[n] = np.ones(shape, np.float32)
            continue
        if n.endswith(".bias"):
            width = {"c_attn": 3 * C, "c_fc": 4 * C}.get(n.split(".")[-2], C)
            P[n] = np.zeros((width,), np.float32)
            continue
        shape = {"wte.weight": (V, C), "wpe.weight": (maxT, C)}.get(n)
        if shape is None:
            kind = n.split(".")[-2]
            shape = {"c_attn": (C, 3 * C), "c_fc": (C, 4 * C)}.get(kind, (C, C))
            if n.endswith("mlp.c_proj.weight"):
                shape = (4 * C, C)
        std = 0.02 / math.sqrt(2 * L) if n.endswith("c_proj.weight") else 0.02
        P[n] = rng.normal(0.0, std, size=shape).astype(np.float32)
    return P
