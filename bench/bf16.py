#!/usr/bin/env python3
"""bf16.py — pipit's mixed precision (--dtype bf16) against its fp32 step and
against the bf16 peers, side by side in one run.

Usage: python3 bench/bf16.py --build DIR [--quick] [--steps K --warmup W] [--rounds R]
  env: DEBIAN_PY, PEERS_PY as for bench/peers.py (whose peers and settings
       this reuses)

One invocation runs, on the same CPUs one after the other:
  DIR/bench_bf16   the bf16 GEMM against sgemm and against the CPU's peaks
                   (register-only loops: vdpbf16ps where the CPU has
                   AVX512-BF16; else the fp32 FMA peak, which is then the
                   bf16 peak: nothing multiplies bf16 faster)
and, for GPT-2 124M (V=50257 T=64 L=12 H=12 C=768 B=4; --quick: the small
GPT-2) on 1 and 2 threads (taskset -c 0 / 0,1):
  pipit f32        DIR/bench_train
  pipit bf16       the same with PIPIT_BENCH_DTYPE=bf16 (pipit_options.dtype)
  torch-debian     bench/torch_step.py --autocast bf16 (Debian python3-torch)
  torch-pypi       the same under a PyPI torch 2.x (the best-configured
                   settings of bench/peers.py: malloc, OpenMP wait, fused AdamW)
  jax              bench/jax_step.py --dtype bf16 (fp32 params cast to bf16
                   inside the jitted step: the same mixed precision as pipit's)
Every time is the median step (forward, backward, AdamW) over the timed
steps; speedup = pipit f32 ms / pipit bf16 ms (the issue's goal: >= 1.6);
best/pipit = the fastest bf16 peer's ms / pipit bf16's (> 1: pipit faster).
Peak RSS and pipit's planned arena show the memory each keeps.
"""

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import peers  # noqa: E402


def pipit_run(build, model, threads, steps, warmup, dtype):
    _, V, T, L, H, C, B, llama = model
    cmd = ["taskset", "-c", peers.cpus_for(threads), os.path.join(build, "bench_train"),
           *(str(x) for x in (V, T, L, H, C, B, threads, steps, warmup) + (llama or ()))]
    r = peers.run_json(cmd, {"PIPIT_BENCH_DTYPE": dtype}, 1800)
    if "ms_median" in r:
        r["ms_per_step"] = r["ms_median"]
    return r


def bf16_peers():
    """The peers of bench/peers.py, each told to run in bf16."""
    found, skipped = peers.find_peers()
    for p in found:
        p.extra_args += ["--dtype", "bf16"] if p.name == "jax" else ["--autocast", "bf16"]
    return found, skipped


def fmt(r, key="ms_per_step", w=10, prec=1):
    return f"{r[key]:{w}.{prec}f}" if key in r else f"{'failed':>{w}}"


def median_run(runs):
    """The run of median ms among those that did not fail (their first failure if all did)."""
    ok = sorted((r for r in runs if "ms_per_step" in r), key=lambda r: r["ms_per_step"])
    return ok[(len(ok) - 1) // 2] if ok else runs[0]


def round_ratios(runs, names):
    """Per round: the fastest peer's ms / pipit bf16's (rounds where both ran)."""
    out = []
    for k, b in enumerate(runs["pipit bf16"]):
        peer = [runs[n][k]["ms_per_step"] for n in names if "ms_per_step" in runs[n][k]]
        if peer and "ms_per_step" in b:
            out.append(min(peer) / b["ms_per_step"])
    return out


def bench_model(args, model, found):
    """pipit f32 and bf16 and the bf16 peers on one model, 1 and 2 threads: a table.
    With --rounds R, pipit bf16 and every peer run R times in turn (load that
    comes and goes on a shared machine then falls on all of them alike): each
    one's time is its median run, best/pipit the median of the rounds' ratios."""
    steps = args.steps or (10 if args.quick else 5)
    warmup = args.warmup or 2
    rows = []
    for threads in (1, 2):
        res = {"pipit f32": pipit_run(args.build, model, threads, steps, warmup, "f32")}
        print(f"  done: {model[0]} threads={threads} pipit f32", file=sys.stderr, flush=True)
        runs = {n: [] for n in ["pipit bf16"] + [p.name for p in found]}
        for k in range(args.rounds):
            runs["pipit bf16"].append(pipit_run(args.build, model, threads, steps, warmup, "bf16"))
            print(f"  done: {model[0]} threads={threads} pipit bf16 (round {k + 1})", file=sys.stderr, flush=True)
            for p in found:
                runs[p.name].append(p.run(model, threads, steps, warmup))
                print(f"  done: {model[0]} threads={threads} {p.name} bf16 (round {k + 1})", file=sys.stderr,
                      flush=True)
        res.update({n: median_run(r) for n, r in runs.items()})
        rows.append((threads, res, runs, round_ratios(runs, [p.name for p in found])))

    names = ["pipit f32", "pipit bf16"] + [p.name for p in found]
    rounds = f"; pipit bf16 and the peers: the median of {args.rounds} rounds" if args.rounds > 1 else ""
    print(f"\n== {model[0]} train step, median ms over {steps} steps after {warmup}{rounds}")
    print(f"{'thr':>3} |" + "".join(f" {n:>14}" for n in names) +
          f" | {'speedup':>7} | {'best bf16 peer':>14} {'best/pipit':>10} |"
          f" {'RSS MB f32/bf16':>16} {'arena MB f32/bf16':>18}")
    for threads, res, _, ratios in rows:
        f, b = res["pipit f32"], res["pipit bf16"]
        line = f"{threads:3d} |" + "".join(f" {fmt(res[n], w=14)}" for n in names)
        sp = f["ms_per_step"] / b["ms_per_step"] if "ms_per_step" in f and "ms_per_step" in b else None
        line += f" | {sp:7.2f}" if sp else f" | {'-':>7}"
        ok = [p.name for p in found if "ms_per_step" in res[p.name]]
        if ok and "ms_per_step" in b:
            best = min(ok, key=lambda n: res[n]["ms_per_step"])
            ratio = sorted(ratios)[(len(ratios) - 1) // 2] if ratios else res[best]["ms_per_step"] / b["ms_per_step"]
            line += f" | {best:>14} {ratio:10.2f}"
        else:
            line += f" | {'-':>14} {'-':>10}"
        line += f" | {fmt(f, 'peak_rss_mb', 7, 0)}/{fmt(b, 'peak_rss_mb', 7, 0)}"
        line += f" {fmt(f, 'arena_mb', 8, 1)}/{fmt(b, 'arena_mb', 8, 1)}"
        print(line)
    print("\n  cpu/wall (cores used; a loaded machine lends less) and peer details:")
    for threads, res, runs, ratios in rows:
        if args.rounds > 1:
            for n, r in runs.items():
                print(f"    thr={threads} {n:12} rounds ms: " + " ".join(fmt(x, w=0) for x in r))
            print(f"    thr={threads} best peer / pipit bf16 per round: " + " ".join(f"{x:.2f}" for x in ratios))
        for n in names:
            r = res[n]
            if "error" in r:
                print(f"    thr={threads} {n:12} FAILED: {r['error']}")
            else:
                print(f"    thr={threads} {n:12} cpu/wall {peers.check_mark(r, threads)}, cpu ms/step "
                      f"{r.get('cpu_ms_per_step', '?')}, loss {r.get('loss', '?')}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default="build-bench", help="folder with bench_train and bench_bf16")
    ap.add_argument("--quick", action="store_true", help="the small GPT-2 instead of 124M")
    ap.add_argument("--models", default="gpt2-124M,llama-100m",
                    help="comma-separated, from bench/peers.py's models (--quick: small)")
    ap.add_argument("--steps", type=int, default=0, help="timed steps (default 5 for 124M, 10 small)")
    ap.add_argument("--warmup", type=int, default=0, help="warm-up steps (default 2)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="pipit bf16 and the peers run this many times in turn; medians (default 1)")
    args = ap.parse_args()
    if args.rounds < 1:
        sys.exit(f"bf16.py: --rounds {args.rounds}: at least 1")
    unknown = [m for m in args.models.split(",") if m not in peers.MODELS]
    if unknown:
        sys.exit(f"bf16.py: unknown model(s) {', '.join(unknown)} in --models; known: {', '.join(peers.MODELS)}")

    print("== the bf16 GEMM and the CPU's peaks (bench_bf16)", flush=True)
    r = subprocess.run([os.path.join(args.build, "bench_bf16")], text=True)
    if r.returncode:
        print(f"bench_bf16 failed (exit {r.returncode})")

    found, skipped = bf16_peers()
    for s in skipped:
        print(f"  skipped {s}")
    models = [peers.SMALL] if args.quick else [peers.MODELS[m] for m in args.models.split(",")]
    for model in models:
        bench_model(args, model, found)
    print("\n  peers (version; settings):")
    for p in found:
        print(f"    {p.name:12} {p.version}; {p.describe()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
