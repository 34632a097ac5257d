#!/usr/bin/env bash
# test_cli_view.sh — what `pipit train` shows while it runs and after: the
# step line's progress fields ([i/N elapsed eta], MFU, bubble, peak MiB),
# MFU = achieved / stated peak, the end-of-run summary (text and
# --json-summary), and schedule SVGs (axis, legend, one title per task).
# Usage: test_cli_view.sh PIPIT SRCDIR
set -u

source "$(dirname "$0")/cli_lib.sh"
cli_setup cli_view "${1:-}"

$PY - <<'EOF' || { echo "cannot write test data"; exit 1; }
import random
r = random.Random(5)
words = ["the ", "cat ", "sat ", "on ", "a ", "mat. ", "dog ", "ran ", "to ", "park, "]
open("text.txt", "w").write("".join(r.choice(words) for _ in range(3000)))
EOF
TRAIN=("$PIPIT" train --data text.txt --ctx 16 --layers 2 --heads 2 --dim 32 --micro-batch 2)

# ---- the step line: old fields first, then [i/N m:ss eta m:ss], MFU, bubble (P > 1), peak MiB/rank
expect_ok "${TRAIN[@]}" --steps 3 --microbatches 2 --pp 2 --schedule 1f1b --peak-flops 2e9 --val-split 0.1 \
    --eval-every 2 --save v.st
STEPS=$(grep '^step ' <<<"$OUT" | grep -v 'val loss')
[ "$(wc -l <<<"$STEPS")" -eq 3 ] || fail "expected 3 step lines: $OUT"
grep -q 'MFU vs stated peak 2.0 GFLOP/s per rank x 2 ranks' <<<"$OUT" || fail "header lacks the stated peak: $OUT"
n=0
while read -r line; do
    n=$((n + 1))
    grep -Eq "^step +$((n - 1))  loss [0-9.]+  grad norm [0-9.]+  lr [0-9.e+-]+ +[0-9.]+ ms +[0-9]+ tok/s  [0-9.]+ GFLOP/s  \[$n/3 [0-9]+:[0-9]{2} eta [0-9]+:[0-9]{2}\]  MFU [0-9.]+%  bubble [0-9.]+%  peak [0-9.]+ MiB/rank$" <<<"$line" ||
        fail "step line fields: $line"
    # MFU = achieved / (2e9 FLOP/s x 2 ranks), within the printed rounding
    $PY - "$line" <<'EOF' || fail "MFU != GFLOP/s / 4 GFLOP/s: $line"
import re, sys
l = sys.argv[1]
g = float(re.search(r"([0-9.]+) GFLOP/s", l).group(1))
mfu = float(re.search(r"MFU ([0-9.]+)%", l).group(1))
assert abs(mfu - 100 * g / 4.0) <= 0.01 + 100 * 0.005 / 4.0, (g, mfu)
EOF
done <<<"$STEPS"
# one rank: no bubble; the default peak is the measured sgemm
expect_ok "${TRAIN[@]}" --steps 2
grep -q 'MFU vs measured sgemm peak [0-9.]* GFLOP/s per rank' <<<"$OUT" || fail "header lacks the measured peak: $OUT"
grep '^step ' <<<"$OUT" | grep -q bubble && fail "one rank: the line shows a bubble: $OUT"
grep '^step ' <<<"$OUT" | grep -q 'MFU [0-9.]*%' || fail "no MFU with the measured peak: $OUT"
expect_fail "--peak-flops must be a positive" "${TRAIN[@]}" --steps 1 --peak-flops -3

# ---- the summary: text (steps, tokens, wall, tok/s, best val loss, checkpoint)
expect_ok "${TRAIN[@]}" --steps 4 --microbatches 2 --val-data text.txt --eval-every 2 --eval-batches 1 --save s.st
VALS=$(sed -n 's/^step *[0-9]*  val loss \([0-9.]*\).*/\1/p' <<<"$OUT")
BEST=$(sort -g <<<"$VALS" | head -1)
SUM=$(tail -1 <<<"$OUT")
grep -Eq "^done: 4 steps, 256 tokens in [0-9]+:[0-9]{2} \([0-9.]+ s\), mean [0-9]+ tok/s; best val loss $BEST \(step [13]\); checkpoint s.st$" <<<"$SUM" ||
    fail "text summary (best val $BEST): $SUM"$'\n'"$OUT"
expect_ok "${TRAIN[@]}" --steps 1
grep -q '^done: 1 steps, 32 tokens .*no checkpoint' <<<"$(tail -1 <<<"$OUT")" || fail "summary without --save: $OUT"

# ---- JSON: without --json-summary the output is as before (step lines only); with it one last summary line
expect_ok "${TRAIN[@]}" --steps 2 --json
grep -q summary <<<"$OUT" && fail "--json alone printed a summary: $OUT"
expect_ok "${TRAIN[@]}" --steps 3 --microbatches 2 --json --json-summary --val-split 0.1 --save 'j"s.st'
$PY - "$OUT" <<'EOF' || fail "--json-summary: $OUT"
import json, sys
rows = [json.loads(l) for l in sys.argv[1].splitlines() if l.startswith("{")]  # "saved" goes to stderr
steps = [r for r in rows if "loss" in r]
vals = [r["val_loss"] for r in rows if "val_loss" in r]
s = rows[-1]["summary"]
assert list(rows[-1]) == ["summary"] and all("summary" not in r for r in rows[:-1]), rows
assert s["steps"] == 3 == len(steps) and s["tokens"] == 3 * 2 * 2 * 16, s
assert s["wall_s"] > 0 and s["tokens_per_s"] > 0, s
assert vals and s["best_val_loss"] == min(vals), (s, vals)
assert s["checkpoint"] == 'j"s.st', s
EOF
expect_ok "${TRAIN[@]}" --steps 1 --json --json-summary
$PY -c 'import json,sys; s=json.loads(sys.argv[1].splitlines()[-1])["summary"]; assert s["best_val_loss"] is None and s["checkpoint"] is None, s' "$OUT" ||
    fail "summary without validation or --save: $OUT"

# ---- schedule SVGs at S=8, M=32: valid XML, a title per task, a legend, axis ticks
check_svg() { # FILE TASKS
    $PY - "$1" "$2" <<'EOF'
import re, sys, xml.dom.minidom
d = xml.dom.minidom.parse(sys.argv[1])
want = int(sys.argv[2])
titles = [t.firstChild.data for t in d.getElementsByTagName("title")]
assert len(titles) == want, (len(titles), want)
assert all(re.fullmatch(r"(F|B|W|BW)\d+\.\d+ rank \d+: [0-9.e+-]+-[0-9.e+-]+", t) for t in titles), titles[:5]
groups = {g.getAttribute("class"): g for g in d.getElementsByTagName("g")}
assert "legend" in groups, "no legend"
legend = " ".join(t.firstChild.data for t in groups["legend"].getElementsByTagName("text"))
for k in ("F ", "B ", "W ", "BW "):
    assert k in legend + " ", (k, legend)
ticks = [t.firstChild.data for t in d.getElementsByTagName("text") if t.getAttribute("class") == "tick"]
assert len(ticks) >= 4 and all(float(x) >= 0 for x in ticks), ticks
# a label in a box (white text right after its rect) fits the box at ~6 px a character
els = [e for e in d.documentElement.childNodes if e.nodeType == e.ELEMENT_NODE]
for a, b in zip(els, els[1:]):
    if a.tagName == "rect" and b.tagName == "text" and b.getAttribute("fill") == "white":
        assert 6 * len(b.firstChild.data) < float(a.getAttribute("width")), (b.firstChild.data, a.getAttribute("width"))
EOF
}
expect_ok "$PIPIT" schedule --schedule interleaved-1f1b --pp 4 --microbatches 32 --format svg
printf '%s\n' "$OUT" >il.svg
grep -q '<title>F5.12 rank 1: 71-72</title>' il.svg || fail "no title 'F5.12 rank 1: 71-72' (stage 5 is rank 1's second chunk)"
check_svg il.svg $((2 * 8 * 32)) || fail "interleaved-1f1b S=8 M=32 SVG (F and B of 8 stages x 32 microbatches)"
# split schedules: F, B and W of every stage and microbatch (S = 4 stages, or 8 in a V / interleaved)
for case in zb-h1:4 zb-h2:4 zb-v:8 interleaved-zb:8; do
    sched=${case%%:*} S=${case##*:}
    expect_ok "$PIPIT" schedule --schedule "$sched" --pp 4 --microbatches 8 --format svg
    printf '%s\n' "$OUT" >"$sched.svg"
    check_svg "$sched.svg" $((3 * S * 8)) || fail "$sched SVG (F, B and W of $S stages x 8 microbatches)"
done
# measured: --trace x.svg
expect_ok "${TRAIN[@]}" --steps 1 --microbatches 4 --pp 2 --schedule 1f1b --trace t.svg
check_svg t.svg $((2 * 2 * 4)) || fail "measured --trace SVG (F and B of 2 stages x 4 microbatches)"

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "test_cli_view: all passed"
