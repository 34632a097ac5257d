#!/usr/bin/env bash
# test_layout.sh — include directions: every `#include "..."` under src/,
# tools/, examples/ and bench/ follows the folder rules in
# tools/check_layout.py (printed in full on failure).
# Usage: test_layout.sh PIPIT SRCDIR
set -u
SRC=${2:?usage: test_layout.sh PIPIT_BINARY SOURCE_DIR}
PY=$(command -v python3) || { echo "SKIP: no python3"; exit 77; }
exec "$PY" "$SRC/tools/check_layout.py" "$SRC"
