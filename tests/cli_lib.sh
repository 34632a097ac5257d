# cli_lib.sh — what the CLI test scripts share (sourced, not a test):
#   cli_setup NAME PIPIT  checks the binary and python3 (else exit 77: skip),
#                         makes PIPIT absolute and cd's into a temp dir
#                         removed on exit;
#   fail MSG              counts a failure;
#   expect_fail WORDS CMD non-zero exit < 128 with output containing WORDS
#                         (case-insensitive; a regex, or a fixed string when
#                         CLI_FIXED=1);
#   expect_ok CMD         exit 0, output in $OUT;
#   cli_hf_python CODE    HFPY = a python that runs CODE (imports of the
#                         Hugging Face packages): $PIPIT_HF_PYTHON (default
#                         /tmp/venv-hf/bin/python), else $PY; empty if none.

cli_setup() {
    PIPIT=${2:?usage: $1.sh PIPIT_BINARY SOURCE_DIR}
    PY=/usr/bin/python3
    [ -x "$PIPIT" ] || { echo "SKIP: no pipit binary at $PIPIT"; exit 77; }
    PIPIT=$(realpath -- "$PIPIT") || exit 1 # the test runs in a temp dir
    [ -x "$PY" ] || { echo "SKIP: no $PY"; exit 77; }
    TMP=$(mktemp -d "${TMPDIR:-/tmp}/pipit_$1.XXXXXX") || exit 1
    trap 'rm -rf "$TMP"' EXIT
    cd "$TMP" || exit 1
}

failures=0
fail() {
    echo "FAIL: $*" >&2
    failures=$((failures + 1))
}

expect_fail() {
    local words=$1 out rc grepflags=-qi
    shift
    [ "${CLI_FIXED:-0}" = 1 ] && grepflags=-qiF
    out=$("$@" 2>&1)
    rc=$?
    if [ "$rc" -eq 0 ]; then
        fail "expected failure, got exit 0: $*"
    elif [ "$rc" -ge 128 ]; then
        fail "crashed (exit $rc): $*"$'\n'"$out"
    elif ! grep "$grepflags" -- "$words" <<<"$out"; then
        fail "message lacks '$words': $*"$'\n'"  got: $out"
    fi
}

OUT=
expect_ok() {
    local rc
    OUT=$("$@" 2>&1)
    rc=$?
    [ "$rc" -eq 0 ] || fail "exit $rc: $*"$'\n'"$OUT"
    return "$rc"
}

cli_hf_python() {
    HFPY=${PIPIT_HF_PYTHON:-/tmp/venv-hf/bin/python}
    [ -x "$HFPY" ] && "$HFPY" -c "$1" 2>/dev/null && return 0
    HFPY=$PY
    "$HFPY" -c "$1" 2>/dev/null || HFPY=
}

# cli_words_text SEED WORDS: text.txt of WORDS words drawn (Python's
# random, SEED) from a ten-word list: a small corpus every run rebuilds
# the same, with '.' and ',' but no '#'.
cli_words_text() {
    $PY - "$1" "$2" <<'PYEOF'
import random, sys
r = random.Random(int(sys.argv[1]))
words = ["the ", "cat ", "sat ", "on ", "a ", "mat. ", "dog ", "ran ", "to ", "park, "]
open("text.txt", "w").write("".join(r.choice(words) for _ in range(int(sys.argv[2]))))
PYEOF
}

# cli_loss_helpers: defines, for the scripts that compare runs' losses,
#   run LOG cmd...            stdout to LOG, stderr to LOG.err; a failure names the command
#   losses LOG                the "loss" of every --json line of LOG, one per line
#   close A_LOG B_LOG TOL WHAT every loss of B within TOL relative of A's, in order
cli_loss_helpers() {
    run() {
        local log=$1
        shift
        "$@" >"$log" 2>"$log.err" || fail "exit $?: $*"$'\n'"$(cat "$log.err")"
    }
    losses() { grep -o '"loss":[^,]*' "$1" | cut -d: -f2; }
    close() {
        $PY - "$3" <(losses "$1") <(losses "$2") <<'PYEOF' || fail "$4: $(losses "$1" | tr '\n' ' ') vs $(losses "$2" | tr '\n' ' ')"
import sys
tol = float(sys.argv[1])
a = [float(x) for x in open(sys.argv[2])]
b = [float(x) for x in open(sys.argv[3])]
sys.exit(0 if a and len(a) == len(b) and all(abs(x - y) <= tol * abs(x) for x, y in zip(a, b)) else 1)
PYEOF
    }
}
