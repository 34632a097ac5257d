#!/usr/bin/env bash
# test_cli_plot.sh — seeing a run: `pipit plot` draws two runs' `train
# --json` logs (one with validation and a cosine lr) and the SVG, parsed
# back, holds per run one curve for the loss, the validation loss and the
# lr whose points, mapped through the panel's data and pixel ranges, are the
# log's values (to the 0.01 px the file keeps), and a legend naming each
# log; a log with a non-JSON line (a diverged loss printed as nan) is drawn
# with a note; bad input exits non-zero with a message. The progress bar:
# on a terminal (a pty from script(1)) a redrawn "[###...] i/N" line
# appears between the step lines of --log-every; through a pipe there is
# no bar and no control character, and the step lines are the same.
# Usage: test_cli_plot.sh PIPIT SRCDIR
set -u

source "$(dirname "$0")/cli_lib.sh"
cli_setup cli_plot "${1:-}"

$PY - <<'EOF' || { echo "cannot write test data"; exit 1; }
import random
r = random.Random(9)
words = ["the ", "cat ", "sat ", "on ", "a ", "mat. ", "dog ", "ran ", "to ", "park, "]
open("text.txt", "w").write("".join(r.choice(words) for _ in range(3000)))
EOF

M=(--data text.txt --ctx 16 --layers 1 --heads 2 --dim 32 --micro-batch 4 --json)
"$PIPIT" train "${M[@]}" --steps 30 --lr 3e-3 --lr-schedule cosine --warmup 5 --val-split 0.1 --eval-every 10 \
    >run_a.jsonl 2>/dev/null || fail "train a"
"$PIPIT" train "${M[@]}" --steps 20 --lr 1e-3 >run_b.jsonl 2>/dev/null || fail "train b"
expect_ok "$PIPIT" plot run_a.jsonl run_b.jsonl --out curve.svg

cat >svgcheck.py <<'EOF'
import json, sys
import xml.etree.ElementTree as ET
NS = "{http://www.w3.org/2000/svg}"
svg = ET.parse(sys.argv[1]).getroot()
logs = sys.argv[2:]
want = {}
for log in logs:
    for line in open(log):
        if line.startswith("{"):
            d = json.loads(line)
            for key, series in (("loss", "loss"), ("val_loss", "val_loss"), ("lr", "lr")):
                if key in d and "step" in d:
                    want.setdefault((log, series), []).append((d["step"], d[key]))
got = {}
for g in svg.iter(NS + "g"):
    if g.get("class") != "panel":
        continue
    x0, x1, y0, y1, px0, px1, py0, py1 = (float(g.get("data-" + k)) for k in ("x0", "x1", "y0", "y1", "px0", "px1", "py0", "py1"))
    for pl in g.iter(NS + "polyline"):
        pts = []
        for p in pl.get("points").split():
            u, v = map(float, p.split(","))
            pts.append((x0 + (u - px0) / (px1 - px0) * (x1 - x0), y0 + (py0 - v) / (py0 - py1) * (y1 - y0)))
        tol = (0.006 * (x1 - x0) / (px1 - px0), 0.006 * (y1 - y0) / (py0 - py1))
        got[(pl.get("data-run"), pl.get("data-series"))] = (pts, tol)
if set(got) != set(want):
    sys.exit(f"curves {sorted(got)} != log series {sorted(want)}")
for k, pts in want.items():
    g, (tx, ty) = got[k]
    if len(g) != len(pts):
        sys.exit(f"{k}: {len(g)} points for {len(pts)} log lines")
    for (a, b), (c, d) in zip(g, pts):
        if abs(a - c) > tx or abs(b - d) > ty:
            sys.exit(f"{k}: plotted ({a}, {b}) is not the log's ({c}, {d})")
legend = [t.text for t in svg.iter(NS + "text") if t.get("class") == "legend"]
if legend != logs:
    sys.exit(f"legend {legend} != {logs}")
print(f"{len(got)} curves match the logs")
EOF
$PY svgcheck.py curve.svg run_a.jsonl run_b.jsonl || fail "the SVG's curves are not the logs' values"
grep -q '"val_loss"' run_a.jsonl || fail "run a logged no validation: the test proves less than it says"

# a line that is not JSON (pipit prints a diverged loss as nan) is skipped with a note
{ head -3 run_b.jsonl; echo '{"step":3,"loss":nan,"ms":1}'; tail -n +5 run_b.jsonl; } >nan.jsonl
expect_ok "$PIPIT" plot nan.jsonl --out nan.svg
grep -q "nan.jsonl: skipped 1 line that is not JSON (first: line 4)" <<<"$OUT" || fail "no note on the nan line: $OUT"

# errors
expect_fail "plot: --out is required" "$PIPIT" plot run_a.jsonl
expect_fail "give one or more logs" "$PIPIT" plot --out x.svg
expect_fail "cannot open 'nope.jsonl'" "$PIPIT" plot nope.jsonl --out x.svg
echo "step 1 loss 3" >text.log
expect_fail "'text.log' has no step lines" "$PIPIT" plot text.log --out x.svg
expect_fail "cannot write 'no/dir/x.svg'" "$PIPIT" plot run_a.jsonl --out no/dir/x.svg

# ---- the progress bar: a terminal gets it, a pipe does not
T=(train --data text.txt --ctx 16 --layers 1 --heads 2 --dim 32 --micro-batch 4 --steps 12 --log-every 5)
"$PIPIT" "${T[@]}" >pipe.out 2>&1 || fail "train through a pipe"
if grep -q $'\r\|\033' pipe.out; then fail "control characters in piped output: $(cat -v pipe.out)"; fi
[ "$(grep -c '^step' pipe.out)" -eq 4 ] || fail "--log-every 5 of 12 steps: expected steps 0 5 10 11: $(cat pipe.out)"
if ! command -v script >/dev/null; then
    echo "SKIP part: no script(1) to give the run a terminal"
else
    script -qec "$(printf '%q ' "$PIPIT" "${T[@]}")" /dev/null >tty.out 2>&1 || fail "train on a pty: $(cat -v tty.out)"
    grep -q '\[#*\.*\] 3/12 ' tty.out || fail "no progress bar at step 3 on a terminal: $(cat -v tty.out)"
    $PY - <<'EOF' || fail "the terminal's step lines differ from the pipe's"
import re
strip = lambda s: re.sub(r"\s+\d+\.\d+ ms.*", "", s)  # timings (and their widths) differ between runs
def lines(path):
    text = open(path, errors="replace", newline="").read().replace("\r\n", "\n")
    text = re.sub(r"\[#*\.*\] [^\r\n]*\r\x1b\[K", "", text)  # a bar, then its erasure
    return [strip(l) for l in text.split("\n") if l.startswith("step")]
a, b = lines("tty.out"), lines("pipe.out")
assert a == b and len(a) == 4, (a, b)
EOF
fi

if [ "$failures" -ne 0 ]; then
    echo "test_cli_plot: $failures failure(s)" >&2
    exit 1
fi
echo "test_cli_plot: ok"
