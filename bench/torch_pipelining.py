#!/usr/bin/env python3
"""GPT-2 (V=256 T=64 L=4 H=4 C=128, B=4 per microbatch) through
torch.distributed.pipelining, one process per rank, gloo, 1 thread each.
Times schedule.step() (forward + backward of M microbatches, no optimizer),
median over steps, like bench_pipeline's step_wall. The lm head is an untied
copy of wte on the last stage (tying across stages needs a gradient
all-reduce that torch pipelining does not do for you).

Usage: python bench/torch_pipelining.py STEPS WARMUP   (a python with torch >= 2.4;
bench/run.sh part 3). Runs on torch 2.4 to 2.15 at least; see the two
version notes below (the stage example tensors, and _batch_p2p before 2.8)."""
import math, os, statistics, sys, time
import torch, torch.distributed as dist, torch.nn as nn, torch.nn.functional as F
import torch.multiprocessing as mp
from torch.distributed.pipelining import PipelineStage, ScheduleGPipe, Schedule1F1B, ScheduleInterleaved1F1B

V, T, L, H, C, B = 256, 64, 4, 4, 128, 4
STEPS, WARM = int(sys.argv[1]), int(sys.argv[2])


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln1, self.ln2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.qkv, self.proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.fc, self.fcp = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, 2)
        q, k, v = (z.view(b, t, H, c // H).transpose(1, 2) for z in (q, k, v))
        a = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(c // H))
        a = a.masked_fill(~torch.ones(t, t, dtype=torch.bool).tril(), float("-inf")).softmax(-1)
        x = x + self.proj((a @ v).transpose(1, 2).reshape(b, t, c))
        return x + self.fcp(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Stage(nn.Module):
    def __init__(self, s, S):
        super().__init__()
        self.first, self.last = s == 0, s == S - 1
        if self.first:
            self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(T, C)
        lo, hi = s * L // S, (s + 1) * L // S
        self.blocks = nn.ModuleList(Block() for _ in range(lo, hi))
        if self.last:
            self.lnf, self.head = nn.LayerNorm(C), nn.Linear(C, V, bias=False)

    def forward(self, x):
        if self.first:
            x = self.wte(x) + self.wpe(torch.arange(x.shape[1]))
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.lnf(x)) if self.last else x


# torch 2.4-2.7: _batch_p2p keeps only the last Work of dist.batch_isend_irecv,
# which with gloo (one Work per op) drops waits and deadlocks 1F1B and
# interleaved 1F1B (pytorch/pytorch#132644, fixed by #152938 in 2.8). Same
# fix here: wait on every Work.
import torch.distributed.pipelining.schedules as _sched


class _AllWork:
    def __init__(self, works):
        self.works = works

    def wait(self):
        for w in self.works:
            w.wait()


def _batch_p2p(p2p_ops, desc=None):
    return _AllWork(dist.batch_isend_irecv(p2p_ops)) if p2p_ops else None


if hasattr(_sched, "_batch_p2p") and tuple(int(x) for x in torch.__version__.split(".")[:2]) < (2, 8):
    _sched._batch_p2p = _batch_p2p


def loss_fn(out, tgt):
    return F.cross_entropy(out.reshape(-1, V), tgt.reshape(-1))


def run(rank, world, port, q):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(0)
    res = []
    for name, Vs in (("gpipe", 1), ("1f1b", 1), ("interleaved-1f1b", 2)):
        S = world * Vs
        for M in (2, 8, 32):
            if Vs > 1 and M % world:
                continue
            sids = [rank + world * v for v in range(Vs)]
            stages = []
            for s in sids:
                mod = Stage(s, S)
                # Example tensors for static shape metadata. The float ones
                # must say requires_grad=True: torch >= 2.10 takes
                # requires_grad from them, and a stage output recorded as not
                # requiring grad gets no gradient buffer from the next stage,
                # so its backward starts from a None gradient ("A
                # GradientEdge root requires a gradient but got NoneType").
                ex_in = (torch.zeros(B, T, dtype=torch.long) if s == 0
                         else torch.zeros(B, T, C, requires_grad=True))
                ex_out = torch.zeros(B, T, V if s == S - 1 else C, requires_grad=True)
                stages.append(PipelineStage(mod, s, S, torch.device("cpu"), input_args=(ex_in,),
                                            output_args=(ex_out,)))
            if name == "gpipe":
                sch = ScheduleGPipe(stages[0], M, loss_fn=loss_fn)
            elif name == "1f1b":
                sch = Schedule1F1B(stages[0], M, loss_fn=loss_fn)
            else:
                sch = ScheduleInterleaved1F1B(stages, M, loss_fn=loss_fn)
            x = torch.randint(0, V, (M * B, T))
            y = torch.randint(0, V, (M * B, T))
            ts = []
            for it in range(WARM + STEPS):
                for st in stages:
                    st.submod.zero_grad(set_to_none=True)
                dist.barrier()
                t0 = time.perf_counter()
                if rank == 0:
                    sch.step(x)
                elif rank == world - 1:
                    sch.step(target=y, losses=[])
                else:
                    sch.step()
                dist.barrier()
                ts.append(time.perf_counter() - t0)
            res.append((name, Vs, M, statistics.median(ts[WARM:]) * 1e3))
    if rank == 0:
        q.put(res)
    dist.destroy_process_group()


if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = 29500 + os.getpid() % 1000
    ps = [ctx.Process(target=run, args=(r, 2, port, q)) for r in range(2)]
    for p in ps:
        p.start()
    res = q.get()
    for p in ps:
        p.join()
    print(f"torch {torch.__version__}: median step ms over {STEPS} steps (after {WARM} warm-up), fwd+bwd only")
    print(f"{'schedule':17} {'V':>2} {'M':>3} | {'torch ms':>9}")
    for name, Vs, M, ms in res:
        print(f"{name:17} {Vs:2d} {M:3d} | {ms:9.2f}")
