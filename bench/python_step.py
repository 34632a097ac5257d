#!/usr/bin/env python3
"""python_step.py -- the Python-driven step against the CLI's (docs/benchmarks.md).

    PYTHONPATH=BUILD/python python3 bench/python_step.py CLI [CLI2 ...] [--model tiny] [--steps 40] [--reps 3]
        [--pp P] [--ctx T] [--micro-batch B]

Runs `pipit train --json` of each CLI given (e.g. a static build's and a
-DBUILD_SHARED_LIBS=ON build's) and pipit.Trainer on the same settings and
data (a generated text file), interleaved: each repetition runs every CLI
and Python once, in an order that rotates from one repetition to the next,
so that the machine's load falls on all of them alike. It prints per
configuration the median step time pipit measured (metrics.ms, the
library's step) for each, the median over repetitions of each CLI's
median / Python's median of the same repetition (the ratio a shared,
loaded machine still resolves), and Python's overhead per step: the wall
time of Trainer.step() around the library's step (filling the batch
through pipit_data_batch and the model's feeds, the ctypes calls, the dict)
minus metrics.ms. The first two steps of each run are left out (page
faults). The library Python loads: pipit.library_path (PIPIT_LIBRARY).

--fresh: Python's Trainer runs in a child process too (`python3
bench/python_step.py --child`, a fresh interpreter, as each CLI run is a
fresh process), not in this script's process, whose allocator has the
history of every earlier run. --env NAME=VALUE (repeatable): every
variant runs again with these variables set, interleaved with the plain
runs (an A/B of e.g. MALLOC_MMAP_THRESHOLD_=131072; implies --fresh, since
an environment variable of the allocator applies only to a new process).

--lib LIB (repeatable): Python runs over each of these libraries
(PIPIT_LIBRARY, fresh processes), the i-th paired with the i-th CLI for the
ratio: e.g. an old and a new build, `--lib OLD/libpipit_shared_check.so
--lib NEW/libpipit_shared_check.so` with the CLIs OLD/pipit NEW/pipit.

--cpu: processor time instead of wall time, for a machine others load
(its wall time is theirs as much as ours). Every variant runs as a child
process (Python's Trainer too: `python3 bench/python_step.py --child`),
twice per repetition, with --steps and with 2 steps; the child's user +
system time (getrusage of the children) of the longer run less the
shorter one's, over the steps between them, is the processor time of a
step, setup and the first steps excluded.
"""
import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile

import pipit


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cli", nargs="+")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--pp", type=int, default=1)
    ap.add_argument("--ctx", type=int, default=None, help="override the preset's ctx")
    ap.add_argument("--micro-batch", type=int, default=None, help="override the preset's micro-batch")
    ap.add_argument("--cpu", action="store_true", help="processor time per step of child processes (see above)")
    ap.add_argument("--fresh", action="store_true", help="run Python's Trainer in a child process (see above)")
    ap.add_argument("--env", action="append", default=[], help="NAME=VALUE: every variant again with it (see above)")
    ap.add_argument("--lib", action="append", default=[], help="Python over this library too (see above)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)  # the data file: run the Trainer, exit
    a = ap.parse_args()
    if a.child:
        over = {k: v for k, v in (("ctx", a.ctx), ("micro_batch", a.micro_batch)) if v is not None}
        with pipit.Trainer(pipit.models.preset(a.model, **over), data=a.child, steps=a.steps, pp=a.pp) as t:
            t.train()
            for h in t.history:  # the step's fields, as --json's lines
                print(json.dumps({"step": h.get("step"), "ms": h["ms"], "python_ms": h["python_ms"]}))
        return 0
    extra_env = dict(e.split("=", 1) for e in a.env)
    a.fresh = a.fresh or bool(extra_env) or bool(a.lib)
    over = {k: v for k, v in (("ctx", a.ctx), ("micro_batch", a.micro_batch)) if v is not None}
    d = tempfile.mkdtemp()
    data = os.path.join(d, "text.txt")
    r = random.Random(1)
    with open(data, "w") as f:
        f.write(" ".join(r.choice(["the", "cat", "sat", "on", "a", "mat", "pipeline", "stage"]) for _ in range(200000)))
    flags = ["--data", data, "--model", a.model, "--steps", str(a.steps), "--pp", str(a.pp)]
    flags += ["--ctx", str(a.ctx)] if a.ctx else []
    flags += ["--micro-batch", str(a.micro_batch)] if a.micro_batch else []
    pys = ["python"] if not a.lib else ["python:%s" % l for l in a.lib]
    names = list(a.cli) + pys
    if extra_env:
        tag = " ".join("%s=%s" % kv for kv in sorted(extra_env.items()))
        names += ["%s [%s]" % (n, tag) for n in names]
    ms = {n: [] for n in names}       # every timed step
    rep_med = {n: [] for n in names}  # per repetition: the median step
    py_wall = {n: [] for n in names}  # Python variants: Trainer.step wall - metrics.ms

    def run(name):
        base, env = name.split(" [")[0], dict(os.environ)
        if base != name:
            env.update(extra_env)
        if base.startswith("python:"):
            env["PIPIT_LIBRARY"] = base[len("python:"):]
        if base.startswith("python") and a.fresh:
            cmd = [sys.executable, os.path.abspath(__file__), "x", "--child", data, "--model", a.model,
                   "--steps", str(a.steps), "--pp", str(a.pp)]
            cmd += ["--ctx", str(a.ctx)] if a.ctx else []
            cmd += ["--micro-batch", str(a.micro_batch)] if a.micro_batch else []
            out = subprocess.run(cmd, capture_output=True, text=True, check=True, env=env).stdout
            hist = [json.loads(l) for l in out.splitlines() if l.startswith('{"step"')][2:]
            got = [h["ms"] for h in hist]
            py_wall[name].extend(h["python_ms"] - h["ms"] for h in hist)
        elif base == "python":
            with pipit.Trainer(pipit.models.preset(a.model, **over), data=data, steps=a.steps, pp=a.pp) as t:
                t.train()
                got = [h["ms"] for h in t.history[2:]]
                py_wall[name].extend(h["python_ms"] - h["ms"] for h in t.history[2:])
        else:
            out = subprocess.run([base, "train", "--json"] + flags, capture_output=True, text=True, check=True,
                                 env=env).stdout
            got = [s["ms"] for s in (json.loads(l) for l in out.splitlines() if l.startswith('{"step"'))][2:]
        ms[name] += got
        rep_med[name].append(statistics.median(got))

    if a.cpu:
        return cpu_times(a, names, flags, data)
    for rep in range(a.reps):
        k = rep % len(names)
        for n in names[k:] + names[:k]:
            run(n)
    print("model %s %s, pp %d, %d steps x %d interleaved runs each (medians); Python loads %s%s" %
          (a.model, over or "", a.pp, a.steps, a.reps, pipit.library_path, " (fresh processes)" if a.fresh else ""))
    for n in names:
        line = "  %-40s step (metrics.ms) %9.2f ms (runs: %s)" % (n, statistics.median(ms[n]),
                                                              " ".join("%.1f" % x for x in rep_med[n]))
        tail, b = n[len(n.split(" [")[0]):], n.split(" [")[0]
        py = (pys[a.cli.index(b)] if b in a.cli and a.cli.index(b) < len(pys) else pys[0]) + tail
        if not b.startswith("python"):
            ratios = [p / c for p, c in zip(rep_med[py], rep_med[n])]
            line += "   Python / this: %.4f (per run: %s)" % (statistics.median(ratios),
                                                            " ".join("%.3f" % x for x in ratios))
        print(line)
    for n in names:
        if py_wall[n]:
            print("  %s: Python overhead per step %8.3f ms (Trainer.step wall - metrics.ms, median of %d steps)" %
                  (n, statistics.median(py_wall[n]), len(py_wall[n])))
    return 0


def cpu_times(a, names, flags, data):
    def child_cpu(cmd):
        r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(cmd, capture_output=True, check=True)
        r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        return (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)

    def cmd(name, steps):
        f = [x if x != str(a.steps) or i == 0 or flags[i - 1] != "--steps" else str(steps) for i, x in enumerate(flags)]
        if name == "python":
            extra = ["--model", a.model, "--steps", str(steps), "--pp", str(a.pp)]
            extra += ["--ctx", str(a.ctx)] if a.ctx else []
            extra += ["--micro-batch", str(a.micro_batch)] if a.micro_batch else []
            return [sys.executable, os.path.abspath(__file__), "x", "--child", data] + extra
        return [name, "train"] + f

    per = {n: [] for n in names}
    for rep in range(a.reps):
        k = rep % len(names)
        for n in names[k:] + names[:k]:
            long_, short = child_cpu(cmd(n, a.steps)), child_cpu(cmd(n, 2))
            per[n].append((long_ - short) / (a.steps - 2) * 1e3)
    print("model %s, pp %d: processor time per step (user + system, ms; %d steps less 2, %d interleaved runs); "
          "Python loads %s" % (a.model, a.pp, a.steps, a.reps, pipit.library_path))
    for n in names:
        line = "  %-40s %9.2f ms (runs: %s)" % (n, statistics.median(per[n]), " ".join("%.1f" % x for x in per[n]))
        if n != "python":
            ratios = [p / c for p, c in zip(per["python"], per[n])]
            line += "   Python / this: %.4f (runs: %s)" % (statistics.median(ratios), " ".join("%.3f" % x for x in ratios))
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
