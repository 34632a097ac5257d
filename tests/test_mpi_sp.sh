#!/usr/bin/env bash
# test_mpi_sp.sh — sequence parallelism (--tp T --sp) under mpirun: one
# world rank per process gives the bits of the threads run of the same mesh
# (losses and the saved checkpoint), GPT-2 and Llama: the all-gathers and
# reduce-scatters cross processes as the all-reduces do.
# Usage: test_mpi_sp.sh PIPIT_CLI SOURCE_DIR   (exit 77: skipped)
set -u
source "$(dirname "$0")/mpi_lib.sh"
mpi_setup "$1" "$2" mpi_sp
GPT2=(--data corpus.txt --ctx 16 --layers 4 --heads 4 --dim 32 --micro-batch 2 --lr 3e-3 --weight-decay 0.1
      --clip 1.0 --seed 3 --json)
LLAMA=(--data corpus.txt --model llama-tiny --ctx 16 --layers 4 --dim 32 --kv-heads 2 --ffn-hidden 48
       --micro-batch 2 --lr 3e-3 --weight-decay 0.1 --clip 1.0 --seed 3 --tied --json)
same_as_threads "GPT2 --sp 1f1b P=2 T=2 vader" 4 self,vader "${GPT2[@]}" --pp 2 --tp 2 --sp --microbatches 4 --steps 2
same_as_threads "LLAMA --sp zb-h1 P=2 T=2 tcp" 4 self,tcp "${LLAMA[@]}" --schedule zb-h1 --pp 2 --tp 2 --sp \
    --microbatches 4 --steps 2
echo "2 MPI meshes with --sp compared with threads"
mpi_done
