#!/usr/bin/env python3
"""custom_model.py -- a model that is not a preset, pipelined from Python.

The loss of ONE microbatch is written as a function (the paper's style):
an embedding E, L residual MLP blocks, and a head that reuses E (logits =
h E^T), so the weight E is shared by the first and the last stage.
pipit.pipeline_yield(h) after every L/S blocks cuts it into S stages;
pipit compiles it for the schedule (a zero-bubble one by default, two
ranks as threads), differentiates it, and trains it on a synthetic
next-token task.

    PYTHONPATH=build/python python3 examples/custom_model.py [--schedule zb-h1] [--pp 2] [--steps 30]

The same graph without yields on one rank gives the same losses bit for
bit (tests/python/test_custom_model.py checks every schedule, P 1, 2, 4).
"""
import argparse
import random
import sys

import pipit

V, C, L, B, T = 32, 32, 8, 4, 16   # vocab, width, blocks, sequences per microbatch, tokens per sequence


def build(stages):
    """The graph: loss of one microbatch of B sequences of T tokens, cut
    into `stages` stages (L must divide by it). Returns (graph, loss)."""
    if L % stages:
        raise ValueError("%d blocks do not split into %d stages" % (L, stages))
    g = pipit.Graph()
    tokens = g.input("tokens", [B * T], "i32")
    targets = g.input("targets", [B * T], "i32")
    E = g.param("embed", [V, C])                      # shared: the first stage's embedding, the last one's head
    h = pipit.embed(E, tokens)                         # [B*T, C]
    for l in range(L):
        W1 = g.param("block%d.w1" % l, [C, 2 * C])
        W2 = g.param("block%d.w2" % l, [2 * C, C])
        h = h + pipit.gelu(h @ W1) @ W2                # a residual MLP block
        if (l + 1) % (L // stages) == 0 and l + 1 < L:
            h = pipit.pipeline_yield(h)                # stage boundary
    logits = pipit.matmul_nt(h, E)                     # [B*T, V]: the tied head
    return g, pipit.xent_mean(logits, targets)


def init(program, seed=0):
    """Deterministic parameters, by name (the same on every layout)."""
    for name in sorted(program.params):
        shape = program.param_shape(name)
        n = 1
        for s in shape:
            n *= s
        r = random.Random("%s:%d" % (name, seed))
        scale = 0.5 / (shape[0] ** 0.5)
        program.set_param(name, [r.uniform(-scale, scale) for _ in range(n)])


def batches(M, step):
    """M microbatches of a next-token task: each sequence counts up by a
    stride (token t+1 = token t + stride mod V)."""
    out = []
    for m in range(M):
        r = random.Random(step * 1000 + m)
        toks, tgts = [], []
        for _ in range(B):
            start, stride = r.randrange(V), r.choice((1, 3, 5))
            seq = [(start + stride * i) % V for i in range(T + 1)]
            toks += seq[:-1]
            tgts += seq[1:]
        out.append({"tokens": toks, "targets": tgts})
    return out


def train(schedule=None, pp=1, virtual=0, steps=10, microbatches=4, lr=1e-2, log=None):
    """Trains and returns the losses. schedule None with pp 1: the graph
    without yields on one rank (the reference)."""
    sched = pipit.Schedule(schedule, pp, virtual, microbatches) if schedule else None
    stages = sched.stages if sched else 1
    g, loss = build(stages)
    try:
        with pipit.Program(g, loss, schedule=sched, microbatches=microbatches, optimizer=pipit.adamw(lr)) as p:
            init(p)
            losses = []
            for s in range(steps):
                met = p.step(batches(microbatches, s))
                losses.append(met["loss"])
                if log:
                    log(s, met)
            return losses
    finally:
        g.close()
        if sched:
            sched.close()


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--schedule", default="zb-h1", help="a built-in schedule (pipit.schedule_names())")
    ap.add_argument("--pp", type=int, default=2, help="pipeline ranks (threads)")
    ap.add_argument("--virtual", type=int, default=0, help="stages per rank (0: the schedule's own)")
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--lr", type=float, default=1e-2)
    a = ap.parse_args(argv)
    print("custom model: %d blocks, tied embedding/head, %s on %d ranks" % (L, a.schedule, a.pp))
    print("%5s  %10s  %10s  %8s" % ("step", "loss", "grad norm", "bubble"))

    def log(s, met):
        print("%5d  %10.6f  %10.4f  %8.3f" % (s, met["loss"], met["grad_norm"], met["bubble"]))
    losses = train(a.schedule, a.pp, a.virtual, a.steps, a.microbatches, a.lr, log)
    ref = train(None, 1, 0, min(a.steps, 3), a.microbatches, a.lr)
    same = losses[:len(ref)] == ref
    print("the first %d losses %s the one-rank run's, bit for bit" % (len(ref), "equal" if same else "DIFFER from"))
    return 0 if same and losses[-1] < losses[0] else 1


if __name__ == "__main__":
    sys.exit(main())
