#!/usr/bin/python3
"""MoE step speed (docs/benchmarks.md section 21): `pipit train --model
moe-100m` against the dense Llama of the same active parameters (`--model
llama-50m`) and against PyTorch running the same MoE (bench/moe_torch_step.py:
pipit's static-capacity dispatch, and transformers' dropless expert loop), on
1 and 2 threads.

Runs are interleaved (round r: every configuration once, each thread count)
so that load which comes and goes on a shared machine falls on all alike.
Per run: the median wall ms of the timed steps and the process's CPU ms per
timed step. pipit's CPU time is read from /proc/PID/stat when the warm-up
step's --json line appears and again after the last step's (so start-up,
tokenising and init are not counted); PyTorch's is time.process_time over its
timed steps. Prints one JSON line per run, then the medians and the spread
(min-max) per configuration and the ratios.

Usage: bench/moe_bench.py --pipit BUILD/pipit --torch-python PY [--rounds 3]
    [--threads 1,2] [--ctx 256 --micro-batch 2 --steps 3] [--data FILE]
    [--skip torch-hf,...]
(pipit-moe-cf1: moe-100m at --capacity-factor 1, no padded slots: the
experts' FLOPs are then the dense twin's.)
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TICK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / TICK  # utime + stime (fields 14, 15)


def run_pipit(a, model, threads, extra=()):
    cmd = [a.pipit, "train", "--model", model, *extra, "--data", a.data, "--ctx", str(a.ctx), "--micro-batch",
           str(a.micro_batch), "--steps", str(a.steps + 1), "--threads", str(threads), "--seed", "7", "--json"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    ms, c0, c1, tail = [], None, None, []
    for line in p.stdout:
        tail.append(line)
        if not line.startswith("{"):
            continue
        o = json.loads(line)
        if "step" not in o:
            continue
        if o["step"] == 0:
            c0 = cpu_s(p.pid)
        else:
            ms.append(o["ms"])
            if o["step"] == a.steps:
                c1 = cpu_s(p.pid)
    if p.wait() or c0 is None or c1 is None:
        sys.exit("moe_bench: %s failed:\n%s" % (" ".join(cmd), "".join(tail[-20:])))
    return {"ms": statistics.median(ms), "cpu_ms": (c1 - c0) / a.steps * 1e3, "ms_all": ms}


def run_torch(a, dispatch, threads):
    cmd = [a.torch_python, os.path.join(HERE, "moe_torch_step.py"), "--threads", str(threads), "--ctx", str(a.ctx),
           "--micro-batch", str(a.micro_batch), "--steps", str(a.torch_steps), "--warmup", "1"]
    if dispatch == "dense":
        cmd += ["--experts", "0", "--ffn-hidden", "1536"]
    else:
        cmd += ["--dispatch", dispatch]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode:
        sys.exit("moe_bench: %s failed:\n%s" % (" ".join(cmd), out.stderr[-2000:]))
    o = json.loads(out.stdout.strip().splitlines()[-1])
    return {"ms": o["ms_per_step"], "cpu_ms": o["cpu_ms_per_step"], "ms_all": o["ms_all"]}


CONFIGS = {
    "pipit-moe": lambda a, t: run_pipit(a, "moe-100m", t),
    "pipit-dense": lambda a, t: run_pipit(a, "llama-50m", t),
    "pipit-moe-cf1": lambda a, t: run_pipit(a, "moe-100m", t, ("--capacity-factor", "1")),
    "torch-capacity": lambda a, t: run_torch(a, "capacity", t),
    "torch-hf": lambda a, t: run_torch(a, "hf", t),
    "torch-dense": lambda a, t: run_torch(a, "dense", t),
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pipit", required=True)
    ap.add_argument("--torch-python", default="/usr/bin/python3")
    ap.add_argument("--data", default=os.path.join(HERE, "..", "README.md"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--micro-batch", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3, help="pipit's timed steps (after one warm-up step)")
    ap.add_argument("--torch-steps", type=int, default=2, help="PyTorch's timed steps (after one warm-up step)")
    ap.add_argument("--skip", default="", help="comma-separated configurations to leave out: " + ", ".join(CONFIGS))
    a = ap.parse_args()
    skip = set(filter(None, a.skip.split(",")))
    if skip - set(CONFIGS):
        ap.error("--skip: unknown %s" % ", ".join(sorted(skip - set(CONFIGS))))
    threads = [int(t) for t in a.threads.split(",")]
    res = {}
    for r in range(a.rounds):
        for t in threads:
            for name, fn in CONFIGS.items():
                if name in skip:
                    continue
                o = fn(a, t)
                o.update(round=r, threads=t, config=name, load=round(os.getloadavg()[0], 2), at=time.strftime("%H:%M:%S"))
                print(json.dumps(o), flush=True)
                res.setdefault((name, t), []).append(o)
    tokens = a.ctx * a.micro_batch
    print("\n| config | threads | median ms/step (min-max) | tokens/s | CPU ms/step (min-max) |")
    print("|---|---|---|---|---|")
    med = {}
    for (name, t), runs in sorted(res.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        ms, cpu = [o["ms"] for o in runs], [o["cpu_ms"] for o in runs]
        med[name, t] = (statistics.median(ms), statistics.median(cpu))
        print(f"| {name} | {t} | {med[name, t][0]:.0f} ({min(ms):.0f}-{max(ms):.0f}) | {tokens / med[name, t][0] * 1e3:.0f}"
              f" | {med[name, t][1]:.0f} ({min(cpu):.0f}-{max(cpu):.0f}) |")
    print()
    pairs = [("pipit-moe", o) for o in ("pipit-dense", "torch-capacity", "torch-hf")] + [
        ("pipit-moe-cf1", "pipit-dense"), ("torch-capacity", "torch-dense")]
    for t in threads:
        for one, other in pairs:
            if (one, t) in med and (other, t) in med:
                w = med[other, t][0] / med[one, t][0]
                c = med[other, t][1] / med[one, t][1]
                print(f"threads {t}: {one} tokens/s / {other}: wall {w:.3f}x, CPU {c:.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
