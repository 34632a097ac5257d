#!/usr/bin/env bash
# test_mpi_ep.sh — expert parallelism under mpirun: one world rank per
# process gives the bits of the threads run of the same mesh (losses and
# the saved checkpoint): moe-tiny at --dp 2 --ep 2 over shared memory
# (vader), and --pp 2 --dp 2 --ep 2 (1f1b, and DualPipeV with 4
# microbatches: overlapped pairs) over TCP, with --remat over shared memory, where every EP all-to-all
# crosses processes, and --dp 4 --ep 2 --zero 1 (the expert
# params' state sharded over their 2 holders), and --dp 2 --ep 2 across two
# emulated hosts (network namespaces, tests/netns_hosts.sh) when root.
# Usage: test_mpi_ep.sh PIPIT_CLI SOURCE_DIR   (exit 77: skipped)
set -u
source "$(dirname "$0")/mpi_lib.sh"
mpi_setup "$1" "$2" mpi_ep
MOE=(--data corpus.txt --model moe-tiny --ctx 16 --micro-batch 2 --microbatches 2 --clip 1.0 --seed 3 --json)
same_as_threads "moe-tiny D=2 E=2 vader" 2 self,vader "${MOE[@]}" --dp 2 --ep 2 --steps 3
same_as_threads "moe-tiny 1f1b P=2 D=2 E=2 tcp" 4 self,tcp "${MOE[@]}" --pp 2 --schedule 1f1b --dp 2 --ep 2 --steps 2
MOE4=(--data corpus.txt --model moe-tiny --ctx 16 --micro-batch 2 --microbatches 4 --clip 1.0 --seed 3 --json)
same_as_threads "moe-tiny dualpipev P=2 D=2 E=2 M=4 tcp (overlapped pairs)" 4 self,tcp "${MOE4[@]}" --pp 2 \
    --schedule dualpipev --dp 2 --ep 2 --steps 2
# full remat: a pair's backward runs its forward's all-to-alls again, one node in flight twice (the pair
# slot in the tags keeps their sends and fences apart)
same_as_threads "moe-tiny P=1 D=2 E=2 M=4 --remat vader (overlapped pairs)" 2 self,vader "${MOE4[@]}" --dp 2 \
    --ep 2 --remat --steps 2
same_as_threads "moe-tiny D=4 E=2 zero1 vader" 4 self,vader "${MOE[@]}" --dp 4 --ep 2 --zero 1 --steps 2
# Two emulated hosts: ranks alternate between them, so replicas 0 and 1
# (the EP group) talk across the link.
same_on_hosts "moe-tiny D=2 E=2" 2 "${MOE[@]}" --dp 2 --ep 2 --steps 2
mpi_done
