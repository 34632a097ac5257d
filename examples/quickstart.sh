#!/usr/bin/env bash
# The main job: install packages, build, and train a small GPT-2 on text that
# ships with the repository (its own sources and docs, as bytes), pipelined
# over 2 ranks (2 stages, 1F1B, 4 microbatches a step), showing the loss
# fall; then evaluate the saved checkpoint. About a minute on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install_deps.sh --main # build + run only: the tests install the rest (.ci/run)
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release
cmake --build build -j "$(nproc)"
corpus=build/corpus.txt
cat README.md docs/*.md src/*/*.c src/*/*/*.c tools/*.c > "$corpus"
./build/pipit train --data "$corpus" --ctx 64 --layers 4 --heads 4 --dim 128 \
  --micro-batch 4 --microbatches 4 --pp 2 --schedule 1f1b --steps 150 --lr 2e-3 \
  --weight-decay 0.1 --clip 1.0 --save build/quickstart.safetensors "$@"
./build/pipit eval --init build/quickstart.safetensors --data "$corpus" --ctx 64 \
  --micro-batch 8 --batches 8
