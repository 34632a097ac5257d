#!/usr/bin/env bash
# test_mpi_tp.sh — the local mesh P x T x D under mpirun: one world rank per
# process (w = (d*P + p)*T + t) gives the bits of the threads run of the
# same mesh (losses and the saved checkpoint), GPT-2, Llama and MoE, over shared
# memory (vader) and TCP, with ZeRO-1, in bf16, and across two emulated hosts
# (network namespaces, tests/netns_hosts.sh: the ranks alternate between the
# hosts, so every tensor-parallel all-reduce crosses the link); a launch
# whose process count is not P x T x D is refused by every process.
# Usage: test_mpi_tp.sh PIPIT_CLI SOURCE_DIR   (exit 77: skipped)
set -u
source "$(dirname "$0")/mpi_lib.sh"
mpi_setup "$1" "$2" mpi_tp
GPT2=(--data corpus.txt --ctx 16 --layers 4 --heads 4 --dim 32 --micro-batch 2 --lr 3e-3 --weight-decay 0.1
      --clip 1.0 --seed 3 --json)
LLAMA=(--data corpus.txt --model llama-tiny --ctx 16 --layers 4 --dim 32 --kv-heads 2 --ffn-hidden 48
       --micro-batch 2 --lr 3e-3 --weight-decay 0.1 --clip 1.0 --seed 3 --tied --json)
MOE=(--data corpus.txt --model moe-tiny --ctx 16 --micro-batch 2 --shared-experts 1 --aux-loss 0.01 --seed 3 --json)
ran=0
# sched P T D btl model
for cfg in "1f1b 1 2 1 vader GPT2" "1f1b 2 2 1 vader GPT2" "zb-h1 2 2 2 vader GPT2" "interleaved-1f1b 2 2 1 vader GPT2" \
           "dualpipev 2 2 1 tcp GPT2" "gpipe 1 4 2 vader GPT2" "1f1b 2 2 1 vader LLAMA" "zb-v 2 2 1 tcp LLAMA" \
           "1f1b 2 2 1 vader MOE"; do
    set -- $cfg
    declare -n model=$6
    same_as_threads "$6 $1 P=$2 T=$3 D=$4 $5" $(($2 * $3 * $4)) "self,$5" "${model[@]}" \
        --schedule "$1" --pp "$2" --tp "$3" --dp "$4" --microbatches $((2 * $2)) --steps 2
    unset -n model
    ran=$((ran + 1))
done
same_as_threads "GPT2 1f1b P=2 T=2 D=2 zero1 vader" 8 self,vader "${GPT2[@]}" --pp 2 --tp 2 --dp 2 --zero1 \
    --microbatches 4 --steps 2
same_as_threads "GPT2 bf16 zb-h1 P=2 T=2 D=1 vader" 4 self,vader "${GPT2[@]}" --dtype bf16 --schedule zb-h1 --pp 2 \
    --tp 2 --microbatches 4 --steps 2 # the all-reduces of bf16 values add in fp32
echo "$((ran + 2)) MPI meshes compared with threads"

# A launch that does not match P x T x D: refused by every process, before a step.
mpirun -np 3 --bind-to none "$CLI" train "${GPT2[@]}" --pp 2 --tp 2 --steps 1 > b.log 2> b.err && fail "np 3 for P=2 T=2 accepted"
grep -q "this job has 3 processes, but the mesh needs P x T x D = 2 x 2 x 1 = 4" b.err ||
    fail "bad launch: no process said why: $(head -3 b.err)"
grep -q '"step"' b.log && fail "bad launch: a step ran"

# Two emulated hosts: ranks alternate between them, so each stage's T = 2
# ranks talk across the link.
same_on_hosts "GPT2 P=2 x T=2" 4 "${GPT2[@]}" --pp 2 --tp 2 --microbatches 4 --steps 2

mpi_done
