"""The op builders as functions of values: pipit.softmax(x, axis=-1),
pipit.matmul(a, b), pipit.pipeline_yield(x), ... Each is one call of the
C builder of the same name (pipit.h) on the values' graph; a failure
raises the Error with pipit's message."""
from ctypes import c_int64

from ._lib import C, S, InvalidError
from .core import Value, _shape_arg, dtype_code


def _g(x):
    if not isinstance(x, Value):
        raise TypeError("expected a pipit Value, got %s" % type(x).__name__)
    return x.graph


def _axis(x, axis, what, last_only=False):
    nd = x.ndim
    a = axis + nd if axis < 0 else axis
    if last_only and a != nd - 1:
        raise InvalidError("%s works on the last axis (axis=-1); got axis=%d of a %d-d value" % (what, axis, nd),
                           C.PIPIT_STATUS_INVALID)
    return a


def _unary(name):
    def f(x):
        return _g(x).call("pipit_" + name, x)
    f.__name__ = name
    f.__doc__ = "pipit_%s(x) (pipit.h)" % name
    return f


def _binary(name):
    def f(a, b):
        return _g(a).call("pipit_" + name, a, b)
    f.__name__ = name
    f.__doc__ = "pipit_%s(a, b) (pipit.h)" % name
    return f


for _n in ("neg", "exp", "log", "sqrt", "rsqrt", "abs", "relu", "silu", "sigmoid", "tanh", "gelu", "sum", "mean",
           "tp_copy", "tp_sum", "tp_max", "grad_of"):
    globals()[_n] = _unary(_n)
for _n in ("add", "sub", "mul", "div", "embed", "gather", "bias_add", "matmul_nt", "xent_mean", "tp_xent_mean"):
    globals()[_n] = _binary(_n)


def softmax(x, axis=-1):
    _axis(x, axis, "softmax", last_only=True)
    return _g(x).call("pipit_softmax", x)


def log_softmax(x, axis=-1):
    _axis(x, axis, "log_softmax", last_only=True)
    return _g(x).call("pipit_log_softmax", x)


def reduce_sum(x, axis=-1, keepdim=False):
    return _g(x).call("pipit_reduce_sum", x, _axis(x, axis, "reduce_sum"), int(keepdim))


def reduce_mean(x, axis=-1, keepdim=False):
    return _g(x).call("pipit_reduce_mean", x, _axis(x, axis, "reduce_mean"), int(keepdim))


def reduce_max(x, axis=-1, keepdim=False):
    return _g(x).call("pipit_reduce_max", x, _axis(x, axis, "reduce_max"), int(keepdim))


def matmul(a, b, trans_a=False, trans_b=False):
    return _g(a).call("pipit_matmul", a, b, int(trans_a), int(trans_b))


def scale(x, alpha):
    return _g(x).call("pipit_scale", x, float(alpha))


def cast(x, dtype):
    return _g(x).call("pipit_cast", x, dtype_code(dtype))


def reshape(x, shape):
    n, sh = _shape_arg(shape)
    return _g(x).call("pipit_reshape", x, n, sh)


def broadcast_to(x, shape):
    n, sh = _shape_arg(shape)
    return _g(x).call("pipit_broadcast_to", x, n, sh)


def transpose(x, axis0=-2, axis1=-1):
    return _g(x).call("pipit_transpose", x, _axis(x, axis0, "transpose"), _axis(x, axis1, "transpose"))


def slice(x, axis, start, length):  # noqa: A001 - pipit_slice
    return _g(x).call("pipit_slice", x, _axis(x, axis, "slice"), int(start), int(length))


def concat(xs, axis=-1):
    xs = list(xs)
    arr = (S.pipit_val * len(xs))(*[v.c for v in xs])
    return _g(xs[0]).call("pipit_concat", len(xs), arr, _axis(xs[0], axis, "concat"))


def split(x, sizes, axis=-1):
    from ._lib import check, lib
    sizes = [int(s) for s in sizes]
    out = (S.pipit_val * len(sizes))()
    g = _g(x)
    check(lib.pipit_split(g.ptr, x.c, _axis(x, axis, "split"), len(sizes), (c_int64 * len(sizes))(*sizes), out))
    return [Value(g, out[i].id) for i in range(len(sizes))]


def rmsnorm(x, w, eps=1e-5):
    return _g(x).call("pipit_rmsnorm", x, w, float(eps))


def layernorm(x, w, b, eps=1e-5):
    return _g(x).call("pipit_layernorm", x, w, b, float(eps))


def rope(x, heads, theta=10000.0, position_offset=0):
    return _g(x).call("pipit_rope_ex", x, int(heads), float(theta), int(position_offset))


def attention(qkv, heads):
    """Causal multi-head attention over a fused [.., T, 3C] qkv (pipit_attention)."""
    return _g(qkv).call("pipit_attention", qkv, int(heads))


def attention_qkv(q, k, v, heads, kv_heads=0, causal=True, scale=0.0):
    o = S.pipit_attention_opts(int(heads), int(kv_heads), int(bool(causal)), float(scale))
    from ctypes import byref
    return _g(q).call("pipit_attention_qkv", q, k, v, byref(o))


def head_xent_mean(h, W, targets):
    return _g(h).call("pipit_head_xent_mean", h, W, targets)


def tp_head_xent_mean(h, W, targets):
    """head_xent_mean with W's vocabulary rows split over tensor-parallel ranks (pipit_tp_head_xent_mean)."""
    return _g(h).call("pipit_tp_head_xent_mean", h, W, targets)


def sp_gather(x, axis):
    """Sequence parallelism: all-gather along axis (pipit_sp_gather)."""
    return _g(x).call("pipit_sp_gather", x, _axis(x, axis, "sp_gather"))


def sp_scatter(x, axis):
    """Sequence parallelism: reduce-scatter along axis (pipit_sp_scatter)."""
    return _g(x).call("pipit_sp_scatter", x, _axis(x, axis, "sp_scatter"))


def sp_split(x, axis):
    """Sequence parallelism: this rank's part along axis (pipit_sp_split)."""
    return _g(x).call("pipit_sp_split", x, _axis(x, axis, "sp_split"))


def cp_gather(x):
    """Context parallelism: every rank's rows of x [B, 2L, ...] -> [B, 2CL, ...] (pipit_cp_gather)."""
    return _g(x).call("pipit_cp_gather", x)


def topk(x, k):
    """The k largest along the last axis, largest first -> (values, i32 indices) (pipit_topk)."""
    from ctypes import byref
    from ._lib import lib
    g, idx = _g(x), S.pipit_val()
    v = g._val(lib.pipit_topk(g.ptr, x.c, int(k), byref(idx)))
    return v, Value(g, idx.id)


def take_along(x, idx):
    """x [..., N] at i32 indices idx [..., k] along the last axis (pipit_take_along)."""
    return _g(x).call("pipit_take_along", x, idx)


def pipeline_yield(x):
    """Marks a pipeline stage boundary after x (pipit_yield): the ops before
    the k-th yield form stage k."""
    return _g(x).call("pipit_yield", x)


def set_grad(param, grad):
    from ._lib import check, lib
    check(lib.pipit_set_grad(_g(param).ptr, param.c, grad.c))


__all__ = ["neg", "exp", "log", "sqrt", "rsqrt", "abs", "relu", "silu", "sigmoid", "tanh", "gelu", "sum", "mean",
           "tp_copy", "tp_sum", "tp_max", "grad_of", "add", "sub", "mul", "div", "embed", "gather", "bias_add",
           "matmul_nt", "xent_mean", "tp_xent_mean", "softmax", "log_softmax", "reduce_sum", "reduce_mean",
           "reduce_max", "matmul", "scale", "cast", "reshape", "broadcast_to", "transpose", "slice", "concat",
           "split", "rmsnorm", "layernorm", "rope", "attention", "attention_qkv", "head_xent_mean",
           "pipeline_yield", "set_grad", "tp_head_xent_mean", "sp_gather", "sp_scatter", "sp_split", "cp_gather",
           "topk", "take_along"]
