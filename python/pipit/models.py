"""pipit's model builders (pipit_gpt2.h, pipit_llama.h) and the CLI's
presets, their keywords named as the CLI's flags: layers, heads, dim,
vocab, ctx, max_ctx, kv_heads, ffn_hidden, multiple_of,
ffn_dim_multiplier, norm_eps, rope_theta, tied, fused_head, micro_batch,
and a Llama's mixture of experts: experts, top_k, capacity_factor,
dropless, shared_experts, moe_every, router, aux_loss, balance_bias.

    m = pipit.models.preset("tiny")                  # pipit train --model tiny
    m = pipit.models.gpt2(layers=2, dim=64, heads=2)  # --arch gpt2 --layers 2 ...
    m = pipit.models.llama(layers=2, dim=64, heads=4, kv_heads=2, ffn_hidden=176)
    m = pipit.models.preset("moe-tiny")              # --model moe-tiny: 8 experts, top-2
"""
from ctypes import byref

from ._lib import C, S, InvalidError, check, lib

# The presets of tools/presets.c: arch, vocab, ctx, layers, heads, dim,
# micro_batch, steps, lr, kv_heads, ffn_hidden, tied, norm_eps, rope_theta
# (and for MoE presets: experts, top_k).
PRESETS = {
    "tiny": ("gpt2", 256, 64, 4, 4, 128, 8, 100, 1e-3, 0, 0, 0, 0, 0),
    "gpt2": ("gpt2", 50257, 1024, 12, 12, 768, 1, 100, 6e-4, 0, 0, 0, 0, 0),
    "gpt2-medium": ("gpt2", 50257, 1024, 24, 16, 1024, 1, 100, 3e-4, 0, 0, 0, 0, 0),
    "gpt2-large": ("gpt2", 50257, 1024, 36, 20, 1280, 1, 100, 2.5e-4, 0, 0, 0, 0, 0),
    "gpt2-xl": ("gpt2", 50257, 1024, 48, 25, 1600, 1, 100, 2e-4, 0, 0, 0, 0, 0),
    "llama-tiny": ("llama", 256, 64, 4, 4, 128, 8, 100, 1e-3, 2, 352, 0, 1e-5, 1e4),
    "llama-100m": ("llama", 50257, 1024, 10, 12, 768, 1, 100, 6e-4, 4, 2048, 1, 1e-5, 1e4),
    "moe-tiny": ("llama", 256, 64, 4, 4, 64, 8, 100, 1e-3, 2, 144, 0, 1e-5, 1e4, 8, 2),
    "moe-100m": ("llama", 50257, 1024, 8, 8, 512, 1, 100, 6e-4, 2, 768, 1, 1e-5, 1e4, 8, 2),
    "llama-50m": ("llama", 50257, 1024, 8, 8, 512, 1, 100, 6e-4, 2, 1536, 1, 1e-5, 1e4),
}


class Model:
    """A GPT-2 or Llama configuration (what `pipit train`'s model flags
    describe), with the preset's training defaults (steps, lr) when it
    came from one. build(graph, stages, tp) builds the training graph."""

    def __init__(self, arch, steps=None, lr=None, **fields):
        if arch not in ("gpt2", "llama"):
            raise InvalidError("unknown arch %r: expected gpt2 or llama" % (arch,), C.PIPIT_STATUS_INVALID)
        self.arch, self.steps, self.lr = arch, steps, lr
        self.fields = dict(fields)

    def __getattr__(self, k):
        f = self.__dict__.get("fields", {})
        if k in f:
            return f[k]
        raise AttributeError(k)

    def __repr__(self):
        return "Model(%r, %s)" % (self.arch, ", ".join("%s=%r" % kv for kv in sorted(self.fields.items())))

    @property
    def nfeeds(self):
        return 3 if self.arch == "gpt2" else 2

    def config(self, stages=1):
        """The C config struct (pipit_gpt2_config / pipit_llama_config)."""
        f = self.fields
        common = dict(vocab=f["vocab"], max_ctx=f.get("max_ctx") or f["ctx"], ctx=f["ctx"], layers=f["layers"],
                      heads=f["heads"], dim=f["dim"], batch=f["micro_batch"], stages=int(stages),
                      dtype=C.PIPIT_F32, fused_head=int(bool(f.get("fused_head", 0))))
        if self.arch == "gpt2":
            return S.pipit_gpt2_config(**common)
        c = S.pipit_llama_config(**common)
        c.kv_heads = f.get("kv_heads", 0)
        c.ffn_hidden = f.get("ffn_hidden", 0)
        c.multiple_of = f.get("multiple_of", 256)
        c.ffn_dim_multiplier = f.get("ffn_dim_multiplier", 0.0)
        c.norm_eps = f.get("norm_eps", 1e-5)
        c.rope_theta = f.get("rope_theta", 1e4)
        c.tied = int(bool(f.get("tied", 0)))
        E = f.get("experts", 0)
        if E:  # MoE, resolved as the CLI's model_config (tools/session.c): top-k 2, capacity factor 1.25
            dropless = int(bool(f.get("dropless", 0)))
            c.experts, c.top_k = E, f.get("top_k") or min(E, 2)
            c.capacity_factor = f.get("capacity_factor") or (0.0 if dropless else 1.25)
            c.dropless, c.shared_experts = dropless, f.get("shared_experts", 0)
            c.moe_every, c.router = f.get("moe_every", 0), int(f.get("router", "softmax") == "sigmoid")
            c.aux_loss = f.get("aux_loss", 0.0)
            c.route_bias = int(f.get("balance_bias", 0.0) > 0)  # the routing-only bias params
        return c

    def _fn(self, what):
        return getattr(lib, "pipit_%s_%s" % (self.arch, what))

    def check(self, stages=1):
        c = self.config(stages)
        check(self._fn("check")(byref(c)))

    def build(self, graph, stages=1):
        """Builds the loss on graph (pipit_*_build_logits) -> the loss Value."""
        c = self.config(stages)
        self.check(stages)
        return graph._val(self._fn("build_logits")(graph.ptr, byref(c), None))

    @property
    def moe(self):
        """A Llama with a mixture of experts."""
        return self.arch == "llama" and self.fields.get("experts", 0) > 0

    def build_moe(self, graph, stages=1):
        """An MoE Llama's loss with each MoE layer's router choices
        (pipit_llama_build_moe) -> (loss, [(layer, choices Value)]): the
        i32 [micro_batch x ctx, top_k] expert indices, outputs to request."""
        c = self.config(stages)
        self.check(stages)
        ch = (S.pipit_val * self.fields["layers"])()
        loss = graph._val(lib.pipit_llama_build_moe(graph.ptr, byref(c), None, ch))
        return loss, [(l, graph._val(ch[l])) for l in range(self.fields["layers"]) if ch[l].id >= 0]

    def init(self, program, seed=1, stages=1):
        c = self.config(stages)
        check(self._fn("init")(program.ptr, byref(c), int(seed)))

    def num_params(self):
        c = self.config()
        return self._fn("num_params")(byref(c))

    def flops_per_token(self):
        c = self.config()
        return self._fn("flops_per_token")(byref(c))

    def ffn_width(self):
        c = self.config()
        return self.fields.get("ffn_hidden") or lib.pipit_llama_ffn_hidden(byref(c))

    def meta(self):
        """The checkpoint metadata the CLI writes for the model (tools/model.c)."""
        f = self.fields
        m = [("model", self.arch)]
        for k in ("vocab", "ctx", "max_ctx", "layers", "heads", "dim"):
            v = f.get(k) or (f["ctx"] if k == "max_ctx" else 0)
            m.append((k, "%d" % v))
        if self.arch == "llama":
            m.append(("kv_heads", "%d" % (f.get("kv_heads") or f["heads"])))
            m.append(("ffn_hidden", "%d" % self.ffn_width()))
            m.append(("norm_eps", "%.17g" % f.get("norm_eps", 1e-5)))
            m.append(("rope_theta", "%.17g" % f.get("rope_theta", 1e4)))
            m.append(("tied", "%d" % int(bool(f.get("tied", 0)))))
            if f.get("experts"):  # MoE: every field as resolved (tools/model.c cli_model_meta_fill)
                c = self.config()
                m += [("experts", "%d" % c.experts), ("top_k", "%d" % c.top_k),
                      ("capacity_factor", "%.17g" % c.capacity_factor), ("dropless", "%d" % c.dropless),
                      ("shared_experts", "%d" % c.shared_experts), ("moe_every", "%d" % c.moe_every)]
                bb = f.get("balance_bias", 0.0)
                m += [("balance_bias", "%.17g" % bb)] if bb > 0 else []
                m += [("router", "sigmoid" if c.router else "softmax"), ("aux_loss", "%.17g" % c.aux_loss)]
            m.append(("rope_type", "default"))
        return m


def gpt2(vocab=256, ctx=64, layers=4, heads=4, dim=128, max_ctx=0, micro_batch=8, fused_head=False, steps=None,
         lr=None):
    """A GPT-2 (pipit_gpt2.h); the defaults are the `tiny` preset's."""
    return Model("gpt2", steps=steps, lr=lr, vocab=vocab, ctx=ctx, layers=layers, heads=heads, dim=dim,
                 max_ctx=max_ctx, micro_batch=micro_batch, fused_head=fused_head)


def llama(vocab=256, ctx=64, layers=4, heads=4, dim=128, kv_heads=0, ffn_hidden=0, multiple_of=256,
          ffn_dim_multiplier=0.0, norm_eps=1e-5, rope_theta=1e4, tied=False, max_ctx=0, micro_batch=8,
          fused_head=False, steps=None, lr=None, experts=0, top_k=0, capacity_factor=0.0, dropless=False,
          shared_experts=0, moe_every=0, router="softmax", aux_loss=0.0, balance_bias=0.0):
    """A Llama (pipit_llama.h). experts E >= 1 makes it a mixture of
    experts as `--experts E` (top_k 0: 2, at most E; capacity_factor 0:
    1.25 unless dropless; router "softmax" or "sigmoid"; balance_bias COEF >
    0: the auxiliary-loss-free balance, `--balance-bias COEF`: routing-only
    bias params that pipit.Trainer moves by COEF after every step); the
    other MoE keywords without experts are refused, as the CLI refuses the
    flags."""
    moe = dict(top_k=top_k, capacity_factor=capacity_factor, dropless=dropless, shared_experts=shared_experts,
               moe_every=moe_every, router=router, aux_loss=aux_loss, balance_bias=balance_bias)
    dflt = dict(top_k=0, capacity_factor=0.0, dropless=False, shared_experts=0, moe_every=0, router="softmax",
                aux_loss=0.0, balance_bias=0.0)
    bad = None
    if experts < 0:
        bad = "experts must be >= 1 for a mixture of experts (got %d)" % experts
    elif not experts and any(moe[k] != dflt[k] for k in moe):
        bad = "%s applies to mixture-of-experts models: pass experts=N (or preset('moe-tiny'))" % \
              next(k for k in moe if moe[k] != dflt[k])
    elif router not in ("softmax", "sigmoid"):
        bad = "bad router %r: expected softmax or sigmoid" % (router,)
    elif not (balance_bias >= 0 and balance_bias != float("inf")):
        bad = ("balance_bias must be a number >= 0 (the routing bias's step per training step, e.g. 0.001; got %g)"
               % balance_bias)
    elif experts and top_k and not 1 <= top_k <= experts:
        bad = "top_k must be in 1..experts (%d) (got %d)" % (experts, top_k)
    if bad:
        raise InvalidError(bad, C.PIPIT_STATUS_INVALID)
    return Model("llama", steps=steps, lr=lr, vocab=vocab, ctx=ctx, layers=layers, heads=heads, dim=dim,
                 kv_heads=kv_heads, ffn_hidden=ffn_hidden, multiple_of=multiple_of,
                 ffn_dim_multiplier=ffn_dim_multiplier, norm_eps=norm_eps, rope_theta=rope_theta, tied=tied,
                 max_ctx=max_ctx, micro_batch=micro_batch, fused_head=fused_head, experts=experts, **moe)


def preset(name, **overrides):
    """A preset of `pipit train --model NAME` with keyword overrides (flags)."""
    if name not in PRESETS:
        raise InvalidError("unknown preset %r: expected one of %s" % (name, ", ".join(PRESETS)),
                           C.PIPIT_STATUS_INVALID)
    arch, V, T, L, H, Cd, B, steps, lr, kv, F, tied, eps, theta = PRESETS[name][:14]
    kw = dict(vocab=V, ctx=T, layers=L, heads=H, dim=Cd, micro_batch=B, steps=steps, lr=lr)
    if arch == "llama":
        kw.update(kv_heads=kv, ffn_hidden=F, tied=bool(tied), norm_eps=eps, rope_theta=theta)
    if len(PRESETS[name]) > 14:  # a mixture of experts: experts, top_k
        kw.update(experts=PRESETS[name][14], top_k=PRESETS[name][15])
    kw.update(overrides)
    return (gpt2 if arch == "gpt2" else llama)(**kw)


__all__ = ["Model", "gpt2", "llama", "preset", "PRESETS"]
