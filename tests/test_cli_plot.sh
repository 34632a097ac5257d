#!/usr/bin/env bash
# test_cli_plot.sh — seeing a run: `pipit plot` draws two runs' `train
# --json` logs (one with validation and a cosine lr) and the SVG, parsed
# back, holds per run one curve for the loss, the validation loss and the
# lr whose points, mapped through the panel's data and pixel ranges, are the
# log's values (to the 0.01 px the file keeps), training and validation in
# two colours, and a legend naming each log with a key per series in its
# curve's colour; a log with a non-JSON line (a diverged loss printed as
# nan) is drawn with a note. Values at the edges of double draw, promptly,
# with no nan or inf in the file and the points still the log's: steps 16
# apart near 1e17 (the tick loop ran forever, writing GBs), a loss flat at
# 1e20 and losses and lrs of +-1e308 and +-DBL_MAX (nan coordinates, exit
# 0); a tick at zero reads 0, not -0. /dev/zero (one endless line) and an
# endless stream of lines are refused; other bad input exits non-zero
# with a message. The progress bar:
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
# svgcheck.py SVG LOG...: the curves are the logs' values (exact rational
# arithmetic: ranges of 2e308 do not overflow here), training and
# validation differ in colour, each legend key has its curve's colour, the
# legend names the logs; no number in the file is nan or inf and no tick
# reads -0.
import json, math, re, sys
import xml.etree.ElementTree as ET
from fractions import Fraction as F
NS = "{http://www.w3.org/2000/svg}"
svg = ET.parse(sys.argv[1]).getroot()
logs = sys.argv[2:]
for el in svg.iter():
    for k, v in el.attrib.items():
        for num in re.findall(r"[-+]?(?:nan|inf)|[-+]?[0-9.]+(?:e[-+]?[0-9]+)?", v, re.I) if k in ("x", "y", "x1", "y1", "x2", "y2", "cx", "cy", "width", "height", "points") or k.startswith("data-") and k not in ("data-run", "data-series", "data-name") else []:
            if not math.isfinite(float(num)):
                sys.exit(f"<{el.tag[len(NS):]} {k}=\"{v[:80]}\">: not finite")
for t in svg.iter(NS + "text"):
    if t.get("class") == "tick" and not math.isfinite(float(t.text)) or re.fullmatch(r"-0(\.0*)?(e[-+]?\d+)?", t.text):
        sys.exit(f"tick label {t.text!r}")
want = {}
for log in logs:
    for line in open(log):
        if line.startswith("{"):
            d = json.loads(line)
            for key, series in (("loss", "loss"), ("val_loss", "val_loss"), ("lr", "lr")):
                if key in d and "step" in d:
                    want.setdefault((log, series), []).append((F(d["step"]), F(d[key])))
got, color = {}, {}
for g in svg.iter(NS + "g"):
    if g.get("class") != "panel":
        continue
    x0, x1, y0, y1, px0, px1, py0, py1 = (F(float(g.get("data-" + k))) for k in ("x0", "x1", "y0", "y1", "px0", "px1", "py0", "py1"))
    for pl in g.iter(NS + "polyline"):
        pts = []
        for p in pl.get("points").split():
            u, v = map(F, p.split(","))
            pts.append((x0 + (u - px0) / (px1 - px0) * (x1 - x0), y0 + (py0 - v) / (py0 - py1) * (y1 - y0)))
        tol = (F(6, 1000) * (x1 - x0) / (px1 - px0), F(6, 1000) * (y1 - y0) / (py0 - py1))
        got[(pl.get("data-run"), pl.get("data-series"))] = (pts, tol)
        color[(pl.get("data-run"), pl.get("data-series"))] = pl.get("stroke")
if set(got) != set(want):
    sys.exit(f"curves {sorted(got)} != log series {sorted(want)}")
for k, pts in want.items():
    g, (tx, ty) = got[k]
    if len(g) != len(pts):
        sys.exit(f"{k}: {len(g)} points for {len(pts)} log lines")
    for (a, b), (c, d) in zip(g, pts):
        if abs(a - c) > tx or abs(b - d) > ty:
            sys.exit(f"{k}: plotted ({float(a)}, {float(b)}) is not the log's ({float(c)}, {float(d)})")
for log in logs:
    if (log, "val_loss") in color and color[(log, "val_loss")] == color.get((log, "loss")):
        sys.exit(f"{log}: training and validation share the colour {color[(log, 'loss')]}")
keys = {(k.get("data-run"), k.get("data-series")): k.get("stroke") for k in svg.iter(NS + "line") if k.get("class") == "key"}
for k, c in color.items():
    if k[1] != "lr" and keys.get(k) != c:
        sys.exit(f"{k}: the legend's key is {keys.get(k)}, the curve {c}")
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
# nor is a line with a key twice (which loss?) or text after its object
{ head -3 run_b.jsonl; echo '{"step":3,"loss":1,"loss":9}'; echo '{"step":4,"loss":1} {"step":5,"loss":9}'; } >dup.jsonl
expect_ok "$PIPIT" plot dup.jsonl --out dup.svg
grep -q "dup.jsonl: skipped 2 lines that are not JSON (first: line 4)" <<<"$OUT" || fail "no note on the ambiguous lines: $OUT"

# values at the edges of double: drawn promptly (a file-size limit and a timeout stop a runaway), finite
printf '{"step":100000000000000000,"loss":3,"lr":0.001}\n{"step":100000000000000016,"loss":2,"lr":0.002}\n' >steps_1e17.jsonl
printf '{"step":0,"loss":1e20}\n{"step":1,"loss":1e20}\n{"step":2,"loss":1e20,"val_loss":1e20}\n' >flat_1e20.jsonl
printf '{"step":0,"loss":1e308,"lr":-1e308}\n{"step":1,"loss":-1e308,"lr":1e308}\n' >span_1e308.jsonl
printf '{"step":2,"loss":1.7976931348623157e308,"lr":0}\n{"step":3,"loss":-1.7976931348623157e308,"lr":5e-324}\n' \
    >>span_1e308.jsonl
printf '{"step":100000000000000000,"loss":3,"val_loss":3.5}\n' >one_step.jsonl
printf '{"step":0,"loss":3,"lr":0}\n{"step":5,"loss":2,"lr":0.001}\n{"step":10,"loss":1,"lr":0.0005}\n' >lr_from_0.jsonl
for log in steps_1e17 flat_1e20 span_1e308 one_step lr_from_0; do
    (ulimit -f 2048 && timeout 20 "$PIPIT" plot $log.jsonl --out $log.svg) >edge.out 2>&1
    rc=$?
    if [ "$rc" -ne 0 ]; then
        fail "plot $log.jsonl: exit $rc: $(head -c 300 edge.out)"
    else
        $PY svgcheck.py $log.svg $log.jsonl >/dev/null || fail "$log.svg: the curves are not the log's, or not finite"
    fi
done
grep -q '>-0</text>' lr_from_0.svg && fail "a tick reads -0 on an lr axis from 0"
grep -q '>0</text>' lr_from_0.svg || fail "no tick reads 0 on an lr axis from 0"

# a log is read in lines of at most 1 MiB, 1 GiB in all
expect_fail "'/dev/zero': line 1 is longer than 1 MiB" timeout 20 "$PIPIT" plot /dev/zero --out z.svg
long=$(printf 'x%.0s' {1..1000})
expect_fail "'/dev/stdin' is larger than 1 GiB" \
    bash -c 'yes "$1" | timeout 60 "$0" plot /dev/stdin --out y.svg' "$PIPIT" "$long"

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
