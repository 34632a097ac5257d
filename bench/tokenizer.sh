#!/usr/bin/env bash
# tokenizer.sh — encode speed, side by side in one run: pipit's byte-level
# BPE (build/bench_tokenize, C, one thread) against the Python `tokenizers`
# package and tiktoken (Rust, one thread) with the same vocabulary, all
# encoding the same chunks of about 4 KB (documents, as a corpus is
# encoded), after checking that all give the same ids. The corpus: the
# repository's docs and sources repeated to about MB megabytes (English
# prose and C); the vocabulary: `pipit tokenize --train VOCAB` on one copy.
# Usage: bench/tokenizer.sh [BUILD_DIR] [MB] [VOCAB]
#   PEERS_PY: a python with tokenizers (and tiktoken), default /tmp/venv-hf/bin/python:
#   python3 -m venv --system-site-packages /tmp/venv-hf && /tmp/venv-hf/bin/pip install tokenizers tiktoken
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
MB=${2:-20}
VOCAB=${3:-8192}
PY=${PEERS_PY:-/tmp/venv-hf/bin/python}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/pipit_tokbench.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
cat README.md docs/*.md src/*/*.c tools/*.c > "$TMP/one.txt"
: > "$TMP/corpus.txt"
while [ "$(stat -c %s "$TMP/corpus.txt")" -lt $((MB * 1000000)) ]; do cat "$TMP/one.txt" >> "$TMP/corpus.txt"; done
"$BUILD/pipit" tokenize --train "$VOCAB" --data "$TMP/one.txt" --out "$TMP/tok" | head -1
echo "corpus: $(stat -c %s "$TMP/corpus.txt") bytes; $(nproc) cores; $(uptime | sed 's/.*load/load/')"
"$BUILD/bench_tokenize" "$TMP/tok/tokenizer.json" "$TMP/corpus.txt" 3 4096 "$TMP/ids.bin" | tee "$TMP/pipit.txt"
if "$PY" -c "import tokenizers" 2>/dev/null; then
    "$PY" bench/tokenizer_peers.py "$TMP/tok/tokenizer.json" "$TMP/corpus.txt" "$TMP/ids.bin" 3 4096 | tee "$TMP/peers.txt"
    p=$(grep '^pipit encode: ' "$TMP/pipit.txt" | grep -o '[0-9.]* MB/s' | cut -d' ' -f1)
    for peer in tokenizers tiktoken; do
        q=$(grep "^$peer encode: [0-9]" "$TMP/peers.txt" | grep -o '[0-9.]* MB/s' | cut -d' ' -f1 || true)
        [ -n "$q" ] && echo "pipit / $peer (chunks, 1 thread): $(awk -v a="$p" -v b="$q" 'BEGIN { printf "%.2f", a / b }')x"
    done
else
    echo "no python with the tokenizers package at $PY (set PEERS_PY): pipit alone"
fi
