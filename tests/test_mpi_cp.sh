#!/usr/bin/env bash
# test_mpi_cp.sh — context parallelism under mpirun: one world rank per
# process gives the bits of the threads run of the same mesh (losses and
# the saved checkpoint), GPT-2 and Llama, --cp 2 alone, with --pp 2 and
# with --tp 2 --dp 2, and with packed documents (--doc-sep: the document
# ids' i32 all-gather too): the group's all-gather and rank-order
# reduce-scatter over the MPI transport, its message tags included; Llama
# at --pp 2 over TCP, and packed documents on two emulated hosts.
# Usage: test_mpi_cp.sh PIPIT_CLI SOURCE_DIR   (exit 77: skipped)
set -u
source "$(dirname "$0")/mpi_lib.sh"
mpi_setup "$1" "$2" mpi_cp
GPT2=(--data corpus.txt --ctx 16 --layers 2 --heads 4 --dim 32 --micro-batch 2 --lr 3e-3 --seed 3 --json)
LLAMA=(--data corpus.txt --model llama-tiny --ctx 16 --layers 2 --dim 32 --kv-heads 2 --ffn-hidden 48
       --micro-batch 2 --lr 3e-3 --seed 3 --json)
same_as_threads "GPT2 C=2" 2 self,vader "${GPT2[@]}" --cp 2 --microbatches 2 --steps 2
same_as_threads "GPT2 C=2 P=2" 4 self,vader "${GPT2[@]}" --cp 2 --pp 2 --microbatches 2 --steps 2
same_as_threads "GPT2 C=2 packed documents" 2 self,vader "${GPT2[@]}" --cp 2 --doc-sep 32 --microbatches 2 --steps 2
same_as_threads "LLAMA C=2 T=2 D=2" 8 self,vader "${LLAMA[@]}" --cp 2 --tp 2 --dp 2 --microbatches 1 --steps 2
same_as_threads "LLAMA C=2 P=2 tcp" 4 self,tcp "${LLAMA[@]}" --cp 2 --pp 2 --microbatches 2 --steps 2
# the context group's two ranks on two emulated hosts: every gather of K, V
# and the document ids and every reduce-scatter crosses the link
same_on_hosts "LLAMA C=2 packed documents" 2 "${LLAMA[@]}" --cp 2 --doc-sep 32 --microbatches 2 --steps 2
mpi_done
