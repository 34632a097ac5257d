#!/usr/bin/env python3
"""peers.py — pipit's train step against the best-configured peers, side by side.

Usage: python3 bench/peers.py --build DIR [--quick] [--models small,gpt2-124M,llama-100m] [--sweep]
  env: DEBIAN_PY=/usr/bin/python3         Debian's python3-torch
       PEERS_PY=/tmp/venv-peers/bin/python a venv with torch 2.x and jax (PyPI)

One invocation times, for each model (the small GPT-2 V=256 T=64 L=4 H=4
C=128 B=8, GPT-2 124M V=50257 T=64 L=12 H=12 C=768 B=4, and the Llama of
`--model llama-100m`, V=50257 T=64 L=10 H=12 KV=4 C=768 F=2048 tied, B=4;
--models picks some) and each thread count (1, 2), one after the other on
the same CPUs (taskset -c 0 / 0,1):

  pipit          DIR/bench_train (its OpenBLAS sgemm ceiling is measured in
                 the same process, on the same threads)
  torch-debian   bench/torch_step.py under Debian's python3-torch (OpenBLAS),
                 with the glibc malloc tunables and OpenMP wait policy below
  torch-pypi     bench/torch_step.py under a PyPI torch 2.x (MKL), fused AdamW
  jax            bench/jax_step.py (jax.jit, whole step in one jitted function)

A peer that is not installed is skipped with the command that installs it.
Every peer gets the thread count through its own knobs (OMP/OpenBLAS/MKL
thread counts, torch.set_num_threads, XLA flags) AND taskset; the thread
check (cpu/wall over the timed steps, see bench/peer_meter.py) is printed
next to each time and marked "OVER" if a peer used more cores than threads.
Times are medians over the timed steps (warm-up steps excluded); the ratio
is the best peer's ms / pipit's ms (> 1: pipit is faster).

--sweep times the settings the "best-configured" choices below come from
(malloc tunables x OpenMP wait policy x AdamW implementation, on torch-debian
and torch-pypi) instead of the comparison.
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEBIAN_PY = os.environ.get("DEBIAN_PY", "/usr/bin/python3")
PEERS_PY = os.environ.get("PEERS_PY", "/tmp/venv-peers/bin/python")
VENV_HINT = ("python3 -m venv /tmp/venv-peers && /tmp/venv-peers/bin/pip install torch jax numpy"
             "   (or PEERS_PY=<a python with them>)")

# glibc malloc settings (GLIBC_TUNABLES). By default glibc serves every
# block above a dynamic threshold (128 KiB, rising to at most 32 MiB) with
# its own mmap and gives it back with munmap when freed, and trims the heap
# top above 128 KiB: every step of a training loop then maps its
# activations and gradients afresh, and the kernel zero-fills every page
# again (page faults, a large sys time). "nommap" turns mmap off for
# malloc (mmap_max=0: every block comes from the heap, which grows with
# brk) and never trims the heap (trim_threshold = 64 GiB), so memory freed
# by one step is reused by the next without a system call or a page fault.
# A fixed mmap_threshold above the largest block (thr4g) does the same; one
# of 32 MiB (thr32m, the top of the dynamic range) does half of it for the
# 124M model, whose logits and their gradient ([256, 50257]) are 51 MB.
MALLOC = {
    "default": None,
    "thr32m": "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=68719476736",
    "thr4g": "glibc.malloc.mmap_threshold=4294967296:glibc.malloc.trim_threshold=68719476736",
    "nommap": "glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736",
}

# The best-configured peers: the settings --sweep found fastest here (see
# docs/benchmarks.md, "Peers"). name -> (malloc, OMP_WAIT_POLICY, AdamW).
# On more than one thread the OpenMP wait policy is decided in the run
# itself: both are timed and the faster one is the peer's time (details
# print both). On one thread OpenMP has no other thread to wait for.
BEST = {
    "torch-debian": ("nommap", "passive", "loop"),
    "torch-pypi": ("nommap", "passive", "fused"),
}
WAITS = ("passive", "active")

# (name, V, T, L, H, C, B, Llama's (KV, F, tied) or None for GPT-2)
SMALL = ("small", 256, 64, 4, 4, 128, 8, None)
GPT2 = ("gpt2-124M", 50257, 64, 12, 12, 768, 4, None)
LLAMA = ("llama-100m", 50257, 64, 10, 12, 768, 4, (4, 2048, 1))
MODELS = {m[0]: m for m in (SMALL, GPT2, LLAMA)}


def cpus_for(threads):
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < threads:
        sys.exit(f"peers.py: {threads} threads asked, {len(cpus)} CPUs available")
    return ",".join(str(c) for c in cpus[:threads])


def probe(py, code):
    """What `py -c code` prints, or None when it fails (peer not installed)."""
    if not (os.path.isfile(py) and os.access(py, os.X_OK)):
        return None
    try:
        r = subprocess.run([py, "-c", code], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return r.stdout.strip() if r.returncode == 0 else None


def run_json(cmd, env_extra, timeout):
    env = dict(os.environ)
    for k in ("OMP_WAIT_POLICY", "GLIBC_TUNABLES", "XLA_FLAGS"):
        env.pop(k, None)
    env.update({k: v for k, v in env_extra.items() if v is not None})
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {timeout} s"}
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode or not lines:
        tail = (r.stderr.strip().splitlines() or ["?"])[-1]
        return {"error": f"exit {r.returncode}: {tail[:200]}"}
    return json.loads(lines[-1])


class Peer:
    def __init__(self, name, py, script, version, settings, extra_args=()):
        self.name, self.py, self.script, self.version = name, py, script, version
        self.settings = settings  # env additions
        self.extra_args = list(extra_args)

    def cmd(self, model, threads, steps, warmup):
        _, V, T, L, H, C, B, llama = model
        arch = [] if not llama else ["--arch", "llama", "--kv-heads", str(llama[0]), "--ffn-hidden", str(llama[1])] + (
            ["--tied"] if llama[2] else [])
        return ["taskset", "-c", cpus_for(threads), self.py, os.path.join(HERE, self.script),
                "--vocab", str(V), "--ctx", str(T), "--layers", str(L), "--heads", str(H),
                "--dim", str(C), "--micro-batch", str(B), "--threads", str(threads),
                "--steps", str(steps), "--warmup", str(warmup)] + arch + self.extra_args

    def run(self, model, threads, steps, warmup):
        if threads == 1 or "OMP_WAIT_POLICY" not in self.settings:
            return run_json(self.cmd(model, threads, steps, warmup), self.settings, 900)
        tried = {}
        for wait in WAITS:
            tried[wait] = run_json(self.cmd(model, threads, steps, warmup),
                                   {**self.settings, "OMP_WAIT_POLICY": wait}, 900)
        ok = [w for w in WAITS if "ms_per_step" in tried[w]]
        best = min(ok, key=lambda w: tried[w]["ms_per_step"]) if ok else WAITS[0]
        r = tried[best]
        r["wait"] = best
        r["wait_ms"] = {w: round(tried[w].get("ms_per_step", float("nan")), 1) for w in WAITS}
        return r

    def describe(self):
        env = " ".join(("OMP_WAIT_POLICY=passive|active (1 thread: passive; more: the faster, both timed)"
                        if k == "OMP_WAIT_POLICY" else f"{k}={v}")
                       for k, v in self.settings.items() if v is not None)
        return f"{env} {os.path.basename(self.py)} bench/{self.script} {' '.join(self.extra_args)}".strip()


def torch_peer(name, py, malloc, wait, adamw):
    return Peer(name, py, "torch_step.py", None,
                {"GLIBC_TUNABLES": MALLOC[malloc], "OMP_WAIT_POLICY": wait}, ["--adamw", adamw])


def find_peers():
    """(available peers, skipped lines)."""
    peers, skipped = [], []
    v = probe(DEBIAN_PY, "import torch, re; print(torch.__version__, "
                         "re.search(r'BLAS_INFO=(\\w+)', torch.__config__.show()).group(1))")
    if v:
        p = torch_peer("torch-debian", DEBIAN_PY, *BEST["torch-debian"])
        p.version = f"torch {v.split()[0]} (Debian python3-torch), BLAS {v.split()[1]}"
        peers.append(p)
    else:
        skipped.append(f"torch-debian: {DEBIAN_PY} cannot import torch; to enable: "
                       "apt-get install python3-torch (tools/install_deps.sh)")
    v = probe(PEERS_PY, "import torch, re; print(torch.__version__, "
                        "re.search(r'BLAS_INFO=(\\w+)', torch.__config__.show()).group(1))")
    if v and int(v.split(".")[0]) >= 2:
        p = torch_peer("torch-pypi", PEERS_PY, *BEST["torch-pypi"])
        p.version = f"torch {v.split()[0]} (PyPI), BLAS {v.split()[1]}"
        peers.append(p)
    else:
        skipped.append(f"torch-pypi: {PEERS_PY} has no torch 2.x; to enable: {VENV_HINT}")
    v = probe(PEERS_PY, "import jax, jaxlib; print(jax.__version__, jaxlib.__version__)")
    if v:
        p = Peer("jax", PEERS_PY, "jax_step.py", None, {})
        p.version = f"jax {v.split()[0]}, jaxlib {v.split()[1]} (PyPI), XLA:CPU"
        peers.append(p)
    else:
        skipped.append(f"jax: {PEERS_PY} cannot import jax; to enable: {VENV_HINT}")
    return peers, skipped


def pipit_run(build, model, threads, steps, warmup):
    _, V, T, L, H, C, B, llama = model
    cmd = ["taskset", "-c", cpus_for(threads), os.path.join(build, "bench_train"),
           *(str(x) for x in (V, T, L, H, C, B, threads, steps, warmup) + (llama or ()))]
    r = run_json(cmd, {}, 900)
    if "ms_median" in r:
        r["ms_per_step"] = r["ms_median"]
    return r


def check_mark(r, threads):
    cw = r.get("cpu_per_wall")
    if cw is None:
        return "?"
    return f"{cw:.2f}" + (" OVER" if cw > threads * 1.05 + 0.05 else "")


def compare(args):
    peers, skipped = find_peers()
    for s in skipped:
        print(f"  skipped {s}")
    models = [SMALL] if args.quick else [MODELS[m] for m in args.models.split(",")]
    timing = {"small": (15, 3), "gpt2-124M": (7, 2), "llama-100m": (7, 2)}
    if args.quick:
        timing = {"small": (5, 2)}
    if args.steps:  # a loaded machine: fewer, longer-measured steps
        timing = {name: (args.steps, args.warmup) for name in timing}
    rows = []
    for model in models:
        steps, warmup = timing[model[0]]
        for threads in (1, 2):
            res = {"pipit": pipit_run(args.build, model, threads, steps, warmup)}
            print(f"  done: {model[0]} threads={threads} pipit", file=sys.stderr, flush=True)
            for p in peers:
                res[p.name] = p.run(model, threads, steps, warmup)
                print(f"  done: {model[0]} threads={threads} {p.name}", file=sys.stderr, flush=True)
            rows.append((model, threads, steps, warmup, res))

    names = ["pipit"] + [p.name for p in peers]
    print()
    head = f"{'model':10} {'thr':>3} |" + "".join(f" {n + ' ms':>16} {'cpu/w':>6} |" for n in names)
    head += f" {'best peer':>12} | {'best/pipit':>10} {'winner':>12} | {'sgemm GF/s':>10} {'pipit GF/s':>10} {'/ceil':>6}"
    head += f" | {'RSS MB pipit':>12} {'best peer':>9}"
    print(head)
    for model, threads, steps, warmup, res in rows:
        line = f"{model[0]:10} {threads:3d} |"
        for n in names:
            r = res[n]
            if "error" in r:
                line += f" {'failed':>16} {'':>6} |"
            else:
                line += f" {r['ms_per_step']:16.2f} {check_mark(r, threads):>6} |"
        ok = [n for n in names[1:] if "ms_per_step" in res[n]]
        p = res["pipit"]
        if ok and "ms_per_step" in p:
            best = min(ok, key=lambda n: res[n]["ms_per_step"])
            ratio = res[best]["ms_per_step"] / p["ms_per_step"]
            line += f" {best:>12} | {ratio:9.2f}x {'pipit' if ratio > 1 else best:>12} |"
        else:
            line += f" {'-':>12} | {'-':>10} {'-':>12} |"
        if "gflops" in p:
            ceil = max(p["sgemm_mlp_gflops"], p["sgemm_square_gflops"])
            line += f" {ceil:10.1f} {p['gflops']:10.1f} {p['gflops'] / ceil:6.3f}"
        if ok and "peak_rss_mb" in p:  # peak memory of the whole process, beside the fastest peer's
            line += f" | {p['peak_rss_mb']:12.0f} {res[best].get('peak_rss_mb', float('nan')):9.0f}"
        print(line)
    print()
    print("  ms = median step (forward + backward + AdamW, fp32) over the timed steps "
          f"({timing[models[0][0]][0]} small"
          + ("" if args.quick else f", {timing['gpt2-124M'][0]} for the 100M ones") + " after warm-up);")
    print("  cpu/w = process CPU time / wall time over the timed steps (mean cores used; "
          "must be <= thr, OVER if not);")
    print("  best/pipit = the fastest peer's ms / pipit's ms (> 1: pipit is faster); winner = the fastest of all;")
    print("  sgemm = best OpenBLAS cblas_sgemm GFLOP/s (256x3072x768, 1024^3) in bench_train's process,")
    print("  same taskset; GFLOP/s count (6 N + 12 L C T) per token for every peer (N = params except wpe;")
    print("  Llama: except an untied embedding).")
    one = [(m, res) for m, th, _, _, res in rows if th == 1]
    if one:
        print()
        print("  one thread by CPU time per step (process CPU ms / timed steps; a shared machine stretches")
        print("  wall time but hardly CPU time, so on a loaded machine read these; on a quiet one they match):")
        for model, res in one:
            got = {n: res[n]["cpu_ms_per_step"] for n in names if "cpu_ms_per_step" in res[n]}
            line = f"    {model[0]:9} " + "  ".join(f"{n} {v:.1f}" for n, v in got.items())
            peers_ok = [n for n in got if n != "pipit"]
            if "pipit" in got and peers_ok:
                best = min(peers_ok, key=got.get)
                line += f"  -> best {best}, best/pipit {got[best] / got['pipit']:.2f}x"
            print(line)
    print()
    print("  details (peak RSS MB, kernel time / wall and minor page faults per timed step,")
    print("  busy threads = OS threads with >= 10% of the wall time,")
    print("  torch intra/inter-op threads and its OpenMP / MKL pools, JAX compile seconds; failures):")
    for model, threads, steps, warmup, res in rows:
        for n in names:
            r = res[n]
            if "error" in r:
                print(f"    {model[0]:9} thr={threads} {n:12} FAILED: {r['error']}")
                continue
            extra = (f"rss {r.get('peak_rss_mb', '?')} MB, sys/wall {r.get('sys_per_wall', '?')}, "
                     f"page faults/step {r.get('minor_faults_per_step', '?')}")
            if "busy_threads" in r:
                extra += f", busy threads {r['busy_threads']} of {r['os_threads']}"
            if "torch_threads" in r:
                extra += f", torch threads {r['torch_threads']}/{r['interop_threads']}"
                extra += "".join(f", {k} {v}" for k, v in r.get("pool_threads", {}).items())
            if "wait_ms" in r:
                extra += ", OMP_WAIT_POLICY " + " / ".join(f"{w} {ms} ms" for w, ms in r["wait_ms"].items())
                extra += f" -> {r['wait']}"
            if "compile_s" in r:
                extra += f", compile {r['compile_s']} s"
            if "loss" in r:
                extra += f", loss {r['loss']}"
            print(f"    {model[0]:9} thr={threads} {n:12} {extra}")
    print()
    print("  peers (version; settings; command, run under taskset -c 0 / 0,1):")
    print(f"    {'pipit':12} {os.path.join(args.build, 'bench_train')} V T L H C B threads steps warmup")
    for p in peers:
        print(f"    {p.name:12} {p.version}")
        print(f"    {'':12} {p.describe()}")


def sweep(args):
    """Settings sweep for the torch peers on one model / thread count, one
    knob at a time (malloc, then the OpenMP wait policy with the best malloc,
    then the AdamW implementation with both): 6-7 runs per peer. Picks by
    CPU ms per step on one thread, by wall ms on more."""
    model = MODELS[args.sweep_model]
    steps, warmup = (15, 3) if model is SMALL else (5, 2)
    pys = []
    if probe(DEBIAN_PY, "import torch") is not None:
        pys.append(("torch-debian", DEBIAN_PY, ("loop", "foreach")))
    if probe(PEERS_PY, "import torch") is not None:
        pys.append(("torch-pypi", PEERS_PY, ("loop", "foreach", "fused")))
    th = args.sweep_threads
    print(f"sweep: {model[0]}, threads {th}, median of {steps} steps after {warmup}")
    print("(cpu ms = process CPU time per step: what to compare when the machine is shared and"
          " the runs get less than their cores)")
    print(f"{'peer':12} {'malloc':8} {'wait':8} {'adamw':8} | {'ms':>9} {'cpu ms':>9} {'cpu/w':>6} {'sys/w':>6} "
          f"{'faults/step':>11} {'rss MB':>7}")
    for name, py, adamws in pys:
        seen = {}

        def one(malloc, wait, adamw):
            if (malloc, wait, adamw) not in seen:
                r = torch_peer(name, py, malloc, wait, adamw).run(model, th, steps, warmup)
                # one thread: compare CPU time per step, which a shared
                # machine stretches less than wall time; more: wall time
                # (spin-waiting threads burn CPU without doing work).
                ms = r.get("cpu_ms_per_step" if th == 1 else "ms_per_step", float("inf"))
                seen[(malloc, wait, adamw)] = ms
                info = (f"{r['ms_per_step']:9.2f} {r['cpu_ms_per_step']:9.1f} {r['cpu_per_wall']:6.2f} {r['sys_per_wall']:6.2f} "
                        f"{r['minor_faults_per_step']:11d} {r['peak_rss_mb']:7.0f}" if "error" not in r
                        else f"failed: {r['error']}")
                print(f"{name:12} {malloc:8} {wait:8} {adamw:8} | {info}", flush=True)
            return seen[(malloc, wait, adamw)]

        malloc = min(MALLOC, key=lambda m: one(m, "passive", "loop"))
        wait = min(("passive", "active"), key=lambda w: one(malloc, w, "loop"))
        adamw = min(adamws, key=lambda a: one(malloc, wait, a))
        print(f"{name:12} best: malloc {malloc}, OMP_WAIT_POLICY={wait}, --adamw {adamw}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build-bench", help="folder with bench_train")
    ap.add_argument("--quick", action="store_true", help="small model only, fewer steps")
    ap.add_argument("--steps", type=int, default=0, help="timed steps per run (default: 15 small, 7 for the 100M models)")
    ap.add_argument("--warmup", type=int, default=2, help="with --steps: warm-up steps before them")
    ap.add_argument("--models", default="small,gpt2-124M,llama-100m",
                    help="comma-separated: " + ", ".join(MODELS))
    ap.add_argument("--sweep", action="store_true", help="time the torch peers' settings instead")
    ap.add_argument("--sweep-model", choices=tuple(MODELS), default="gpt2-124M")
    ap.add_argument("--sweep-threads", type=int, default=1)
    args = ap.parse_args()
    if args.sweep:
        sweep(args)
    else:
        compare(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
