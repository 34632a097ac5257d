#!/usr/bin/env bash
# test_layout.sh — include directions: every `#include "..."` under src/,
# tools/, examples/ and bench/ follows the folder rules in
# tools/check_layout.py (printed in full on failure), and so does every call
# of a pipit_* / pipit__* function defined under src/ (a public header hides
# where a function lives: compile calling the runtime's pipit_adamw closed
# the circle compile -> runtime -> compile). First the checker itself, on a
# made-up tree: it must catch such a call, an internal call across the
# rules, and let the allowed directions pass.
# Usage: test_layout.sh PIPIT SRCDIR
set -u
SRC=${2:?usage: test_layout.sh PIPIT_BINARY SOURCE_DIR}
PY=$(command -v python3) || { echo "SKIP: no python3"; exit 77; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/pipit_layout.XXXXXX") || exit 1
trap 'rm -rf "$TMP"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

mkdir -p "$TMP/src/compile" "$TMP/src/runtime" "$TMP/src/models"
cat >"$TMP/src/runtime/optim.c" <<'C'
#include "compile/plan.h"
/* pipit_adamw(...) in a comment is no call */
pipit_optimizer pipit_adamw(double lr, double b1, double b2, double eps,
                            double wd) {
    return (pipit_optimizer){0, lr, b1, b2, eps, wd};
}
void pipit__runtime_helper(void) { pipit_plan_public(); }
C
cat >"$TMP/src/compile/plan.c" <<'C'
#include "pipit.h"
void pipit_plan_public(void) {}
static void apply_defaults(pipit_optimizer *op) {
    const char *s = "pipit__runtime_helper(";
    (void)s;
    *op = pipit_adamw(3e-4, 0.9, 0.95, 1e-8, 0.0);
}
static void helper(void) { pipit__runtime_helper(); }
C
cat >"$TMP/src/models/gpt.c" <<'C'
#include "pipit.h"
void pipit_model_build(void) { pipit_adamw(1e-3, 0.9, 0.95, 1e-8, 0); pipit_plan_public(); }
C
out=$("$PY" "$SRC/tools/check_layout.py" "$TMP" 2>&1)
rc=$?
[ "$rc" -eq 1 ] || fail "the checker passed (or broke) on a tree with wrong calls (exit $rc): $out"
grep -q '^src/compile/plan.c:6: src/compile may not call pipit_adamw (defined in src/runtime/)' <<<"$out" ||
    fail "compile calling the runtime's public pipit_adamw was not reported: $out"
grep -q '^src/compile/plan.c:8: src/compile may not call pipit__runtime_helper (internal' <<<"$out" ||
    fail "compile calling a runtime internal was not reported: $out"
[ "$(grep -c 'may not call' <<<"$out")" -eq 2 ] ||
    fail "expected exactly those two calls (runtime -> compile and models -> anything public are allowed): $out"

exec "$PY" "$SRC/tools/check_layout.py" "$SRC"
