"""Thread-count check shared by the benchmark peers (bench/torch_step.py,
bench/jax_step.py): CPU time over wall time of the timed steps, and how many
of the process's threads were busy in them.

Settings (OMP_NUM_THREADS, MKL_NUM_THREADS, XLA_FLAGS, taskset, ...) say how
many threads a library should use; this measures how many it did. Over the
timed steps, cpu_per_wall = process CPU seconds / wall seconds is the mean
number of cores in use: it is at most the thread count when the pinning
works (spin-waiting threads count as busy, so it is an upper bound on the
useful work); sys_per_wall is its kernel part (page faults of fresh
mmaps show up there) and minor_faults_per_step the page faults per step.
busy_threads counts the OS threads (/proc/self/task) that
each used at least 10 % of the wall time.
"""

import os
import resource
import time

_TICK = os.sysconf("SC_CLK_TCK")


def _task_ticks():
    out = {}
    try:
        tids = os.listdir("/proc/self/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/self/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[tid] = int(fields[11]) + int(fields[12])  # utime + stime
    return out


class ThreadMeter:
    def start(self):
        self.t0 = _task_ticks()
        self.r0 = resource.getrusage(resource.RUSAGE_SELF)
        self.c0 = time.process_time()
        self.w0 = time.perf_counter()

    def stop(self, steps):
        wall = time.perf_counter() - self.w0
        cpu = time.process_time() - self.c0
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        t1 = _task_ticks()
        busy = sum(1 for tid, v in t1.items() if (v - self.t0.get(tid, 0)) / _TICK >= 0.1 * wall)
        return {"cpu_per_wall": round(cpu / wall, 3) if wall > 0 else None,
                "sys_per_wall": round((r1.ru_stime - self.r0.ru_stime) / wall, 3) if wall > 0 else None,
                "cpu_ms_per_step": round(cpu * 1e3 / max(steps, 1), 1),
                "minor_faults_per_step": round((r1.ru_minflt - self.r0.ru_minflt) / max(steps, 1)),
                "busy_threads": busy, "os_threads": len(t1),
                "timed_wall_s": round(wall, 3)}


def peak_rss_mb():
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)


def env_settings():
    """The environment variables that steer threads and malloc, as set."""
    keys = ("OMP_NUM_THREADS", "OMP_WAIT_POLICY", "OMP_PROC_BIND", "OPENBLAS_NUM_THREADS",
            "MKL_NUM_THREADS", "MKL_DYNAMIC", "KMP_BLOCKTIME", "XLA_FLAGS", "GLIBC_TUNABLES")
    return {k: os.environ[k] for k in keys if k in os.environ}


def affinity():
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return None


def threads_from_argv(argv):
    """--threads N from the command line, read before argparse runs: the
    thread settings must be in the environment before torch / jax load."""
    n = "1"
    for i, a in enumerate(argv):
        if a == "--threads" and i + 1 < len(argv):
            n = argv[i + 1]
        elif a.startswith("--threads="):
            n = a.split("=", 1)[1]
    return n


def add_step_args(ap):
    """The model / batch / timing options every step script takes."""
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--ctx", type=int, required=True)
    ap.add_argument("--layers", type=int, required=True)
    ap.add_argument("--heads", type=int, required=True)
    ap.add_argument("--dim", type=int, required=True)
    ap.add_argument("--micro-batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--arch", choices=("gpt2", "llama"), default="gpt2")
    ap.add_argument("--kv-heads", type=int, default=0, help="llama: key/value heads (0: --heads)")
    ap.add_argument("--ffn-hidden", type=int, default=0, help="llama: MLP width (0: 4 x --dim)")
    ap.add_argument("--tied", action="store_true", help="llama: lm head tied to the embedding")


def llama_cfg(args):
    """The Llama of tests/llama_init.py the step options describe."""
    import llama_init
    return llama_init.Cfg(args.vocab, args.dim, args.layers, args.heads, args.kv_heads or args.heads,
                          args.ffn_hidden or 4 * args.dim, tied=args.tied, max_ctx=args.ctx)


def config_of(args):
    out = {"arch": args.arch, "vocab": args.vocab, "ctx": args.ctx, "layers": args.layers, "heads": args.heads,
           "dim": args.dim, "micro_batch": args.micro_batch, "threads": args.threads,
           "steps": args.steps, "warmup": args.warmup}
    if args.arch == "llama":
        out.update({"kv_heads": args.kv_heads or args.heads, "ffn_hidden": args.ffn_hidden or 4 * args.dim,
                    "tied": args.tied})
    return out


def process_report(check):
    """The fields every step script ends its JSON with: the thread check of
    the timed steps, the CPUs it ran on, the settings and the peak RSS."""
    return {"affinity": affinity(), "env": env_settings(), "peak_rss_mb": peak_rss_mb(), **check}
