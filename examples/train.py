#!/usr/bin/env python3
"""train.py -- `pipit train` from Python: a preset (GPT-2 or Llama) on a
text file or token shards, pipelined over threads, with validation, a
table of steps and a checkpoint that `pipit eval --init` and `pipit train
--resume` read.

    PYTHONPATH=build/python python3 examples/train.py --data input.txt --model tiny --pp 2 --schedule zb-h1

The flags it shares with `pipit train` have the same meaning and defaults,
so the same flags give the same losses and the same checkpoint, bit for
bit (tests/python/test_cli_equal.py): --data --model --steps --pp --tp --sp
--dp --schedule --virtual --microbatches --micro-batch --seed --data-order
--lr --lr-schedule --warmup --dtype --threads --zero1 --zero --doc-sep --doc-pos-reset --save --resume, and the model's
--layers --heads --dim --ctx --vocab --kv-heads and a mixture of experts' --experts --top-k
--capacity-factor --dropless --shared-experts --moe-every --router
--aux-loss --balance-bias. --val-data FILE adds the
validation loss at the end (as `pipit train --val-data`).

Under `mpirun -np N python3 examples/train.py ...` (a build with MPI) each
process runs one rank, as `pipit train` does: the processes must agree on
the settings (pipit_agree), and the checkpoint is the threads run's.
"""
import argparse
import sys

import pipit


def parse(argv):
    ap = argparse.ArgumentParser(description="pipit train, driven from Python")
    ap.add_argument("--data", required=True, help="text file, token shard(s) or a spec, as pipit train --data")
    ap.add_argument("--model", default="tiny", help="preset: %s (default tiny)" % ", ".join(pipit.models.PRESETS))
    ap.add_argument("--steps", type=int, default=None, help="optimizer steps (default: the preset's, 100)")
    ap.add_argument("--pp", type=int, default=1, help="pipeline ranks P (default 1)")
    ap.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks T per stage (default 1)")
    ap.add_argument("--sp", action="store_true", help="with --tp: sequence parallelism (1/T of the sequence "
                    "between the tensor-parallel matmuls)")
    ap.add_argument("--dp", type=int, default=1, help="data-parallel replicas D (default 1)")
    ap.add_argument("--ep", type=int, default=1, help="MoE: expert-parallel ranks E over consecutive dp replicas "
                                                      "(default 1)")
    ap.add_argument("--no-a2a-overlap", action="store_true", help="with --ep: no overlapped pairs")
    ap.add_argument("--schedule", default=None, help="schedule name or file (default 1f1b; interleaved-1f1b "
                                                     "with --virtual > 1)")
    ap.add_argument("--virtual", type=int, default=0, help="stages per rank V (default: the schedule's own)")
    ap.add_argument("--microbatches", type=int, default=1, help="microbatches per step M (default 1)")
    ap.add_argument("--micro-batch", type=int, default=None, help="sequences per microbatch (default: the preset's)")
    ap.add_argument("--seed", type=int, default=1, help="seed for init and random data order (default 1)")
    ap.add_argument("--data-order", default="random", choices=["random", "sequential"])
    ap.add_argument("--lr", type=float, default=None, help="peak learning rate (default: the preset's)")
    ap.add_argument("--lr-schedule", default="constant", choices=["constant", "cosine", "linear"])
    ap.add_argument("--warmup", type=int, default=0)
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    ap.add_argument("--threads", type=int, default=1, help="compute threads per rank (default 1)")
    ap.add_argument("--recompute", default="none", choices=["none", "pointwise", "full"],
                    help="what the backward computes again instead of keeping (default none)")
    ap.add_argument("--zero1", action="store_true", help="with --dp: shard the optimizer state (ZeRO-1)")
    ap.add_argument("--zero", type=int, default=0, help="with --dp: ZeRO stage 0..3 over the replicas (default 0)")
    ap.add_argument("--doc-sep", type=int, default=-1, help="packed documents: token ID ends a document "
                                                            "(default: none)")
    ap.add_argument("--doc-pos-reset", action="store_true", help="with --doc-sep: GPT-2's positions restart "
                                                                 "per document")
    ap.add_argument("--save", default=None, help="checkpoint to write at the end")
    ap.add_argument("--resume", default=None, help="continue a training checkpoint (--steps is the total), "
                                                   "given the same model and run flags")
    ap.add_argument("--val-data", default=None, help="validation loss on this file at the end")
    ap.add_argument("--eval-batches", type=int, default=None, help="validation batches (default: up to 4)")
    for f in ("layers", "heads", "dim", "ctx", "vocab", "kv-heads"):
        ap.add_argument("--" + f, type=int, default=None, help="the model's %s (default: the preset's)" % f)
    # a Llama's mixture of experts (pipit train's flags; --model moe-tiny brings 8 experts, top-2)
    ap.add_argument("--experts", type=int, default=None, help="Llama: routed experts E per MoE layer")
    ap.add_argument("--top-k", type=int, default=None, help="MoE: experts per token, 1..E (default 2, at most E)")
    ap.add_argument("--capacity-factor", type=float, default=None, help="MoE: slots per expert factor (default 1.25)")
    ap.add_argument("--dropless", action="store_true", default=None, help="MoE: every expert holds all tokens")
    ap.add_argument("--shared-experts", type=int, default=None, help="MoE: always-on experts (default 0)")
    ap.add_argument("--moe-every", type=int, default=None, help="MoE: every K-th layer's MLP is MoE (default 1)")
    ap.add_argument("--router", default=None, choices=["softmax", "sigmoid"], help="MoE router (default softmax)")
    ap.add_argument("--aux-loss", type=float, default=None, help="MoE: load-balancing loss coefficient (default 0)")
    ap.add_argument("--balance-bias", type=float, default=None,
                    help="MoE: auxiliary-loss-free balance, the routing bias's step per training step")
    ap.add_argument("--quiet", action="store_true", help="no table (for tests)")
    return ap.parse_args(argv)


def main(argv=None):
    a = parse(argv)
    over = {k: v for k, v in (("layers", a.layers), ("heads", a.heads), ("dim", a.dim), ("ctx", a.ctx),
                              ("vocab", a.vocab), ("kv_heads", a.kv_heads), ("micro_batch", a.micro_batch),
                              ("experts", a.experts), ("top_k", a.top_k), ("capacity_factor", a.capacity_factor),
                              ("dropless", a.dropless), ("shared_experts", a.shared_experts),
                              ("moe_every", a.moe_every), ("router", a.router), ("aux_loss", a.aux_loss),
                              ("balance_bias", a.balance_bias))
            if v is not None}
    model = pipit.models.preset(a.model, **over)
    rank, _ = pipit.init()  # under mpirun: this process's rank (process 0 prints)
    say = (lambda *x: None) if a.quiet or rank else print
    with pipit.Trainer(model, data=a.data, steps=a.steps, pp=a.pp, tp=a.tp, dp=a.dp, schedule=a.schedule,
                       virtual=a.virtual, microbatches=a.microbatches, seed=a.seed, data_order=a.data_order,
                       lr=a.lr, lr_schedule=a.lr_schedule, warmup=a.warmup, dtype=a.dtype,
                       threads=a.threads, remat=a.recompute, zero1=a.zero1, zero=a.zero, resume=a.resume,
                       doc_sep=a.doc_sep, doc_pos_reset=a.doc_pos_reset, sp=a.sp, ep=a.ep,
                       no_a2a_overlap=a.no_a2a_overlap) as t:
        say("pipit %s: %r, %d params; %d stage(s), schedule %s; %d rank(s)" %
            (pipit.version(), model, model.num_params(), t.stages, t.schedule.kind if t.schedule else "none",
             t.program.num_ranks))
        say("%5s  %10s  %10s  %10s  %9s  %10s" % ("step", "loss", "grad norm", "lr", "ms", "tok/s"))
        t.train(log=lambda m: say("%5d  %10.6f  %10.4f  %10.4e  %9.1f  %10.0f" % (
            m["step"], m["loss"], m["grad_norm"], m["lr"], m["ms"], m["tokens_per_s"])))
        if a.val_data:
            say("validation loss %.6f" % t.eval(a.val_data, a.eval_batches))
        if a.save:
            t.save(a.save)
            say("saved %s (step %d)" % (a.save, t.step_count))
        return t.history


if __name__ == "__main__":
    main()
    pipit.finalize()  # ends MPI in an mpirun job (every handle is closed by now)
    sys.exit(0)
