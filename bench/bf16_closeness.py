#!/usr/bin/env python3
"""bf16_closeness.py -- how far bf16 training drifts from fp32 training:
pipit's bf16 policies beside PyTorch's autocast, on the same model, the
same initial weights, the same data and the same seeds (issue 26 item 4).

For each seed S: `pipit train --model tiny --steps 0 --seed S` writes the
initial weights; from them, on the same byte data read sequentially,

  pipit f32, pipit bf16 --bf16-policy autocast (the default),
  pipit bf16 --bf16-policy all (the policy before: every activation bf16),
  tests/gpt2_torch.py (PyTorch, the same GPT-2) in fp32 and under
  torch.autocast("cpu", bfloat16),

each train --steps steps (AdamW, lr 1e-3, batch 8 x 64 bytes). Reported per
seed and run: the gap of the mean loss over the last 10 steps, bf16 against
its own framework's fp32 ((bf16 - f32) / f32), the largest gap of any
single step, the mean |gap| over the steps and over the first 10 steps
(before the run's loss spikes, where each run meets them at its own step,
amplify the difference). The verdict line says whether pipit's widest |last-10 gap|
over the seeds is no wider than PyTorch's.

Usage: python3 bench/bf16_closeness.py [--pipit build/pipit] [--seeds 1-6]
           [--steps 120] [--data FILE] [--torch-python /usr/bin/python3]
           [--no-all] [--json OUT]
       python3 bench/bf16_closeness.py --table OUT.json   (the table again)
The default data is Debian's license texts (GPL-3, GPL-2, Apache-2.0), as
tests/test_bf16_train.sh uses. Runs one process at a time, one thread each.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.dirname(HERE)
LICENSES = ["/usr/share/common-licenses/" + n for n in ("GPL-3", "GPL-2", "Apache-2.0")]


def losses(text):
    out = []
    for line in text.splitlines():
        if line.startswith("{") and '"loss"' in line:
            r = json.loads(line)
            if "step" in r:
                out.append(float(r["loss"]))
    return out


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stdout[-3000:]}")
    return p.stdout


def gaps(b, f, last=10, first=10):
    """(last-`last` mean gap, largest single-step |gap|, mean |gap| per
    step, mean |gap| over the first `first` steps), relative to f."""
    fl, bl = sum(f[-last:]), sum(b[-last:])
    g = [abs(x - y) / y for x, y in zip(b, f)]
    return (bl - fl) / fl, max(g), sum(g) / len(g), sum(g[:first]) / len(g[:first])


def seeds_of(spec):
    if "-" in spec:
        a, b = spec.split("-")
        return list(range(int(a), int(b) + 1))
    return [int(s) for s in spec.split(",")]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pipit", default=os.path.join(SRC, "build", "pipit"))
    ap.add_argument("--seeds", default="1-6")
    ap.add_argument("--steps", type=int, default=120)
    ap.add_argument("--data")
    ap.add_argument("--torch-python", default="/usr/bin/python3")
    ap.add_argument("--no-torch", action="store_true")
    ap.add_argument("--torch-linear", choices=["add", "fused"], default="add",
                    help="PyTorch's biased layers: x @ W + b (the bias add promotes to fp32 under autocast) or "
                         "F.linear (bf16 out, as nn.Linear under autocast and as pipit's policy)")
    ap.add_argument("--no-all", action="store_true", help="skip --bf16-policy all (the policy before)")
    ap.add_argument("--json", help="write every curve and gap here")
    ap.add_argument("--table", help="print the table of an earlier --json file and exit")
    a = ap.parse_args()
    if a.table:
        table(json.load(open(a.table)))
        return
    tmp = tempfile.mkdtemp(prefix="bf16_closeness.")
    data = a.data
    if not data:
        data = os.path.join(tmp, "data.txt")
        with open(data, "wb") as o:
            for n in LICENSES:
                o.write(open(n, "rb").read())
    model = ["--model", "tiny", "--data", data, "--data-order", "sequential", "--lr", "1e-3", "--threads", "1"]
    torch_model = ["--data", data, "--ctx", "64", "--heads", "4", "--micro-batch", "8", "--microbatches", "1",
                   "--lr", "1e-3", "--threads", "1", "--json"]
    kinds = [("pipit autocast", "pipit", ["--dtype", "bf16", "--bf16-policy", "autocast"])]
    if not a.no_all:
        kinds.append(("pipit all (before)", "pipit", ["--dtype", "bf16", "--bf16-policy", "all"]))
    if not a.no_torch:
        kinds.append(("PyTorch autocast", "torch", ["--autocast", "bf16"]))
    result = {"steps": a.steps, "seeds": {}}
    for s in seeds_of(a.seeds):
        init = os.path.join(tmp, f"init{s}.st")
        run([a.pipit, "train", *model, "--steps", "0", "--seed", str(s), "--save-weights-only", "--save", init])
        curves = {}

        def curve(fw, extra):
            if fw == "pipit":
                return losses(run([a.pipit, "train", *model, "--init", init, "--steps", str(a.steps), "--seed",
                                   str(s), "--json", *extra]))
            return losses(run([a.torch_python, os.path.join(SRC, "tests", "gpt2_torch.py"), "--init", init,
                               *torch_model, "--steps", str(a.steps), "--linear", a.torch_linear, *extra]))

        curves["pipit f32"] = curve("pipit", ["--dtype", "f32"])
        if not a.no_torch:
            curves["PyTorch fp32"] = curve("torch", ["--autocast", "off"])
        row = {}
        for name, fw, extra in kinds:
            curves[name] = curve(fw, extra)
            ref = curves["pipit f32" if fw == "pipit" else "PyTorch fp32"]
            assert len(curves[name]) == len(ref) == a.steps, (name, len(curves[name]), len(ref))
            row[name] = gaps(curves[name], ref)
        if not a.no_torch:
            row["pipit f32 vs PyTorch fp32"] = gaps(curves["pipit f32"], curves["PyTorch fp32"])
        result["seeds"][s] = {"gaps": row, "curves": curves}
        print(f"seed {s}: " + "; ".join(f"{k} {g[0]:+.2%} (max {g[1]:.2%})" for k, g in row.items()), flush=True)
        if a.json:
            with open(a.json, "w") as o:
                json.dump(result, o)
    table(result)


def table(result):
    """Per seed and run: the last-10 gap, the largest |gap| at any step and
    the mean |gap| per step, recomputed from the curves."""
    kinds = [("pipit autocast", "pipit f32"), ("pipit all (before)", "pipit f32"), ("PyTorch autocast", "PyTorch fp32")]
    seeds = result["seeds"]
    names = [n for n, ref in kinds if all(n in r["curves"] and ref in r["curves"] for r in seeds.values())]
    refs = dict(kinds)
    g = {s: {n: gaps(r["curves"][n], r["curves"][refs[n]]) for n in names} for s, r in seeds.items()}
    print(f"\n{result['steps']} steps; per cell: last-10 gap / largest |gap| at any step / mean |gap| per step / "
          "mean |gap| over steps 0-9\n")
    print("| seed | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    for s in seeds:
        print(f"| {s} | " + " | ".join(f"{g[s][n][0]:+.2%} / {g[s][n][1]:.1%} / {g[s][n][2]:.2%} / {g[s][n][3]:.1e}"
                                       for n in names) + " |")
    worst = {n: max(abs(g[s][n][0]) for s in seeds) for n in names}
    mean = {n: sum(abs(g[s][n][0]) for s in seeds) / len(seeds) for n in names}
    print("| widest / mean \\|last 10\\| | " + " | ".join(f"{worst[n]:.2%} / {mean[n]:.2%}" for n in names) + " |")
    if "PyTorch autocast" in worst and "pipit autocast" in worst:
        ok = worst["pipit autocast"] <= worst["PyTorch autocast"]
        print(f"\npipit autocast's widest last-10 gap {worst['pipit autocast']:.2%} vs PyTorch autocast's "
              f"{worst['PyTorch autocast']:.2%}: {'no wider' if ok else 'WIDER'}")


if __name__ == "__main__":
    main()
