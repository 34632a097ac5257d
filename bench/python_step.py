#!/usr/bin/env python3
"""python_step.py -- the Python-driven step against the CLI's (docs/benchmarks.md).

    PYTHONPATH=BUILD/python python3 bench/python_step.py BUILD/pipit [--model tiny] [--steps 40] [--reps 3]
        [--pp P] [--ctx T] [--micro-batch B]

Runs `pipit train --json` and pipit.Trainer on the same settings and data
(a generated text file), several alternating repetitions, and prints per
configuration the median step time pipit measured (metrics.ms, the
library's step) for each, and Python's overhead per step: the wall time of
Trainer.step() around the library's step (filling the batch through
pipit_data_batch and the model's feeds, the ctypes calls, the dict) minus
metrics.ms. The first two steps of each run are left out (page faults).
"""
import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile

import pipit


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cli")
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--pp", type=int, default=1)
    ap.add_argument("--ctx", type=int, default=None, help="override the preset's ctx")
    ap.add_argument("--micro-batch", type=int, default=None, help="override the preset's micro-batch")
    a = ap.parse_args()
    over = {k: v for k, v in (("ctx", a.ctx), ("micro_batch", a.micro_batch)) if v is not None}
    d = tempfile.mkdtemp()
    data = os.path.join(d, "text.txt")
    r = random.Random(1)
    with open(data, "w") as f:
        f.write(" ".join(r.choice(["the", "cat", "sat", "on", "a", "mat", "pipeline", "stage"]) for _ in range(200000)))
    flags = ["--data", data, "--model", a.model, "--steps", str(a.steps), "--pp", str(a.pp)]
    flags += ["--ctx", str(a.ctx)] if a.ctx else []
    flags += ["--micro-batch", str(a.micro_batch)] if a.micro_batch else []
    cli_ms, py_ms, py_wall = [], [], []
    for _ in range(a.reps):
        out = subprocess.run([a.cli, "train", "--json"] + flags, capture_output=True, text=True, check=True).stdout
        steps = [json.loads(l) for l in out.splitlines() if l.startswith('{"step"')]
        cli_ms += [s["ms"] for s in steps[2:]]
        with pipit.Trainer(pipit.models.preset(a.model, **over), data=data, steps=a.steps, pp=a.pp) as t:
            t.train()
            py_ms += [h["ms"] for h in t.history[2:]]
            py_wall += [h["python_ms"] - h["ms"] for h in t.history[2:]]
    print("model %s %s, pp %d, %d steps x %d runs each (median)" % (a.model, over or "", a.pp, a.steps, a.reps))
    print("  CLI    step (metrics.ms)   %8.2f ms" % statistics.median(cli_ms))
    print("  Python step (metrics.ms)   %8.2f ms" % statistics.median(py_ms))
    print("  Python overhead per step   %8.3f ms (Trainer.step wall - metrics.ms)" % statistics.median(py_wall))
    return 0


if __name__ == "__main__":
    sys.exit(main())
