"""Looking before running: the stage partitioner (pipit_partition.h), the
schedule simulator and program plans (pipit_inspect.h), and the cost
simulator of whole training runs (pipit_sim.h).

    part = pipit.partition(g, loss, stages=2)       # cut a graph into stages
    loss, = part.apply(g, loss)                     # yields placed
    r = pipit.Schedule("1f1b", 4, 0, 8).simulate()  # step time, bubble, grid
    rep = pipit.simulate("h100", layers=32, hidden=4096, heads=32, seq=4096, vocab=128256,
                         micro_batch=1, global_batch=512, tp=8, pp=4, dp=4)
    rep.summary["mfu"]; prog.plan()["ranks"][0]["arena_bytes"]

Thin wrappers: every number comes from the C library. The text and JSON
the C functions write to a FILE * come back as str (dict for JSON)."""
import ctypes
import json
from ctypes import byref, c_char_p, c_double, c_int, c_size_t, c_void_p

from ._lib import C, S, Handle, InvalidError, check, cstr, lib, _text
from .core import Graph, Program, Schedule, Value, remat_code

__all__ = ["partition", "Partition", "SimResult", "Hardware", "simulate", "SimReport", "schedule_text",
           "plan_text", "plan", "profile_text", "profile", "mem_available", "probe_links"]

# ------------------------------------------------------- FILE * -> str

# the process's global symbols (dlopen(NULL)): the malloc/free the C library's
# open_memstream uses, also where a sanitizer's allocator is preloaded
_libc = ctypes.CDLL(None)
_libc.open_memstream.restype = c_void_p
_libc.open_memstream.argtypes = [c_void_p, c_void_p]
_libc.fclose.argtypes = [c_void_p]
_libc.free.argtypes = [c_void_p]


def _written(fn, *args):
    """What fn(FILE *, *args) writes, as str (an open_memstream)."""
    buf, size = c_void_p(), c_size_t()
    f = _libc.open_memstream(byref(buf), byref(size))
    if not f:
        raise MemoryError("open_memstream failed")
    try:
        st = fn(f, *args)
    finally:
        _libc.fclose(f)
        text = ctypes.string_at(buf.value, size.value).decode("utf-8", "replace") if buf.value else ""
        _libc.free(buf)
    check(st)
    return text


def _doubles(xs):
    if xs is None:
        return None
    xs = [float(x) for x in xs]
    return (c_double * max(1, len(xs)))(*xs)


# ------------------------------------------------------------ partition

_YIELDS = {"replace": C.PIPIT_PARTITION_REPLACE_YIELDS, "as_cuts": C.PIPIT_PARTITION_YIELDS_AS_CUTS}


class Partition(Handle):
    """The cuts pipit_partition chose (partition() makes one). Per stage:
    costs (predicted seconds of one microbatch's forward + backward),
    forward, bytes (estimated per rank), ops(s) -> (first, end) in the
    op sequence (op_nodes: the graph's node ids); simulate(schedule) ->
    predicted step seconds; apply(graph, *values) rewrites the graph with
    yields at the cuts and returns the values remapped; text() is
    pipit_partition_print's table."""
    _free = "pipit_partition_free"

    @property
    def stages(self):
        return lib.pipit_partition_stages(self._ptr)

    @property
    def costs(self):
        return [lib.pipit_partition_stage_cost(self._ptr, s) for s in range(self.stages)]

    @property
    def forward(self):
        return [lib.pipit_partition_stage_forward(self._ptr, s) for s in range(self.stages)]

    @property
    def bytes(self):
        return [lib.pipit_partition_stage_bytes(self._ptr, s) for s in range(self.stages)]

    def ops(self, s):
        a, b = c_int(), c_int()
        check(lib.pipit_partition_stage_ops(self._ptr, int(s), byref(a), byref(b)))
        return a.value, b.value

    @property
    def op_nodes(self):
        return [lib.pipit_partition_op_node(self._ptr, i) for i in range(lib.pipit_partition_num_ops(self._ptr))]

    def simulate(self, schedule):
        t = c_double()
        check(lib.pipit_partition_simulate(self._ptr, schedule.ptr, byref(t)))
        return t.value

    def apply(self, graph, *values):
        vals = (S.pipit_val * max(1, len(values)))(*[v.c for v in values])
        check(lib.pipit_partition_apply(self._ptr, graph.ptr, vals, len(values)))
        return [Value(graph, vals[i].id) for i in range(len(values))]

    def text(self):
        return _written(lib.pipit_partition_print, self._ptr)


def partition(graph, loss, stages=0, schedule=None, yields="replace", gemm_flops=0.0, mem_bandwidth=0.0,
              exp_rate=0.0, profile=None, mem_limit=0.0, optimizer_slots=0, remat=False):
    """Cuts the forward graph of `loss` into pipeline stages
    (pipit_partition): stages=S, or schedule=a Schedule (S = its stages);
    yields "replace" (ignore and remove the graph's yields) or "as_cuts"
    (cut only at them); the cost model's rates (0: the defaults); profile=
    a Program that ran steps with set_profile(); mem_limit bytes per rank.
    -> a Partition."""
    if yields not in _YIELDS:
        raise InvalidError("bad yields %r: expected replace or as_cuts" % (yields,), C.PIPIT_STATUS_INVALID)
    o = S.pipit_partition_options()
    o.schedule = schedule.ptr if schedule is not None else None
    o.stages, o.yields = int(stages), _YIELDS[yields]
    o.gemm_flops, o.mem_bandwidth, o.exp_rate = float(gemm_flops), float(mem_bandwidth), float(exp_rate)
    o.profile = profile.ptr if profile is not None else None
    o.mem_limit, o.optimizer_slots, o.remat = float(mem_limit), int(optimizer_slots), remat_code(remat)
    out = c_void_p()
    check(lib.pipit_partition(graph.ptr, loss.c, byref(o), byref(out)))
    return Partition(out.value)


# ----------------------------------------------- the schedule simulator

class SimResult(Handle):
    """A simulated schedule (Schedule.simulate): step_time, bubble, and per
    rank busy(r), peak_live(r), peak_bytes(r), tasks(r) -> [(start, end)]
    in the rank's order; grid() and svg(title) draw it."""
    _free = "pipit_sim_result_free"

    def __init__(self, ptr, schedule):
        super().__init__(ptr)
        self.schedule = schedule

    ranks = property(lambda self: lib.pipit_sim_result_ranks(self._ptr))
    step_time = property(lambda self: lib.pipit_sim_result_step_time(self._ptr))
    bubble = property(lambda self: lib.pipit_sim_result_bubble(self._ptr))

    def busy(self, rank):
        return lib.pipit_sim_result_busy(self._ptr, int(rank))

    def peak_live(self, rank):
        return lib.pipit_sim_result_peak_live(self._ptr, int(rank))

    def peak_bytes(self, rank):
        return lib.pipit_sim_result_peak_bytes(self._ptr, int(rank))

    def tasks(self, rank):
        out = []
        for i in range(lib.pipit_schedule_num_tasks(self.schedule.ptr, int(rank))):
            a, b = c_double(), c_double()
            check(lib.pipit_sim_result_task(self._ptr, int(rank), i, byref(a), byref(b)))
            out.append((a.value, b.value))
        return out

    def grid(self):
        return _written(lib.pipit_schedule_print_grid, self.schedule.ptr, self._ptr)

    def svg(self, title=""):
        return _written(lib.pipit_schedule_write_svg, self.schedule.ptr, self._ptr, cstr(title))


def _simulate(self, f=None, b=None, w=None, act_bytes=None, comm=0.0, b_delta_bytes=None, xfer=0.0, pulled=False):
    """Simulates this (checked) schedule (pipit_schedule_simulate): per-stage
    costs f, b, w and act_bytes (lists of S numbers; None: unit costs, 1
    byte), comm latency, xfer link time, pulled (rendezvous). -> SimResult."""
    arrs = [_doubles(x) for x in (f, b, w, act_bytes, b_delta_bytes)]
    for x in (f, b, w, act_bytes, b_delta_bytes):
        if x is not None and len(x) != self.stages:
            raise InvalidError("Schedule.simulate: %d costs for %d stages" % (len(x), self.stages),
                               C.PIPIT_STATUS_INVALID)
    c = S.pipit_sim_costs()
    c.f, c.b, c.w, c.act_bytes, c.b_delta_bytes = [ctypes.cast(a, c_void_p) if a is not None else None for a in arrs]
    c.comm, c.xfer, c.pulled = float(comm), float(xfer), int(bool(pulled))
    out = c_void_p()
    check(lib.pipit_schedule_simulate(self.ptr, byref(c), byref(out)))
    return SimResult(out.value, self)


def schedule_text(schedule):
    """The schedule in the text format Schedule.load reads (pipit_schedule_write)."""
    return _written(lib.pipit_schedule_write, schedule.ptr)


Schedule.simulate = _simulate
Schedule.text = schedule_text


# ---------------------------------------------------------- programs

def plan_text(program, verbose=False):
    """pipit_program_print_plan: per rank its stages, planned memory, tasks."""
    return _written(lib.pipit_program_print_plan, program.ptr, int(bool(verbose)))


def plan(program):
    """pipit_program_write_plan_json as a dict: per rank its memory
    (arena_bytes, param_bytes, grad_bytes, moment_bytes, ...) and program."""
    return json.loads(_written(lib.pipit_program_write_plan_json, program.ptr))


def profile_text(program):
    return _written(lib.pipit_program_print_profile, program.ptr)


def profile(program):
    """pipit_program_write_profile_json as a dict (after steps with set_profile())."""
    return json.loads(_written(lib.pipit_program_write_profile_json, program.ptr))


Program.plan_text, Program.plan, Program.profile_text, Program.profile = plan_text, plan, profile_text, profile


def mem_available():
    """(bytes this process may still use, what limits it) (pipit_mem_available)."""
    which = c_char_p()
    n = lib.pipit_mem_available(byref(which))
    return n, _text(which.value)


# ------------------------------------------------------ the cost simulator

class Hardware(Handle):
    """A hardware description (pipit_hw): Hardware("h100") (a built-in
    name, Hardware.builtin_names()) or a JSON file's path;
    Hardware.parse(text). name, peak_flops(dtype), mem_capacity, links
    (a dict) and set_links(**fields), json() (the text pipit_hw_load reads)."""
    _free = "pipit_hw_free"

    def __init__(self, name_or_path=None, _ptr=None):
        if _ptr is None:
            out = c_void_p()
            check(lib.pipit_hw_load(cstr(name_or_path), byref(out)))
            _ptr = out.value
        super().__init__(_ptr)

    @classmethod
    def parse(cls, text, what="json"):
        out = c_void_p()
        check(lib.pipit_hw_parse(cstr(text), cstr(what), byref(out)))
        return cls(_ptr=out.value)

    @staticmethod
    def builtin_names():
        return [_text(lib.pipit_hw_builtin_name(i)) for i in range(lib.pipit_hw_builtin_count())]

    @property
    def name(self):
        return _text(lib.pipit_hw_name(self._ptr))

    def peak_flops(self, dtype="bf16"):
        return lib.pipit_hw_peak_flops(self._ptr, cstr(dtype))

    @property
    def mem_capacity(self):
        return lib.pipit_hw_mem_capacity(self._ptr)

    @property
    def links(self):
        l = S.pipit_hw_links()
        check(lib.pipit_hw_get_links(self._ptr, byref(l)))
        return {k: getattr(l, k) for k, _ in S.pipit_hw_links._fields_}

    def set_links(self, spec=None, **fields):
        """set_links("inter=100Gbit:5us") (pipit_hw_parse_links) or
        set_links(inter_bw=..., gpus_per_node=...); fields not given stay."""
        l = S.pipit_hw_links(-1, -1, -1, -1, 0)
        if spec is not None:
            check(lib.pipit_hw_parse_links(cstr(spec), byref(l)))
        for k, v in fields.items():
            if k not in dict(S.pipit_hw_links._fields_):
                raise TypeError("set_links: unknown field %r" % k)
            setattr(l, k, v)
        check(lib.pipit_hw_set_links(self._ptr, byref(l)))

    def json(self):
        return _written(lib.pipit_hw_write, self._ptr)

    @classmethod
    def calibrate(cls, profile_path):
        """The CPU description fitted to a profile (pipit_hw_calibrate): the
        file `pipit train --profile --profile-out FILE` writes, or
        json.dump(program.profile()) of a profiled Program. Its links stay
        assumed until apply_probe()."""
        out = c_void_p()
        check(lib.pipit_hw_calibrate(cstr(profile_path), byref(out)))
        return cls(_ptr=out.value)

    def apply_probe(self, probe=None):
        """Puts measured links into the description (pipit_hw_apply_probe):
        probe is a dict of probe_links(), measured now when None (about a
        second). Returns the probe."""
        if probe is None:
            probe = probe_links()
        p = S.pipit_link_probe()
        for k, v in probe.items():
            if k not in dict(S.pipit_link_probe._fields_):
                raise TypeError("apply_probe: unknown field %r" % k)
            setattr(p, k, v)
        check(lib.pipit_hw_apply_probe(self._ptr, byref(p)))
        return probe


def probe_links():
    """Measures the links this job has (pipit_probe_links: a ping-pong through
    pipit's transport; under mpirun collective, between processes): a dict of
    pipit_link_probe (processes, hosts, per_host, intra_bw, intra_lat,
    inter_bw, inter_lat; bytes/s and s, 0 = not measured)."""
    p = S.pipit_link_probe()
    check(lib.pipit_probe_links(byref(p)))
    return {k: getattr(p, k) for k, _ in S.pipit_link_probe._fields_}


_SCHED_FIELD = "schedule"


class SimReport(Handle):
    """A simulated training step (simulate()): summary (a dict of
    pipit_sim_summary), rank_peak_bytes(r), rank_busy(r), json() (a dict:
    docs/sim.md) and text()."""
    _free = "pipit_sim_report_free"

    @property
    def summary(self):
        s = S.pipit_sim_summary()
        check(lib.pipit_sim_report_summary(self._ptr, byref(s)))
        return {k: getattr(s, k) for k, _ in S.pipit_sim_summary._fields_}

    def rank_peak_bytes(self, rank):
        return lib.pipit_sim_report_rank_peak_bytes(self._ptr, int(rank))

    def rank_busy(self, rank):
        return lib.pipit_sim_report_rank_busy(self._ptr, int(rank))

    def json(self):
        return json.loads(_written(lib.pipit_sim_report_write_json, self._ptr))

    def text(self):
        return _written(lib.pipit_sim_report_print, self._ptr)


def simulate(hw, **config):
    """One training step on `hw` (a Hardware or a name for Hardware())
    simulated by pipit_sim_run: keywords are pipit_sim_config's fields
    (layers, hidden, heads, seq, vocab, micro_batch, global_batch, tp, pp,
    dp, schedule (a name or kind), virt, zero1, dtype, recompute, ...).
    -> SimReport."""
    c = S.pipit_sim_config()
    fields = dict(S.pipit_sim_config._fields_)
    keep = []
    for k, v in config.items():
        if k not in fields:
            raise TypeError("simulate: unknown field %r (pipit_sim_config has %s)" % (k, ", ".join(sorted(fields))))
        if k == _SCHED_FIELD and isinstance(v, str):
            kind = lib.pipit_schedule_kind_from_name(cstr(v))
            if kind < 0:
                raise InvalidError("unknown schedule %r" % (v,), C.PIPIT_STATUS_INVALID)
            v = kind
        elif k == "recompute":
            v = remat_code(v)  # pipit_recompute has pipit_options.remat's values
        elif k == "dtype":
            keep.append(cstr(v))
            v = keep[-1]
        setattr(c, k, v)
    own = not isinstance(hw, Hardware)
    h = Hardware(hw) if own else hw
    try:
        out = c_void_p()
        check(lib.pipit_sim_run(byref(c), h.ptr, byref(out)))
    finally:
        if own:
            h.close()
    return SimReport(out.value)
