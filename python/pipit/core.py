"""The Pythonic layer over _lib: graphs and values, schedules, programs,
checkpoints, data and the tokenizer. Each class wraps one pipit handle and
calls the C library for everything (nothing is reimplemented here)."""
import array
import ctypes
import os
from ctypes import POINTER, byref, c_double, c_int, c_int32, c_int64, c_size_t, c_uint64, c_void_p

from ._lib import C, S, Error, Handle, InvalidError, MisuseError, check, cstr, cstr_array, error, lib, _text

try:  # numpy is optional: arrays are numpy when present, array.array / bytes otherwise
    import numpy as _np
except ImportError:  # pragma: no cover - exercised where numpy is absent
    _np = None

DTYPES = {"f32": C.PIPIT_F32, "f64": C.PIPIT_F64, "i32": C.PIPIT_I32, "bf16": C.PIPIT_BF16}
_DTYPE_NAMES = {v: k for k, v in DTYPES.items()}
_ITEMSIZE = {C.PIPIT_F32: 4, C.PIPIT_F64: 8, C.PIPIT_I32: 4, C.PIPIT_BF16: 2}
_ARRAY_CODE = {C.PIPIT_F32: "f", C.PIPIT_F64: "d", C.PIPIT_I32: "i", C.PIPIT_BF16: "H"}
_NP_NAME = {C.PIPIT_F32: "float32", C.PIPIT_F64: "float64", C.PIPIT_I32: "int32", C.PIPIT_BF16: "uint16"}


def dtype_code(dt):
    if isinstance(dt, int) and dt in _DTYPE_NAMES:
        return dt
    if _np is not None and not isinstance(dt, str):
        dt = {"float32": "f32", "float64": "f64", "int32": "i32"}.get(_np.dtype(dt).name, str(dt))
    if dt not in DTYPES:
        raise InvalidError("unknown dtype %r: expected one of %s" % (dt, ", ".join(DTYPES)), C.PIPIT_STATUS_INVALID)
    return DTYPES[dt]


def _shape_arg(shape):
    shape = tuple(int(s) for s in shape)
    return len(shape), (c_int64 * max(1, len(shape)))(*shape)


def _new_array(dt, shape):
    n = 1
    for s in shape:
        n *= s
    if _np is not None:
        return _np.empty(shape, dtype=_NP_NAME[dt])
    return array.array(_ARRAY_CODE[dt], bytes(n * _ITEMSIZE[dt]))


def _buffer_ptr(a):
    """Address and byte length of a numpy array or array.array we own."""
    if _np is not None and isinstance(a, _np.ndarray):
        return a.ctypes.data, a.nbytes
    addr, n = a.buffer_info()
    return addr, n * a.itemsize


# ------------------------------------------------------------------ graph

class Graph(Handle):
    """A pipit graph (pipit_graph_new). Values (Value) are built by its
    methods and the op functions; `with Graph() as g:` frees it at the end.
    tensor_parallel: the T of pipit_graph_set_tensor_parallel."""
    _free = "pipit_graph_free"

    def __init__(self, tensor_parallel=1):
        p = lib.pipit_graph_new()
        if not p:
            raise error(C.PIPIT_STATUS_NOMEM, "pipit_graph_new: out of memory")
        super().__init__(p)
        self.input_dtypes = {}  # name -> pipit dtype of the inputs declared here (feeds convert to it)
        if tensor_parallel != 1:
            check(lib.pipit_graph_set_tensor_parallel(p, int(tensor_parallel)))

    def _val(self, v):
        if v.id < 0:
            msg = _text(lib.pipit_errmsg())
            st = lib.pipit_graph_status(self._ptr) if self._ptr else C.PIPIT_STATUS_MISUSE
            raise error(st or C.PIPIT_STATUS_INVALID, msg)  # a builder that refused its arguments
        return Value(self, v.id)

    def call(self, fn, *args):
        """lib.<fn>(graph, *args) -> Value, raising pipit's message on failure."""
        return self._val(getattr(lib, fn)(self._ptr, *[a.c if isinstance(a, Value) else a for a in args]))

    def input(self, name, shape, dtype="f32"):
        n, sh = _shape_arg(shape)
        v = self.call("pipit_input", cstr(name), dtype_code(dtype), n, sh)
        self.input_dtypes[str(name)] = dtype_code(dtype)
        return v

    def param(self, name, shape, dtype="f32", sharded=None):
        """A parameter; sharded=(axis, parts): pipit_param_sharded."""
        n, sh = _shape_arg(shape)
        if sharded:
            return self.call("pipit_param_sharded", cstr(name), dtype_code(dtype), n, sh, int(sharded[0]),
                             int(sharded[1]))
        return self.call("pipit_param", cstr(name), dtype_code(dtype), n, sh)

    @property
    def status(self):
        return lib.pipit_graph_status(self._ptr)

    @property
    def tensor_parallel(self):
        return lib.pipit_graph_tensor_parallel(self._ptr)

    @property
    def sequence_parallel(self):
        """The model builders' sequence-parallel setting (pipit_graph_set_sequence_parallel)."""
        return bool(lib.pipit_graph_sequence_parallel(self._ptr))

    @sequence_parallel.setter
    def sequence_parallel(self, on):
        check(lib.pipit_graph_set_sequence_parallel(self._ptr, 1 if on else 0))

    @property
    def context_parallel(self):
        """The graph's context-parallel C (pipit_cp.h; 1 by default)."""
        return lib.pipit_graph_context_parallel(self._ptr)

    @context_parallel.setter
    def context_parallel(self, c):
        check(lib.pipit_graph_set_context_parallel(self._ptr, int(c)))

    @property
    def documents(self):
        """The model builders' packed-documents setting (pipit_graph_set_documents)."""
        return bool(lib.pipit_graph_documents(self._ptr))

    @documents.setter
    def documents(self, on):
        check(lib.pipit_graph_set_documents(self._ptr, 1 if on else 0))


class Value:
    """A value of a Graph (pipit_val). Arithmetic: + - * / @, unary -, and
    x[..., a:b] slicing (one axis, step 1). Its graph must stay open."""
    __slots__ = ("graph", "id")

    def __init__(self, graph, vid):
        self.graph, self.id = graph, vid

    @property
    def c(self):
        return S.pipit_val(self.graph._ptr, self.id)

    @property
    def ndim(self):
        return lib.pipit_val_ndim(self.c)

    @property
    def shape(self):
        return tuple(lib.pipit_val_dim(self.c, i) for i in range(self.ndim))

    @property
    def dtype(self):
        return _DTYPE_NAMES.get(lib.pipit_val_dtype(self.c), "?")

    def __repr__(self):
        return "Value(%d, %s %s)" % (self.id, self.dtype, list(self.shape))

    def _other(self, o):
        if isinstance(o, Value):
            return o
        raise TypeError("pipit values combine with pipit values (got %s): use pipit.scale for a number" %
                        type(o).__name__)

    def __add__(self, o):
        return self.graph.call("pipit_add", self, self._other(o))

    def __sub__(self, o):
        return self.graph.call("pipit_sub", self, self._other(o))

    def __mul__(self, o):
        if isinstance(o, (int, float)):
            return self.graph.call("pipit_scale", self, float(o))
        return self.graph.call("pipit_mul", self, self._other(o))

    __rmul__ = __mul__

    def __truediv__(self, o):
        if isinstance(o, (int, float)):
            return self.graph.call("pipit_scale", self, 1.0 / float(o))
        return self.graph.call("pipit_div", self, self._other(o))

    def __matmul__(self, o):
        return self.graph.call("pipit_matmul", self, self._other(o), 0, 0)

    def __neg__(self):
        return self.graph.call("pipit_neg", self)

    def __getitem__(self, key):
        if not isinstance(key, tuple):
            key = (key,)
        nd = self.ndim
        if Ellipsis in key:
            i = key.index(Ellipsis)
            key = key[:i] + (slice(None),) * (nd - len(key) + 1) + key[i + 1:]
        axes = [(a, k) for a, k in enumerate(key) if not (isinstance(k, slice) and k == slice(None))]
        if len(axes) != 1 or not isinstance(axes[0][1], slice) or axes[0][1].step not in (None, 1):
            raise InvalidError("pipit values slice one axis with step 1 (x[..., a:b]); got %r" % (key,),
                               C.PIPIT_STATUS_INVALID)
        axis, sl = axes[0]
        start, stop, _ = sl.indices(self.shape[axis])
        return self.graph.call("pipit_slice", self, axis, start, max(0, stop - start))

    @property
    def T(self):
        return self.graph.call("pipit_transpose", self, self.ndim - 2, self.ndim - 1)


# ------------------------------------------------------------- schedules

class Schedule(Handle):
    """A pipeline schedule: Schedule("1f1b", P, V, M) (a built-in name, V 0:
    the schedule's own), or Schedule.load(path)."""
    _free = "pipit_schedule_free"

    def __init__(self, kind, ranks, virtual=0, microbatches=1):
        out = c_void_p()
        k = kind if isinstance(kind, int) else lib.pipit_schedule_kind_from_name(cstr(kind))
        if k < 0:
            names = ", ".join(schedule_names())
            raise InvalidError("unknown schedule %r: expected one of %s" % (kind, names), C.PIPIT_STATUS_INVALID)
        check(lib.pipit_schedule_build(k, int(ranks), int(virtual), int(microbatches), byref(out)))
        super().__init__(out.value)

    @classmethod
    def load(cls, path):
        out = c_void_p()
        check(lib.pipit_schedule_load(cstr(path), byref(out)))
        s = cls.__new__(cls)
        Handle.__init__(s, out.value)
        return s

    ranks = property(lambda self: lib.pipit_schedule_ranks(self._ptr))
    stages = property(lambda self: lib.pipit_schedule_stages(self._ptr))
    microbatches = property(lambda self: lib.pipit_schedule_microbatches(self._ptr))
    virtual = property(lambda self: lib.pipit_schedule_virtual(self._ptr))

    @property
    def kind(self):
        k = lib.pipit_schedule_get_kind(self._ptr)
        return _text(lib.pipit_schedule_kind_name(k)) if k >= 0 else "custom"

    def check(self):
        check(lib.pipit_schedule_check(self._ptr))

    @property
    def split_bw(self):
        """True if the backward is split into B and W tasks (zero-bubble schedules)."""
        return bool(lib.pipit_schedule_split_bw(self._ptr))

    def stage_rank(self, stage):
        """The rank that owns stage; -1 out of range."""
        return lib.pipit_schedule_stage_rank(self._ptr, int(stage))

    def tasks(self, rank):
        """The rank's task list in order: [(kind "F"/"B"/"W"/"BW", stage, microbatch)]."""
        out, t = [], S.pipit_task()
        for i in range(lib.pipit_schedule_num_tasks(self._ptr, int(rank))):
            check(lib.pipit_schedule_task(self._ptr, int(rank), i, byref(t)))
            out.append((Program._TASK_KINDS[t.kind] if t.kind < 4 else t.kind, t.stage, t.mb))
        if not self._ptr or not 0 <= int(rank) < self.ranks:
            check(lib.pipit_schedule_task(self._ptr, int(rank), 0, byref(t)))  # pipit's message
        return out


def schedule_names():
    return [_text(lib.pipit_schedule_kind_name(k)) for k in range(C.PIPIT_SCHED_COUNT)]


# ----------------------------------------------------------------- feeds

class Feeds:
    """A step's feeds as pipit_feed entries, keeping what they point at
    alive. A C-contiguous numpy array of the input's dtype, a bytes object
    or any buffer of the right size is passed by address (no copy); a
    non-contiguous array, another dtype or a list is copied (`copies`
    counts them)."""

    def __init__(self, entries, dtypes=None):
        self.keep, self.copies = [], 0
        self.arr = (S.pipit_feed * max(1, len(entries)))()
        for i, (name, data) in enumerate(entries):
            dt = (dtypes or {}).get(name)
            ptr, nbytes = self._pointer(data, dt)
            self.arr[i].name = cstr(name)
            self.arr[i].data = ptr
            self.arr[i].nbytes = nbytes
        self.n = len(entries)

    def _pointer(self, data, dt):
        if _np is not None and isinstance(data, _np.ndarray):
            want = _np.dtype(_NP_NAME[dt]) if dt is not None else data.dtype
            if data.dtype != want or not data.flags["C_CONTIGUOUS"]:
                data = _np.ascontiguousarray(data, dtype=want)
                self.copies += 1
            self.keep.append(data)
            return data.ctypes.data, data.nbytes
        if isinstance(data, (bytes, bytearray, memoryview, array.array)):
            mv = memoryview(data)
            if not mv.c_contiguous:
                mv = memoryview(mv.tobytes())
                self.copies += 1
            if mv.readonly:  # bytes: its own buffer, read-only (pipit only reads feeds)
                buf = ctypes.c_char_p(mv.obj if isinstance(mv.obj, bytes) else mv.tobytes())
                self.keep.append((mv, buf))
                return ctypes.cast(buf, c_void_p).value, mv.nbytes
            cbuf = (ctypes.c_char * mv.nbytes).from_buffer(mv)
            self.keep.append((mv, cbuf))
            return ctypes.addressof(cbuf), mv.nbytes
        # a (nested) list: flattened and copied
        flat = list(_flatten(data))
        code = _ARRAY_CODE[dt] if dt is not None else ("i" if all(isinstance(x, int) for x in flat) else "f")
        a = array.array(code, flat)
        self.copies += 1
        self.keep.append(a)
        return _buffer_ptr(a)


def _flatten(x):
    if isinstance(x, (list, tuple)):
        for y in x:
            yield from _flatten(y)
    else:
        yield x


# ---------------------------------------------------------------- programs

_OPTION_FIELDS = {f for f, _ in S.pipit_options._fields_}


_REMAT = {"none": C.PIPIT_REMAT_NONE, "full": C.PIPIT_REMAT_FULL, "pointwise": C.PIPIT_REMAT_POINTWISE}


def remat_code(remat):
    """pipit_options.remat from "none", "full", "pointwise" (or False /
    True: none / full, or the number itself)."""
    if isinstance(remat, str):
        if remat not in _REMAT:
            raise InvalidError("bad remat %r: expected none, full or pointwise" % (remat,), C.PIPIT_STATUS_INVALID)
        return _REMAT[remat]
    return int(remat)


def adamw(lr=3e-4, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.0):
    return lib.pipit_adamw(lr, beta1, beta2, eps, weight_decay)


def sgd(lr):
    return lib.pipit_sgd(lr)


def lr_schedule(kind="constant", warmup=0, decay_steps=0, min_lr=0.0):
    """A pipit_lr_schedule: constant, cosine or linear decay after a warm-up."""
    kinds = {"constant": C.PIPIT_LR_CONSTANT, "cosine": C.PIPIT_LR_COSINE, "linear": C.PIPIT_LR_LINEAR}
    if kind not in kinds:
        raise InvalidError("unknown lr schedule %r: expected constant, cosine or linear" % (kind,),
                           C.PIPIT_STATUS_INVALID)
    return S.pipit_lr_schedule(kinds[kind], int(warmup), int(decay_steps), float(min_lr))


def lr_at(schedule, lr, step):
    return lib.pipit_lr_at(byref(schedule), float(lr), int(step))


class Program(Handle):
    """A compiled program (pipit_compile). Program(graph, loss, schedule=,
    microbatches=, threads=, optimizer=, lr_schedule=, dtype=, outputs=,
    ... any pipit_options field). step(feeds) runs one step; feeds: a list
    of M*D dicts {input name: data}, one per microbatch (or one dict when
    M*D is 1)."""
    _free = "pipit_program_free"

    def __init__(self, graph, loss, schedule=None, outputs=(), dtype="f32", bf16_policy="autocast", device=None,
                 **options):
        o = S.pipit_options()
        o.microbatches = 1
        o.threads = 1
        o.data_parallel = 1
        o.tensor_parallel = 1
        o.optimizer = adamw()
        for k, v in options.items():
            if k not in _OPTION_FIELDS:
                raise TypeError("Program: unknown option %r (pipit_options has %s)" % (k, ", ".join(sorted(_OPTION_FIELDS))))
            setattr(o, k, remat_code(v) if k == "remat" else v)
        o.schedule = schedule.ptr if schedule is not None else None
        o.dtype = dtype_code(dtype)
        o.bf16_policy = {"autocast": C.PIPIT_BF16_AUTOCAST, "all": C.PIPIT_BF16_ALL}.get(bf16_policy, -1)
        o.device = cstr(device)
        outs = (S.pipit_val * max(1, len(outputs)))(*[v.c for v in outputs])
        o.outputs = ctypes.cast(outs, c_void_p) if outputs else None
        o.noutputs = len(outputs)
        out = c_void_p()
        check(lib.pipit_compile(graph._ptr, loss.c, byref(o), byref(out)))
        super().__init__(out.value)
        self.options = o
        self.graph, self.schedule = graph, schedule  # kept alive: the program borrows the schedule
        self.microbatches = o.microbatches * o.data_parallel
        self._inputs = {}
        self.feed_copies = 0  # feeds copied by the last step (0: every feed passed by address)

    def _err(self):
        return _text(lib.pipit_program_errmsg(self._ptr)) if self._ptr else None

    @property
    def num_ranks(self):
        return lib.pipit_program_num_ranks(self._ptr)

    @property
    def params(self):
        return [_text(lib.pipit_program_param_name(self._ptr, i)) for i in range(lib.pipit_program_num_params(self._ptr))]

    def param_shape(self, name):
        nd, sh = c_int(), (c_int64 * C.PIPIT_MAX_DIMS)()
        check(lib.pipit_program_param_shape(self._ptr, cstr(name), byref(nd), sh))
        return tuple(sh[i] for i in range(nd.value))

    def param_dtype(self, name):
        d = c_int()
        check(lib.pipit_program_param_dtype(self._ptr, cstr(name), byref(d)))
        return d.value

    def get_param(self, name):
        """A copy of the parameter (the program's memory is its own)."""
        a = _new_array(self.param_dtype(name), self.param_shape(name))
        ptr, n = _buffer_ptr(a)
        check(lib.pipit_program_get_param(self._ptr, cstr(name), ptr, n))
        return a

    def get_grad(self, name):
        a = _new_array(self.param_dtype(name), self.param_shape(name))
        ptr, n = _buffer_ptr(a)
        check(lib.pipit_program_get_grad(self._ptr, cstr(name), ptr, n))
        return a

    def set_param(self, name, data):
        f = Feeds([(name, data)], {name: self.param_dtype(name)})
        check(lib.pipit_program_set_param(self._ptr, cstr(name), f.arr[0].data, f.arr[0].nbytes))

    def get_output(self, value, mb=0):
        """Microbatch mb's copy of an output requested at compile (f32 for bf16 programs)."""
        dt = DTYPES.get(value.dtype, C.PIPIT_F32)
        if self.options.dtype == C.PIPIT_BF16 and dt == C.PIPIT_BF16:
            dt = C.PIPIT_F32
        a = _new_array(dt, value.shape)
        ptr, n = _buffer_ptr(a)
        check(lib.pipit_program_get_output(self._ptr, value.c, int(mb), ptr, n))
        return a

    def _feeds(self, feeds):
        if isinstance(feeds, dict):
            feeds = [feeds]
        entries = []
        for mbf in feeds:
            entries.extend(mbf.items() if isinstance(mbf, dict) else mbf)
        nf = len(entries) // max(1, len(feeds))
        return Feeds(entries, self._input_dtypes()), len(entries), nf

    def _input_dtypes(self):
        if not self._inputs and self.graph is not None:
            self._inputs = getattr(self.graph, "input_dtypes", {}) or {}
        return self._inputs

    def step(self, feeds, update=True):
        """One step over feeds (a list of M*D microbatch dicts); returns the
        metrics as a dict: loss, grad_norm, ms, peak_bytes, bubble, lr."""
        f, total, nf = self._feeds(feeds)
        self.feed_copies = f.copies
        m = S.pipit_metrics()
        st = lib.pipit_step_feeds(self._ptr, f.arr, total, nf, 1 if update else 0, byref(m))
        check(st, self._err)
        return metrics_dict(m)

    def save(self, path, meta=None, dtype=None):
        kv = cstr_array(_meta_list(meta))
        if dtype is None:
            check(lib.pipit_checkpoint_save(self._ptr, cstr(path), kv))
        else:
            check(lib.pipit_checkpoint_save_as(self._ptr, cstr(path), kv, dtype_code(dtype)))

    def load(self, path):
        check(lib.pipit_checkpoint_load(self._ptr, cstr(path)))

    def save_train(self, path, next_step, meta=None):
        check(lib.pipit_checkpoint_save_train(self._ptr, cstr(path), int(next_step), cstr_array(_meta_list(meta))))

    def set_profile(self, on=True):
        check(lib.pipit_program_set_profile(self._ptr, 1 if on else 0))

    def param_numel(self, name):
        n = c_int64()
        check(lib.pipit_program_param_numel(self._ptr, cstr(name), byref(n)))
        return n.value

    def _query(self, fn):
        """fn(handle)'s value; on a closed program the library's MISUSE
        message (these calls return 0 for NULL, with the message set)."""
        v = fn(self._ptr)
        if not self._ptr:
            raise error(C.PIPIT_STATUS_MISUSE)
        return v

    @property
    def forward_only(self):
        """True for a program compiled with forward_only=True."""
        return bool(self._query(lib.pipit_program_forward_only))

    _MOMENTS = {"exp_avg": 0, "exp_avg_sq": 1, 0: 0, 1: 1}

    def get_opt_state(self, name, which="exp_avg"):
        """A copy of the param's AdamW moment: which = "exp_avg" (0) or
        "exp_avg_sq" (1) (pipit_program_get_opt_state)."""
        if which not in self._MOMENTS:
            raise InvalidError('get_opt_state: which must be "exp_avg" or "exp_avg_sq" (got %r)' % (which,))
        a = _new_array(self.param_dtype(name), self.param_shape(name))
        ptr, n = _buffer_ptr(a)
        check(lib.pipit_program_get_opt_state(self._ptr, cstr(name), self._MOMENTS[which], ptr, n))
        return a

    def set_opt_state(self, name, which, data):
        """Sets the moment of every holder of the param (pipit_program_set_opt_state)."""
        if which not in self._MOMENTS:
            raise InvalidError('set_opt_state: which must be "exp_avg" or "exp_avg_sq" (got %r)' % (which,))
        f = Feeds([(name, data)], {name: self.param_dtype(name)})
        check(lib.pipit_program_set_opt_state(self._ptr, cstr(name), self._MOMENTS[which], f.arr[0].data,
                                              f.arr[0].nbytes))

    @property
    def opt_steps(self):
        """Optimizer updates taken (AdamW's bias correction, the lr schedule's step)."""
        return self._query(lib.pipit_program_opt_steps)

    @opt_steps.setter
    def opt_steps(self, steps):
        check(lib.pipit_program_set_opt_steps(self._ptr, int(steps)))

    @property
    def step_wall(self):
        """Seconds of the last step (thread start to join); 0.0 before the first."""
        return self._query(lib.pipit_program_step_wall)

    _TASK_KINDS = ("F", "B", "W", "BW")

    def last_step(self, rank=0):
        """The last step on a world rank (pipit_program_last_step): a dict of
        tasks [(kind "F"/"B"/"W"/"BW", stage, microbatch)] in the schedule's
        order, their start and end (seconds from the step's start), busy and
        recv_wait (seconds); copies (the program overwrites its arrays)."""
        r = S.pipit_rank_step()
        check(lib.pipit_program_last_step(self._ptr, int(rank), byref(r)), self._err)
        n = r.ntasks
        tasks = ctypes.cast(r.tasks, POINTER(S.pipit_task))
        start = ctypes.cast(r.start, POINTER(c_double))
        end = ctypes.cast(r.end, POINTER(c_double))
        return {"tasks": [(self._TASK_KINDS[tasks[i].kind] if tasks[i].kind < 4 else tasks[i].kind, tasks[i].stage,
                           tasks[i].mb) for i in range(n)],
                "start": [start[i] for i in range(n)], "end": [end[i] for i in range(n)],
                "busy": r.busy, "recv_wait": r.recv_wait}

    _HELD = {"params": 0, "grads": 1, "moments": 2}

    def held_bytes(self, rank=0, kind="params"):
        """Bytes a world rank holds now (pipit_program_held_bytes): kind
        "params", "grads" or "moments" (both AdamW moments)."""
        if kind not in self._HELD:
            raise InvalidError('held_bytes: kind must be "params", "grads" or "moments" (got %r)' % (kind,),
                               C.PIPIT_STATUS_INVALID)
        n = c_size_t()
        check(lib.pipit_program_held_bytes(self._ptr, int(rank), self._HELD[kind], byref(n)))
        return n.value

    def write_trace(self, path):
        """The last step as a Chrome / Perfetto trace (JSON), or an SVG
        timeline when path ends in ".svg" (pipit_program_write_trace)."""
        check(lib.pipit_program_write_trace(self._ptr, cstr(path)))


def _meta_list(meta):
    out = []
    for k, v in (meta.items() if isinstance(meta, dict) else (meta or [])):
        out += [k, v]
    return out


def metrics_dict(m):
    return {"loss": m.loss, "grad_norm": m.grad_norm, "ms": m.ms, "peak_bytes": m.peak_bytes,
            "bubble": m.bubble, "lr": m.lr}


# ------------------------------------------------------------- checkpoints

class Checkpoint(Handle):
    """A checkpoint file opened for reading (pipit_checkpoint_open)."""
    _free = "pipit_checkpoint_free"

    def __init__(self, path):
        out = c_void_p()
        check(lib.pipit_checkpoint_open(cstr(path), byref(out)))
        super().__init__(out.value)

    @property
    def tensors(self):
        return [_text(lib.pipit_checkpoint_tensor_name(self._ptr, i))
                for i in range(lib.pipit_checkpoint_num_tensors(self._ptr))]

    def meta(self, key):
        v = lib.pipit_checkpoint_meta(self._ptr, cstr(key))
        return None if v is None else _text(v)

    def shape(self, name):
        nd, sh = c_int(), (c_int64 * C.PIPIT_MAX_DIMS)()
        check(lib.pipit_checkpoint_tensor_shape(self._ptr, cstr(name), byref(nd), sh))
        return tuple(sh[i] for i in range(nd.value))

    @property
    def verified(self):
        return bool(lib.pipit_checkpoint_verified(self._ptr))

    @property
    def path(self):
        return _text(lib.pipit_checkpoint_path(self._ptr))

    def dtype(self, name):
        """The dtype a tensor is stored in: "f32", "f64", "bf16" or "i32"."""
        d = c_int()
        check(lib.pipit_checkpoint_tensor_dtype(self._ptr, cstr(name), byref(d)))
        return _DTYPE_NAMES.get(d.value, d.value)

    def meta_count(self, key, max=2 ** 64 - 1):  # noqa: A002 - the C parameter's name
        """A metadata value that must be a count (decimal digits, at most max):
        FormatError naming the key and value otherwise, InvalidError when absent."""
        n = c_uint64()
        check(lib.pipit_checkpoint_meta_count(self._ptr, cstr(key), int(max), byref(n)))
        return n.value


# -------------------------------------------------------------------- data

class Data(Handle):
    """A token stream (pipit_data_open_spec): windows of ctx+1 tokens in
    random (seeded) or sequential order; batch(first, B) -> (inputs, targets)."""
    _free = "pipit_data_free"
    FORMATS = {"auto": 0, "text": 1, "shard": 2, "u16": 3}

    def __init__(self, spec, ctx, order="random", seed=1, format="auto", _ptr=None):
        if _ptr is None:
            orders = {"random": C.PIPIT_DATA_RANDOM, "sequential": C.PIPIT_DATA_SEQUENTIAL}
            if order not in orders:
                raise InvalidError("bad data order %r: expected random or sequential" % (order,),
                                   C.PIPIT_STATUS_INVALID)
            if format not in self.FORMATS:
                raise InvalidError("bad data format %r: expected auto, text, shard or u16" % (format,),
                                   C.PIPIT_STATUS_INVALID)
            out = c_void_p()
            check(lib.pipit_data_open_spec(cstr(spec), self.FORMATS[format], int(ctx), orders[order],
                                           c_uint64(int(seed)), byref(out)))
            _ptr = out.value
        super().__init__(_ptr)
        self.ctx = int(ctx)

    tokens = property(lambda self: lib.pipit_data_tokens(self._ptr))
    windows = property(lambda self: lib.pipit_data_windows(self._ptr))
    max_token = property(lambda self: lib.pipit_data_max_token(self._ptr))
    checksum = property(lambda self: lib.pipit_data_checksum(self._ptr))

    def offset(self, k):
        """Where sequence k starts in the token stream (pipit_data_offset)."""
        return lib.pipit_data_offset(self._ptr, int(k))

    def split(self, val_windows):
        """Splits off the last val_windows windows as a validation Data."""
        out = c_void_p()
        check(lib.pipit_data_split(self._ptr, int(val_windows), byref(out)))
        return Data(None, self.ctx, _ptr=out.value)

    def batch_into(self, first, B, inputs, targets):
        pi, ni = _buffer_ptr(inputs)
        pt, nt = _buffer_ptr(targets)
        if ni < 4 * B * self.ctx or nt < 4 * B * self.ctx:
            raise InvalidError("batch buffers hold fewer than B x ctx tokens", C.PIPIT_STATUS_INVALID)
        check(lib.pipit_data_batch(self._ptr, int(first), int(B), pi, pt))

    def batch(self, first, B):
        """Sequences first .. first+B-1: (inputs, targets), int32 [B, ctx] each."""
        x, y = _new_array(C.PIPIT_I32, (B, self.ctx)), _new_array(C.PIPIT_I32, (B, self.ctx))
        self.batch_into(first, B, x, y)
        return x, y


# --------------------------------------------------------------- tokenizer

class Tokenizer(Handle):
    """A byte-level BPE tokenizer (pipit_text.h): Tokenizer(path),
    Tokenizer.gpt2(vocab_json, merges_txt), Tokenizer.train(texts, vocab)."""
    _free = "pipit_tokenizer_free"

    def __init__(self, path=None, _ptr=None):
        if _ptr is None:
            out = c_void_p()
            check(lib.pipit_tokenizer_load(cstr(path), byref(out)))
            _ptr = out.value
        super().__init__(_ptr)

    @classmethod
    def gpt2(cls, vocab_json, merges_txt):
        out = c_void_p()
        check(lib.pipit_tokenizer_load_gpt2(cstr(vocab_json), cstr(merges_txt), byref(out)))
        return cls(_ptr=out.value)

    @classmethod
    def train(cls, texts, vocab_size):
        bs = [cstr(t) for t in texts]
        arr = (ctypes.c_char_p * max(1, len(bs)))(*bs)
        lens = (c_size_t * max(1, len(bs)))(*[len(b) for b in bs])
        out = c_void_p()
        check(lib.pipit_tokenizer_train(arr, lens, len(bs), int(vocab_size), byref(out)))
        return cls(_ptr=out.value)

    def save(self, path):
        check(lib.pipit_tokenizer_save(self._ptr, cstr(path)))

    def token(self, i):
        """The bytes of token i."""
        n = c_size_t()
        p = lib.pipit_tokenizer_token(self._ptr, int(i), byref(n))
        if p is None:
            check(C.PIPIT_STATUS_INVALID)
        return ctypes.string_at(p, n.value)

    @property
    def vocab_size(self):
        return lib.pipit_tokenizer_vocab_size(self._ptr)

    def encode(self, text):
        b = cstr(text)
        cap = len(b) + 1
        ids, n = (c_int32 * cap)(), c_size_t()
        st = lib.pipit_tokenizer_encode(self._ptr, b, len(b), ids, cap, byref(n))
        if st == C.PIPIT_STATUS_INVALID and n.value > cap:  # a prefix space: one token more per stretch
            cap = n.value
            ids = (c_int32 * cap)()
            st = lib.pipit_tokenizer_encode(self._ptr, b, len(b), ids, cap, byref(n))
        check(st)
        return list(ids[:n.value])

    def decode(self, ids):
        arr = (c_int32 * max(1, len(ids)))(*ids)
        n = c_size_t()
        st = lib.pipit_tokenizer_decode(self._ptr, arr, len(ids), None, 0, byref(n))
        if st not in (0,) and n.value == 0:
            check(st)
        buf = ctypes.create_string_buffer(n.value + 1)
        check(lib.pipit_tokenizer_decode(self._ptr, arr, len(ids), buf, n.value + 1, byref(n)))
        return buf.raw[:n.value].decode("utf-8", "replace")


def init():
    """Starts MPI when launched by mpirun (pipit_init; pipit_compile does it
    too): returns (this process's rank, the process count). Outside MPI
    (0, 1): ranks are threads."""
    check(lib.pipit_init(None, None))
    return lib.pipit_process_rank(), lib.pipit_process_count()


def process_rank():
    return lib.pipit_process_rank()


def process_count():
    return lib.pipit_process_count()


def agree(what, fields):
    """pipit_agree: in an MPI job every process must pass the same fields
    (a list of (name, value) pairs); InvalidError naming the first that
    differs and which processes hold which value. One process: nothing."""
    kv = []
    for k, v in fields:
        kv += [k, v]
    check(lib.pipit_agree(cstr(what), cstr_array(kv)))


def version():
    return _text(lib.pipit_version())


def build_id():
    return _text(lib.pipit_build_id())


def have_mpi():
    """True if the library was built with the MPI transport."""
    return bool(lib.pipit_have_mpi())


def have_cuda():
    """True if the library was built with the cuda backend (the machine may still have no GPU)."""
    return bool(lib.pipit_have_cuda())


def cuda_device_count():
    """CUDA devices this process can use (0 without a GPU or a cuda build)."""
    return lib.pipit_cuda_device_count()


def cpu_bf16_gemm():
    """How the CPU backend multiplies bf16 matrices here (pipit_cpu_bf16_gemm)."""
    return _text(lib.pipit_cpu_bf16_gemm())


def cpu_blas_kernels():
    """The kernels OpenBLAS runs here, by its core name (pipit_cpu_blas_kernels)."""
    return _text(lib.pipit_cpu_blas_kernels())


def cpu_blas_advice():
    """None, or a line of advice on OpenBLAS's kernels (pipit_cpu_blas_advice)."""
    r = lib.pipit_cpu_blas_advice()
    return None if r is None else _text(r)


__all__ = ["init", "process_rank", "process_count", "agree", "Graph", "Value", "Schedule", "Program", "Checkpoint", "Data", "Tokenizer", "Feeds", "Error",
           "MisuseError", "adamw", "sgd", "lr_schedule", "lr_at", "schedule_names", "version", "build_id",
           "have_mpi", "have_cuda", "cuda_device_count", "cpu_bf16_gemm", "cpu_blas_kernels",
           "cpu_blas_advice", "DTYPES", "metrics_dict"]
