#!/usr/bin/env bash
# test_cli_progress.sh — the progress bar where a newcomer looks: `train
# --json > run.jsonl` on a terminal (a pty from script(1)) shows the bar on
# stderr, and the file gets the JSON lines only (each one parses, no control
# character); text output sent to a file (`train > log`) shows it on stderr
# too; with stderr not a terminal either (2> a file) there is no bar
# anywhere. (The bar on stdout between text step lines: test_cli_plot.sh.)
# Usage: test_cli_progress.sh PIPIT SRCDIR
set -u

source "$(dirname "$0")/cli_lib.sh"
cli_setup cli_progress "${1:-}"
command -v script >/dev/null || { echo "SKIP: no script(1) to give the run a terminal"; exit 77; }

$PY -c 'open("text.txt", "w").write("the cat sat on the mat. the dog ran to the park. " * 60)' ||
    { echo "cannot write test data"; exit 1; }
T=("$PIPIT" train --data text.txt --ctx 16 --layers 1 --heads 2 --dim 32 --micro-batch 4 --steps 12 --log-every 5)
q() { printf '%q ' "$@"; }

jsonl_ok() { # jsonl_ok FILE: only JSON lines, steps 0 5 10 11
    $PY - "$1" <<'EOF'
import json, sys
text = open(sys.argv[1], newline="").read()
assert "\r" not in text and "\x1b" not in text, repr(text[:200])
steps = [json.loads(l)["step"] for l in text.splitlines()]
assert steps == [0, 5, 10, 11], steps
EOF
}

# ---- --json to a file on a terminal: the bar on stderr (the pty)
script -qec "$(q "${T[@]}" --json) >run.jsonl" /dev/null >tty.out 2>&1 || fail "train --json on a pty: $(cat -v tty.out)"
grep -q '\[#*\.*\] 3/12 ' tty.out || fail "no progress bar on the terminal with --json > file: $(cat -v tty.out)"
grep -q '"step"' tty.out && fail "JSON lines on the terminal: $(cat -v tty.out)"
jsonl_ok run.jsonl || fail "run.jsonl is not the JSON lines alone: $(cat -v run.jsonl)"

# ---- text output to a file on a terminal: the bar on stderr, the lines in the file
script -qec "$(q "${T[@]}") >run.log" /dev/null >tty2.out 2>&1 || fail "train > file on a pty: $(cat -v tty2.out)"
grep -q '\[#*\.*\] 3/12 ' tty2.out || fail "no progress bar on the terminal with > file: $(cat -v tty2.out)"
if grep -q $'\r\|\033' run.log; then fail "control characters in the log file: $(cat -v run.log)"; fi
[ "$(grep -c '^step' run.log)" -eq 4 ] || fail "the log file lacks its step lines: $(cat run.log)"

# ---- stdout and stderr both files: no bar anywhere
script -qec "$(q "${T[@]}" --json) >run2.jsonl 2>err.txt" /dev/null >tty3.out 2>&1 || fail "train 2> file: $(cat -v tty3.out)"
if grep -q '\[#' tty3.out err.txt; then fail "a bar with no terminal to draw on: $(cat -v tty3.out err.txt)"; fi
if grep -q $'\r\|\033' err.txt; then fail "control characters in stderr's file: $(cat -v err.txt)"; fi
jsonl_ok run2.jsonl || fail "run2.jsonl is not the JSON lines alone: $(cat -v run2.jsonl)"

if [ "$failures" -ne 0 ]; then
    echo "test_cli_progress: $failures failure(s)" >&2
    exit 1
fi
echo "test_cli_progress: ok"
