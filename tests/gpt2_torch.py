#!/usr/bin/python3
"""Independent PyTorch oracle for pipit's GPT-2 training (CPU, float32).

Implements the Hugging Face GPT-2 architecture (pre-LN blocks, Conv1D weight
layout [in, out], GELU tanh, tied wte output head, LayerNorm eps 1e-5) and the
training loop pipit runs: byte-level data in sequential order, M microbatches
of B sequences per step with gradients accumulated as sum(grad(loss_m) / M),
optional global-norm clipping, then one AdamW (decoupled weight decay on 2-D
params only, two param groups) or plain SGD update.  Safetensors files are
read and written with json + numpy only.

Usage (run with Debian's /usr/bin/python3, which has torch):
  gpt2_torch.py --init init.safetensors --data FILE --ctx T --micro-batch B \
      --microbatches M --steps N --lr X [--weight-decay X --beta1 X --beta2 X
      --eps X --clip X --optimizer adamw|sgd --heads H --threads N]
      [--save OUT.safetensors] [--json] [--autocast bf16] [--linear add|fused]
  gpt2_torch.py --selftest      # checks the model against a naive einsum
                                # version, the optimizer and safetensors I/O

--autocast bf16 runs each forward under torch.autocast("cpu", bfloat16),
PyTorch's own mixed precision (tests/test_bf16_train.sh compares pipit's
--dtype bf16 with it).  The loss reported for step s is computed with the
parameters before that step's update.  With --json one line per step: {"step": s, "loss": %.9g, ...}.
"""

import argparse
import json
import math
import struct
import sys

import numpy as np
import torch
import torch.nn.functional as F

from gpt2_init import init_params, param_names  # noqa: F401 (numpy-only, shared with bench/)

LN_EPS = 1e-5
# How a biased linear layer is written: "add" (x @ W + b: under autocast the
# bf16 product plus the fp32 bias promotes to fp32, so the layer's output,
# and GELU after it, stay fp32) or "fused" (F.linear, what nn.Linear runs:
# under autocast the bias joins the bf16 matmul and the output is bf16).
# --linear sets it; "add" is what the oracle tests were written against.
LINEAR = "add"


def linear(x, W, b):
    """x @ W + b with W [in, out], as LINEAR says."""
    return F.linear(x, W.t(), b) if LINEAR == "fused" else x @ W + b

# ----------------------------------------------------------------- safetensors

_NP_DTYPES = {"F32": np.float32, "F64": np.float64, "F16": np.float16,
              "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8,
              "U8": np.uint8}


def load_safetensors(path):
    """Returns (dict name -> float32 numpy array, metadata dict)."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    (hlen,) = struct.unpack("<Q", raw[:8])
    if 8 + hlen > len(raw):
        raise ValueError(f"{path}: header length {hlen} exceeds file size")
    header = json.loads(raw[8:8 + hlen].decode("utf-8"))
    base = 8 + hlen
    meta = header.pop("__metadata__", None) or {}
    # pipit's checksums describe the file as written; a file saved from what
    # is read here is another one
    meta = {k: v for k, v in meta.items() if not k.startswith("crc32c")}
    tensors = {}
    for name, info in header.items():
        dt = info["dtype"]
        shape = tuple(int(s) for s in info["shape"])
        b, e = info["data_offsets"]
        buf = raw[base + b: base + e]
        if dt == "BF16":
            u = np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16
            arr = u.view(np.float32)
        elif dt in _NP_DTYPES:
            arr = np.frombuffer(buf, dtype=np.dtype(_NP_DTYPES[dt]).newbyteorder("<"))
        else:
            raise ValueError(f"{path}: tensor {name}: unsupported dtype {dt}")
        if arr.size != int(np.prod(shape, dtype=np.int64)):
            raise ValueError(f"{path}: tensor {name}: {arr.size} elements for shape {shape}")
        tensors[name] = arr.reshape(shape).astype(np.float32)
    return tensors, meta


def save_safetensors(path, tensors, metadata=None):
    """tensors: dict name -> array-like (written as F32, in dict order)."""
    header = {}
    blobs = []
    off = 0
    for name, t in tensors.items():
        a = np.ascontiguousarray(np.asarray(t, dtype="<f4"))
        nb = a.nbytes
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + nb]}
        blobs.append(a.tobytes())
        off += nb
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * ((8 - len(hjson) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for blob in blobs:
            f.write(blob)


# ----------------------------------------------------------------------- model

def num_layers(params):
    L = 0
    while f"h.{L}.ln_1.weight" in params:
        L += 1
    return L


def check_shapes(params, heads):
    """Validates names and shapes; returns (V, maxT, C, L)."""
    L = num_layers(params)
    expected = set(param_names(L))
    got = set(params)
    if expected != got:
        missing = sorted(expected - got)
        extra = sorted(got - expected)
        raise ValueError(f"parameter names differ from GPT-2: missing {missing[:5]}, extra {extra[:5]}")
    V, C = params["wte.weight"].shape
    maxT = params["wpe.weight"].shape[0]
    want = {"wpe.weight": (maxT, C), "ln_f.weight": (C,), "ln_f.bias": (C,)}
    for i in range(L):
        p = f"h.{i}."
        want.update({p + "ln_1.weight": (C,), p + "ln_1.bias": (C,),
                     p + "attn.c_attn.weight": (C, 3 * C), p + "attn.c_attn.bias": (3 * C,),
                     p + "attn.c_proj.weight": (C, C), p + "attn.c_proj.bias": (C,),
                     p + "ln_2.weight": (C,), p + "ln_2.bias": (C,),
                     p + "mlp.c_fc.weight": (C, 4 * C), p + "mlp.c_fc.bias": (4 * C,),
                     p + "mlp.c_proj.weight": (4 * C, C), p + "mlp.c_proj.bias": (C,)})
    for n, s in want.items():
        if tuple(params[n].shape) != s:
            raise ValueError(f"{n}: shape {tuple(params[n].shape)}, expected {s}")
    if heads <= 0 or C % heads:
        raise ValueError(f"heads={heads} must divide dim={C}")
    return V, maxT, C, L


def attention(x, P, p, H):
    """Causal multi-head self-attention of block prefix p; x is [B,T,C]."""
    B, T, C = x.shape
    qkv = linear(x, P[p + "attn.c_attn.weight"], P[p + "attn.c_attn.bias"])
    q, k, v = qkv.split(C, dim=2)
    D = C // H
    q = q.view(B, T, H, D).transpose(1, 2)
    k = k.view(B, T, H, D).transpose(1, 2)
    v = v.view(B, T, H, D).transpose(1, 2)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D))
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    att = att.masked_fill(~mask, float("-inf"))
    att = torch.softmax(att, dim=-1)
    y = (att @ v).transpose(1, 2).reshape(B, T, C)
    return linear(y, P[p + "attn.c_proj.weight"], P[p + "attn.c_proj.bias"])


def mlp(x, P, p):
    h = linear(x, P[p + "mlp.c_fc.weight"], P[p + "mlp.c_fc.bias"])
    h = F.gelu(h, approximate="tanh")
    return linear(h, P[p + "mlp.c_proj.weight"], P[p + "mlp.c_proj.bias"])


def block(x, P, i, H):
    p = f"h.{i}."
    C = x.shape[-1]
    x = x + attention(F.layer_norm(x, (C,), P[p + "ln_1.weight"], P[p + "ln_1.bias"], LN_EPS), P, p, H)
    x = x + mlp(F.layer_norm(x, (C,), P[p + "ln_2.weight"], P[p + "ln_2.bias"], LN_EPS), P, p)
    return x


def forward_logits(P, idx, H, L, block_fn=block):
    B, T = idx.shape
    C = P["wte.weight"].shape[1]
    x = P["wte.weight"][idx] + P["wpe.weight"][:T].unsqueeze(0)
    for i in range(L):
        x = block_fn(x, P, i, H)
    x = F.layer_norm(x, (C,), P["ln_f.weight"], P["ln_f.bias"], LN_EPS)
    return x @ P["wte.weight"].t()


def loss_fn(P, idx, tgt, H, L, block_fn=block):
    logits = forward_logits(P, idx, H, L, block_fn)
    V = logits.shape[-1]
    return F.cross_entropy(logits.reshape(-1, V), tgt.reshape(-1))


# ---- naive second formulation (for --selftest only) ----

def _naive_ln(x, w, b):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) / torch.sqrt(var + LN_EPS) * w + b


def _naive_gelu(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def naive_block(x, P, i, H):
    """Einsum formulation with explicit per-element causal loops-free masking."""
    p = f"h.{i}."
    B, T, C = x.shape
    D = C // H
    a = _naive_ln(x, P[p + "ln_1.weight"], P[p + "ln_1.bias"])
    W = P[p + "attn.c_attn.weight"]
    bqkv = P[p + "attn.c_attn.bias"]
    q = torch.einsum("btc,cd->btd", a, W[:, :C]) + bqkv[:C]
    k = torch.einsum("btc,cd->btd", a, W[:, C:2 * C]) + bqkv[C:2 * C]
    v = torch.einsum("btc,cd->btd", a, W[:, 2 * C:]) + bqkv[2 * C:]
    q = q.reshape(B, T, H, D)
    k = k.reshape(B, T, H, D)
    v = v.reshape(B, T, H, D)
    s = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(D)
    tri = torch.arange(T).view(T, 1) >= torch.arange(T).view(1, T)
    s = torch.where(tri, s, torch.full_like(s, -1e30))
    s = s - s.max(-1, keepdim=True).values
    e = torch.exp(s) * tri
    pr = e / e.sum(-1, keepdim=True)
    y = torch.einsum("bhts,bshd->bthd", pr, v).reshape(B, T, C)
    x = x + torch.einsum("btc,cd->btd", y, P[p + "attn.c_proj.weight"]) + P[p + "attn.c_proj.bias"]
    m = _naive_ln(x, P[p + "ln_2.weight"], P[p + "ln_2.bias"])
    h = _naive_gelu(torch.einsum("btc,cf->btf", m, P[p + "mlp.c_fc.weight"]) + P[p + "mlp.c_fc.bias"])
    x = x + torch.einsum("btf,fc->btc", h, P[p + "mlp.c_proj.weight"]) + P[p + "mlp.c_proj.bias"]
    return x


def naive_loss(P, idx, tgt, H, L):
    """Whole model with naive pieces: one-hot embedding, naive LN, manual CE."""
    B, T = idx.shape
    V, C = P["wte.weight"].shape
    onehot = F.one_hot(idx, V).to(P["wte.weight"].dtype)
    x = torch.einsum("btv,vc->btc", onehot, P["wte.weight"]) + P["wpe.weight"][:T]
    for i in range(L):
        x = naive_block(x, P, i, H)
    x = _naive_ln(x, P["ln_f.weight"], P["ln_f.bias"])
    logits = torch.einsum("btc,vc->btv", x, P["wte.weight"])
    mx = logits.max(-1, keepdim=True).values
    lse = (logits - mx).exp().sum(-1).log() + mx.squeeze(-1)
    picked = (logits * F.one_hot(tgt, V).to(logits.dtype)).sum(-1)
    return (lse - picked).mean()


# ------------------------------------------------------------------------ data

class ByteData:
    """Byte tokens; sequence k is window (k mod W), window w = bytes [w*T, w*T+T]."""

    def __init__(self, path, T):
        with open(path, "rb") as f:
            self.buf = np.frombuffer(f.read(), dtype=np.uint8)
        self.T = T
        self.W = (len(self.buf) - 1) // T
        if self.W < 1:
            raise ValueError(f"{path}: {len(self.buf)} bytes is too short for ctx {T}")

    def sequences(self, first, count):
        T = self.T
        rows = []
        for k in range(first, first + count):
            w = k % self.W
            rows.append(self.buf[w * T: w * T + T + 1].astype(np.int64))
        seq = torch.from_numpy(np.stack(rows))
        return seq[:, :T].contiguous(), seq[:, 1:].contiguous()


# ---------------------------------------------------------------------- train

def make_optimizer(P, args):
    params = list(P.values())
    if args.optimizer == "sgd":
        return torch.optim.SGD(params, lr=args.lr, momentum=0.0, weight_decay=0.0)
    decay = [p for p in params if p.dim() >= 2]
    nodecay = [p for p in params if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": args.weight_decay},
              {"params": nodecay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=args.lr, betas=(args.beta1, args.beta2), eps=args.eps)


def train(P, data, args, H, L, out=None, loss=None):
    """Runs args.steps steps; returns the list of per-step losses. loss(idx,
    tgt) is the model's loss (default: GPT-2's over P with H heads, L layers)."""
    out = out or sys.stdout
    loss = loss or (lambda idx, tgt: loss_fn(P, idx, tgt, H, L))
    opt = make_optimizer(P, args)
    B, M = args.micro_batch, args.microbatches
    losses = []
    autocast = getattr(args, "autocast", "off") == "bf16"
    for s in range(args.steps):
        opt.zero_grad(set_to_none=False)
        total = 0.0
        for m in range(M):
            idx, tgt = data.sequences(s * B * M + m * B, B)
            # --autocast bf16: PyTorch's mixed precision on CPU (fp32 params,
            # bf16 matmuls; layer_norm and cross_entropy autocast to fp32)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                lm = loss(idx, tgt)
            (lm / M).backward()
            total += float(lm.item())
        step_loss = total / M
        params = list(P.values())
        gnorm = math.sqrt(sum(float(p.grad.double().pow(2).sum()) for p in params))
        if args.clip > 0:
            torch.nn.utils.clip_grad_norm_(params, args.clip)
        opt.step()
        losses.append(step_loss)
        if args.json:
            print(json.dumps({"step": s, "loss": float("%.9g" % step_loss),
                              "grad_norm": float("%.9g" % gnorm)}), file=out, flush=True)
        else:
            print(f"step {s}: loss {step_loss:.6f} grad_norm {gnorm:.6f}", file=out, flush=True)
    return losses


# -------------------------------------------------------------------- selftest

def selftest():
    torch.manual_seed(0)
    failures = 0

    def check(what, ok, detail=""):
        nonlocal failures
        print(f"{'ok  ' if ok else 'FAIL'} {what} {detail}")
        failures += 0 if ok else 1

    V, maxT, C, L, H, B, T = 37, 12, 16, 2, 4, 3, 9
    P64 = {n: torch.tensor(a, dtype=torch.float64) for n, a in init_params(V, maxT, C, L, seed=3).items()}
    for n in P64:  # perturb LN and biases so they are exercised too
        P64[n] = P64[n] + 0.1 * torch.randn_like(P64[n])
        P64[n].requires_grad_(True)
    idx = torch.randint(0, V, (B, T))
    tgt = torch.randint(0, V, (B, T))

    la = loss_fn(P64, idx, tgt, H, L)
    ga = torch.autograd.grad(la, list(P64.values()))
    lb = naive_loss(P64, idx, tgt, H, L)
    gb = torch.autograd.grad(lb, list(P64.values()))
    check("loss vs naive einsum", abs(la.item() - lb.item()) < 1e-10, f"{la.item():.12f} {lb.item():.12f}")
    gerr = max(float((a - b).abs().max()) for a, b in zip(ga, gb))
    check("grads vs naive einsum", gerr < 1e-10, f"max diff {gerr:.3e}")
    global LINEAR  # the F.linear form (--linear fused) is the same function
    LINEAR = "fused"
    lf = loss_fn(P64, idx, tgt, H, L)
    LINEAR = "add"
    check("--linear fused vs add", abs(lf.item() - la.item()) < 1e-12, f"{lf.item():.15f} {la.item():.15f}")

    # Causality: changing a later token must not change earlier logits.
    with torch.no_grad():
        lo1 = forward_logits(P64, idx, H, L)
        idx2 = idx.clone()
        idx2[:, -1] = (idx2[:, -1] + 1) % V
        lo2 = forward_logits(P64, idx2, H, L)
        d = float((lo1[:, :-1] - lo2[:, :-1]).abs().max())
    check("causal mask", d == 0.0, f"max diff {d:.3e}")

    # Fully manual cross-entropy + logits against the head.
    with torch.no_grad():
        lp = torch.log_softmax(lo1, dim=-1)
        ce = -lp.gather(-1, tgt.unsqueeze(-1)).mean()
    check("cross-entropy", abs(ce.item() - la.item()) < 1e-12)

    # Gradient check of the float64 model by finite differences (a few coords).
    name = "h.1.attn.c_attn.weight"
    g = ga[list(P64).index(name)]
    worst = 0.0
    with torch.no_grad():
        for (r, c) in [(0, 0), (3, 17), (15, 47)]:
            eps = 1e-6
            P64[name][r, c] += eps
            lp_ = loss_fn(P64, idx, tgt, H, L).item()
            P64[name][r, c] -= 2 * eps
            lm_ = loss_fn(P64, idx, tgt, H, L).item()
            P64[name][r, c] += eps
            worst = max(worst, abs((lp_ - lm_) / (2 * eps) - g[r, c].item()))
    check("finite differences", worst < 1e-7, f"max diff {worst:.3e}")

    # AdamW: one torch step vs a hand-written update (decay on 2-D only).
    class A:
        pass
    args = A()
    args.optimizer, args.lr, args.beta1, args.beta2, args.eps, args.weight_decay = "adamw", 1e-2, 0.9, 0.95, 1e-8, 0.1
    P32 = {n: torch.tensor(a).requires_grad_(True) for n, a in init_params(V, maxT, C, L, seed=5).items()}
    opt = make_optimizer(P32, args)
    before = {n: p.detach().clone().double() for n, p in P32.items()}
    ms = {n: torch.zeros_like(b) for n, b in before.items()}
    vs = {n: torch.zeros_like(b) for n, b in before.items()}
    worst = 0.0
    for t in range(1, 4):
        opt.zero_grad()
        loss_fn(P32, idx, tgt, H, L).backward()
        for n, p in P32.items():
            gg = p.grad.double()
            w = before[n]
            wd = args.weight_decay if p.dim() >= 2 else 0.0
            w = w * (1 - args.lr * wd)
            ms[n] = args.beta1 * ms[n] + (1 - args.beta1) * gg
            vs[n] = args.beta2 * vs[n] + (1 - args.beta2) * gg * gg
            mh = ms[n] / (1 - args.beta1 ** t)
            vh = vs[n] / (1 - args.beta2 ** t)
            before[n] = w - args.lr * mh / (vh.sqrt() + args.eps)
        opt.step()
        worst = max(worst, max(float((P32[n].double() - before[n]).abs().max()) for n in P32))
        before = {n: p.detach().clone().double() for n, p in P32.items()}
    check("AdamW vs manual update", worst < 1e-6, f"max diff {worst:.3e}")

    # Safetensors round trip, including metadata.
    import os
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "t.safetensors")
        src = init_params(V, maxT, C, L, seed=7)
        save_safetensors(path, src, {"heads": H})
        back, meta = load_safetensors(path)
        same = list(back) == list(src) and all(np.array_equal(back[n], src[n]) for n in src)
        check("safetensors round trip", same and meta.get("heads") == str(H))
        with open(path, "rb") as f:
            (hlen,) = struct.unpack("<Q", f.read(8))
        check("safetensors header aligned", hlen % 8 == 0)

    # Data windows.
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "data.bin")
        with open(path, "wb") as f:
            f.write(bytes(range(23)))
        bd = ByteData(path, 5)   # W = floor(22/5) = 4
        x, y = bd.sequences(3, 3)  # windows 3, 0, 1
        ok = bd.W == 4 and x[0].tolist() == [15, 16, 17, 18, 19] and y[0].tolist() == [16, 17, 18, 19, 20] \
            and x[1].tolist() == [0, 1, 2, 3, 4] and x[2].tolist() == [5, 6, 7, 8, 9]
        check("sequential byte windows", ok)

    print("selftest:", "PASS" if failures == 0 else f"{failures} FAILURES")
    return 0 if failures == 0 else 1


# ------------------------------------------------------------------------ main

def add_train_args(ap):
    """The flags of a training run (shared with llama_torch.py)."""
    ap.add_argument("--selftest", action="store_true")
    ap.add_argument("--init")
    ap.add_argument("--data")
    ap.add_argument("--ctx", type=int)
    ap.add_argument("--micro-batch", type=int, default=1)
    ap.add_argument("--microbatches", type=int, default=1)
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--weight-decay", type=float, default=0.0)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.95)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--clip", type=float, default=0.0, help="global grad-norm clip, 0 = off")
    ap.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
    ap.add_argument("--heads", type=int, default=0, help="default: __metadata__ 'heads'")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--save")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--linear", choices=["add", "fused"], default="add",
                    help="biased layers as x @ W + b (fp32 under autocast) or F.linear (bf16 under autocast, nn.Linear's)")
    ap.add_argument("--autocast", choices=["off", "bf16"], default="off",
                    help="bf16: torch.autocast on CPU around each microbatch's forward")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_train_args(ap)
    args = ap.parse_args(argv)
    global LINEAR
    LINEAR = args.linear

    torch.set_num_threads(max(1, args.threads))
    if args.selftest:
        return selftest()
    for req in ("init", "data", "ctx"):
        if getattr(args, req) is None:
            ap.error(f"--{req} is required")

    arrays, meta = load_safetensors(args.init)
    H = args.heads or int(meta.get("heads", 0))
    if H <= 0:
        ap.error("number of heads unknown: pass --heads or store __metadata__ 'heads'")
    V, maxT, C, L = check_shapes(arrays, H)
    if args.ctx > maxT:
        ap.error(f"--ctx {args.ctx} exceeds wpe rows {maxT}")
    if V < 256:
        ap.error(f"byte-level data needs vocab >= 256, wte has {V} rows")
    P = {n: torch.tensor(arrays[n], dtype=torch.float32).requires_grad_(True) for n in param_names(L)}
    data = ByteData(args.data, args.ctx)
    train(P, data, args, H, L)
    if args.save:
        out_meta = {k: v for k, v in meta.items()}
        out_meta["heads"] = str(H)
        save_safetensors(args.save, {n: p.detach().numpy() for n, p in P.items()}, out_meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
