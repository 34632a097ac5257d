#!/usr/bin/env bash
# test_mpi_zero.sh — ZeRO-3 under mpirun (one world rank per process, the
# parameters all-gathered over the transport before each step's loop):
# `mpirun -np 4 pipit train --pp 2 --dp 2 --zero 3` prints the losses and
# saves the checkpoint bytes of the threads run, which are ZeRO-1's; so
# does --reshard-after-forward (each param gathered per task).
# Usage: test_mpi_zero.sh PIPIT_CLI SOURCE_DIR   (exit 77: skipped)
set -u
source "$(dirname "$0")/mpi_lib.sh"
mpi_setup "$1" "$2" mpi_zero
MODEL=(--data corpus.txt --ctx 16 --layers 4 --heads 2 --dim 16 --micro-batch 2 --lr 3e-3 --weight-decay 0.1
       --clip 1.0 --seed 3 --json)
same_as_threads "zero3 1f1b P=2 D=2 vader" 4 self,vader "${MODEL[@]}" --pp 2 --dp 2 --zero 3 --microbatches 4 --steps 2
"$CLI" train "${MODEL[@]}" --pp 2 --dp 2 --zero1 --microbatches 4 --steps 2 --save z1.st > z1.log || fail "zero1 reference"
cmp -s t.st z1.st || fail "--zero 3 saved other bytes than --zero1"
# per-task gathers (--reshard-after-forward): many more messages, the same bytes
same_as_threads "zero3 reshard 1f1b P=2 D=2 vader" 4 self,vader "${MODEL[@]}" --pp 2 --dp 2 --zero 3 \
    --reshard-after-forward --microbatches 4 --steps 2
cmp -s t.st z1.st || fail "--zero 3 --reshard-after-forward saved other bytes than --zero1"
mpi_done
