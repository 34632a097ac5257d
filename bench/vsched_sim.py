#!/usr/bin/env python3
"""V-Half and V-Min against 1F1B (and ZB-V) at equal per-rank memory, from
pipit's cost model and schedule simulator (pipit sim; nothing runs).

  python3 bench/vsched_sim.py [path/to/pipit] [--hw h100]

The budget is one device's memory (what pipit sim calls "fits"). For each
pipeline size every schedule is priced at micro-batch 1 and 2 (same global
batch), without and with full recomputation; per schedule the fastest
configuration that fits is reported. The models are sized so that 1F1B
needs recomputation to fit, the situation the paper's memory dial is for.
Prints Markdown (docs/benchmarks.md)."""
import json
import subprocess
import sys

pipit = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("--") else "build/pipit"
hw = sys.argv[sys.argv.index("--hw") + 1] if "--hw" in sys.argv else "h100"
CASES = [
    dict(pp=8, layers=40, hidden=5120, heads=40, seq=8192, vocab=50304, global_batch=128),
    dict(pp=16, layers=64, hidden=6144, heads=48, seq=8192, vocab=50304, global_batch=256),
]
SCHEDS = ["1f1b", "v-min", "v-half", "zb-v"]
CONFIGS = [(b, rc) for b in (1, 2) for rc in ("none", "full")]


def sim(case, sched, b, rc):
    cmd = [pipit, "sim", "--hw", hw, "--schedule", sched, "--micro-batch", str(b), "--recompute", rc, "--json"]
    for k in ("pp", "layers", "hidden", "heads", "seq", "vocab"):
        cmd += ["--" + k, str(case[k])]
    cmd += ["--global-batch", str(case["global_batch"])]
    out = subprocess.run(cmd, capture_output=True, text=True)
    return json.loads(out.stdout) if out.returncode == 0 else None


for case in CASES:
    rows = {(s, b, rc): sim(case, s, b, rc) for s in SCHEDS for b, rc in CONFIGS}
    tokens = case["global_batch"] * case["seq"]
    cap = next(r for r in rows.values() if r)["mem_capacity"]
    print("\np = %d: GPT %d layers, hidden %d, %d heads, seq %d, global batch %d, %s (%.1f GiB a device)"
          % (case["pp"], case["layers"], case["hidden"], case["heads"], case["seq"], case["global_batch"], hw,
             cap / 2**30))
    print("\n| schedule | micro-batch | recompute | step s | tokens/s | vs 1F1B | bubble | peak GiB (fullest rank) |")
    print("|---|---|---|---|---|---|---|---|")
    best = {}
    for s in SCHEDS:
        fit = [r for r in (rows[(s, b, rc)] for b, rc in CONFIGS) if r and r["fits"]]
        best[s] = min(fit, key=lambda r: r["step_s"]) if fit else None
    base = tokens / best["1f1b"]["step_s"]
    for s in SCHEDS:
        r = best[s]
        if not r:
            print("| %s | - | - | - | - | - | - | does not fit |" % s)
            continue
        tps = tokens / r["step_s"]
        print("| %s | %d | %s | %.2f | %.0f | %+.1f%% | %.1f%% | %.1f |" % (s, r["micro_batch"], r["recompute"],
              r["step_s"], tps, 100 * (tps / base - 1), 100 * r["bubble"], r["peak_bytes_per_rank"] / 2**30))
    print("\nall priced (step s / peak GiB):\n")
    print("| schedule | " + " | ".join("b=%d %s" % c for c in CONFIGS) + " |")
    print("|---|" + "---|" * len(CONFIGS))
    for s in SCHEDS:
        print("| %s | " % s + " | ".join("%.2f / %.1f" % (rows[(s, b, rc)]["step_s"], rows[(s, b, rc)]["peak_bytes_per_rank"] / 2**30)
                                       if rows[(s, b, rc)] else "-" for b, rc in CONFIGS) + " |")
