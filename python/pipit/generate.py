"""Generating tokens (pipit_decode.h): the sampler and the KV-cache decoder.

    tok, state = pipit.sample_token(logits, temperature=0.8, top_k=40, state=seed)
    with pipit.Decoder(pipit.models.preset("tiny"), "model.safetensors") as d:
        ids = d.generate([1, 2, 3], 20, pipit.Sampler(temperature=0.8, seed=1))

Thin wrappers: the draw is pipit_sample_token's, the cache and the step
pipit_decoder's; nothing is recomputed here.
"""
import array
from ctypes import byref, c_int32, c_uint64, c_void_p

from ._lib import C, S, Handle, InvalidError, check, lib
from .core import Checkpoint, Graph, Program, _buffer_ptr, _new_array, _np

__all__ = ["sample_token", "Sampler", "Decoder"]


def _f32(logits):
    """(address, count, keep-alive) of logits as contiguous f32: a
    C-contiguous float32 numpy array or an array.array('f') by address,
    anything else (a list, another dtype) converted, a copy."""
    if _np is not None and isinstance(logits, _np.ndarray):
        a = logits if (logits.dtype == _np.float32 and logits.flags.c_contiguous) else \
            _np.ascontiguousarray(logits, dtype=_np.float32)
        return a.ctypes.data, a.size, a
    if isinstance(logits, array.array) and logits.typecode == "f":
        a = logits
    else:
        a = array.array("f", [float(x) for x in logits])
    addr, n = a.buffer_info()
    return addr, n, a


def _sampling(temperature, top_k, top_p):
    return S.pipit_sampling(float(temperature), int(top_k), float(top_p))


def sample_token(logits, temperature=0.0, top_k=0, top_p=0.0, state=0):
    """The next token from one row of logits (pipit_sample_token) ->
    (token, the advanced state). temperature 0: the argmax, no draw;
    top_k 0 / top_p 0: no cut. `state` is the splitmix64 state (a seed):
    pass the returned one to the next call, so a seed reproduces a run.
    A logit of -inf is never drawn."""
    addr, n, keep = _f32(logits)
    st, tok = c_uint64(int(state) & 0xFFFFFFFFFFFFFFFF), c_int32()
    check(lib.pipit_sample_token(c_void_p(addr), n, byref(_sampling(temperature, top_k, top_p)), byref(st),
                                 byref(tok)))
    del keep
    return tok.value, st.value


class Sampler:
    """A sampling rule and its random stream: Sampler(temperature, top_k,
    top_p, seed); sampler(logits) -> the next token (pipit_sample_token),
    advancing self.state. The default is greedy (the argmax)."""

    def __init__(self, temperature=0.0, top_k=0, top_p=0.0, seed=0):
        self.how = _sampling(temperature, top_k, top_p)
        self.state = int(seed) & 0xFFFFFFFFFFFFFFFF

    def __call__(self, logits):
        addr, n, keep = _f32(logits)
        st, tok = c_uint64(self.state), c_int32()
        check(lib.pipit_sample_token(c_void_p(addr), n, byref(self.how), byref(st), byref(tok)))
        del keep
        self.state = st.value
        return tok.value


class Decoder(Handle):
    """Incremental decoding with a KV cache (pipit_decoder) for a
    pipit.models Model: Decoder(model, weights, batch=1, ctx=None,
    threads=1, dtype="f32", device=None). It builds the model's decoding
    graph (pipit_gpt2_build_decode / pipit_llama_build_decode) for `batch`
    sequences and a cache of `ctx` slots (default: the model's ctx),
    compiles it forward-only and loads `weights`: a checkpoint path, a
    pipit.Checkpoint, or a Program / Trainer whose parameters are copied by
    name. step(tokens) runs the next position of every sequence and returns
    their logits ([batch, vocab], a copy); generate() feeds a prompt and
    draws new tokens (one sequence)."""
    _free = "pipit_decoder_free"

    def __init__(self, model, weights, batch=1, ctx=None, threads=1, dtype="f32", device=None):
        super().__init__(None)  # the handle comes last, once the program it borrows exists
        c = model.config(1)
        c.batch = int(batch)
        if ctx is not None:
            c.ctx = int(ctx)
        self.graph = Graph()
        try:
            dg = S.pipit_decode_graph()
            check(getattr(lib, "pipit_%s_build_decode" % model.arch)(self.graph.ptr, byref(c), byref(dg)))
            self.dg = dg
            lg, kv = self.graph._val(dg.logits), self.graph._val(dg.kv)
            self.program = Program(self.graph, self.graph._val(dg.loss), outputs=(lg, kv), dtype=dtype,
                                   device=device, forward_only=1, threads=int(threads))
            self._load(weights)
            out = c_void_p()
            check(lib.pipit_decoder_new(self.program.ptr, byref(dg), byref(out)))
        except BaseException:
            self._close_parts()
            raise
        super().__init__(out.value)  # registered for finalize()
        self.batch, self.vocab = int(batch), lg.shape[-1]
        self._ldt = C.PIPIT_F64 if lg.dtype == "f64" else C.PIPIT_F32
        self._tok = (c_int32 * self.batch)()

    def _load(self, w):
        if isinstance(w, Checkpoint):
            check(lib.pipit_checkpoint_load_into(self.program.ptr, w.ptr))
        elif hasattr(w, "program") and isinstance(getattr(w, "program"), Program):  # a Trainer
            self._copy(w.program)
        elif isinstance(w, Program):
            self._copy(w)
        else:
            with Checkpoint(w) as ck:
                check(lib.pipit_checkpoint_load_into(self.program.ptr, ck.ptr))

    def _copy(self, src):
        for name in self.program.params:
            self.program.set_param(name, src.get_param(name))

    def _close_parts(self):
        for h in (getattr(self, "program", None), getattr(self, "graph", None)):
            if h is not None:
                h.close()

    def close(self):
        super().close()  # the decoder first: it borrows the program
        self._close_parts()

    @property
    def length(self):
        """Positions in the cache (steps since the last reset)."""
        return lib.pipit_decoder_length(self._ptr)

    @property
    def capacity(self):
        """The cache's slots S."""
        return lib.pipit_decoder_capacity(self._ptr)

    def reset(self):
        check(lib.pipit_decoder_reset(self._ptr))

    def step(self, tokens):
        """Runs the next position; tokens: one id per sequence (an int when
        batch is 1). Returns the logits [batch, vocab] (numpy when present,
        else a flat array.array). A full cache raises pipit's message and
        leaves it as it was."""
        toks = [tokens] if isinstance(tokens, int) else list(tokens)
        if len(toks) != self.batch:
            raise InvalidError("Decoder.step: %d tokens for %d sequences" % (len(toks), self.batch),
                               C.PIPIT_STATUS_INVALID)
        for i, t in enumerate(toks):
            self._tok[i] = int(t)
        out = _new_array(self._ldt, (self.batch, self.vocab))
        addr, n = _buffer_ptr(out)
        check(lib.pipit_decoder_step(self._ptr, self._tok, c_void_p(addr), n))
        return out

    def generate(self, prompt, tokens, sampler=None):
        """Feeds `prompt` (a list of ids, at least one) from the current
        position and draws `tokens` new ids with `sampler` (default greedy)
        -> the new ids. One sequence (batch 1), as `pipit sample`."""
        if self.batch != 1:
            raise InvalidError("Decoder.generate draws one sequence: build the decoder with batch=1",
                               C.PIPIT_STATUS_INVALID)
        prompt = list(prompt)
        if not prompt:
            raise InvalidError("Decoder.generate: the prompt needs at least one token", C.PIPIT_STATUS_INVALID)
        sampler = sampler or Sampler()
        for t in prompt[:-1]:
            self.step(t)
        last, new = prompt[-1], []
        for _ in range(int(tokens)):
            lg = self.step(last)
            row = lg[0] if _np is not None and hasattr(lg, "ndim") else lg
            if self._ldt == C.PIPIT_F64:
                row = [float(x) for x in row]
            last = sampler(row)
            new.append(last)
        return new
