#!/usr/bin/env python3
"""Regenerates the golden V-Half / V-Min orders in this folder from the
authors' generator (sail-sg/zero-bubble-pipeline-parallelism,
megatron/core/pipeline_parallel/zerobubble/scheduler/zbv_greedy.py).
Plain python3, no torch: the generator's only import (graph.py's node
types, used by create_schedule, which this driver does not call) is stubbed.

  python3 tests/vsched_golden/gen_golden.py PATH/TO/zbv_greedy.py COMMIT

writes v-half_pP_mM.sched and v-min_pP_mM.sched in pipit's schedule text
format (docs/schedules.md). The fork numbers the six passes of a rank as
F f B b W w: F/f the forward of chunk 0/1, B/b the backward of chunk 1/0
(the backward walks the V in reverse), W/w the weight pass of chunk 1/0.
Chunk 0 of rank r is pipit's stage r, chunk 1 is stage 2P-1-r."""
import importlib.util
import os
import sys
import types

src, commit = sys.argv[1], sys.argv[2]
out = os.path.dirname(os.path.abspath(__file__))
stub = types.ModuleType("graph")
for name in ("ScheduledNode", "B", "W", "F", "FuncType"):
    setattr(stub, name, None)
pkg = "megatron.core.pipeline_parallel.zerobubble.scheduler"
parts = pkg.split(".")
for i in range(1, len(parts) + 1):
    sys.modules.setdefault(".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
sys.modules[pkg + ".graph"] = stub
spec = importlib.util.spec_from_file_location("zbv_greedy", src)
zbv = importlib.util.module_from_spec(spec)
spec.loader.exec_module(zbv)

CASES = [(p, m) for p in range(2, 9) for m in sorted({2 * p, 3 * p + 1, 4 * p})]
for cfg in ("half", "min"):
    for p, m in CASES:
        g = zbv.PipelineGraph(p, m, cfg, 1, 1, 1, 0)
        pattern = {"min": g.stable_pattern_v_min, "half": g.stable_pattern_v_half}[cfg](p)
        cost = [1, 1, 1, 1, 1, 1]
        _, start, order = g.schedule_from_pattern(pattern, m, cost, do_reorder=True)
        # the fork's own timing of this order (F = B = W = 1, no comm cost)
        makespan = max(t + 1 for stage in start for typ in stage for t in typ)
        stages = [r for r in range(p)] + [p - 1 - i for i in range(p)]
        lines = []
        for r in range(p):
            toks = []
            for typ, mb in order[r]:
                kind = "FBW"[typ // 2]
                chunk = typ % 2 if kind == "F" else 1 - typ % 2
                stage = r if chunk == 0 else 2 * p - 1 - r
                toks.append("%s%d.%d" % (kind, stage, mb))
            lines.append(" ".join(toks))
        path = os.path.join(out, "v-%s_p%d_m%d.sched" % (cfg, p, m))
        with open(path, "w") as f:
            f.write("# golden: zbv_greedy.py (sail-sg/zero-bubble-pipeline-parallelism %s),\n" % commit)
            f.write("# mem_config=%s, n_stage=%d, n_micro=%d; see gen_golden.py\n" % (cfg, p, m))
            f.write("# makespan %d\n" % makespan)
            f.write("stages: %s\n" % " ".join(map(str, stages)))
            for line in lines:
                f.write(line + "\n")
print("wrote %d files to %s" % (2 * len(CASES), out))
