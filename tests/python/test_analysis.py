"""pipit.partition, Schedule.simulate, Program.plan/profile, pipit.simulate
and Hardware (pipit_partition.h, pipit_inspect.h, pipit_sim.h from
Python): a partitioned graph trains to the one-rank losses bit for bit, a
GPipe simulation gives the hand-computed makespan and bubble, a plan's
parameter bytes are the hand-counted ones, and a simulated step is
`pipit sim --json`'s."""
import json
import subprocess

import pytest

import custom_model as cm  # examples/custom_model.py: L residual blocks, no yields when built for 1 stage
import pipit

M, STEPS = 2, 2


def losses(g, loss, sched):
    with pipit.Program(g, loss, schedule=sched, microbatches=M, optimizer=pipit.adamw(1e-2)) as p:
        cm.init(p)
        return [p.step(cm.batches(M, s))["loss"] for s in range(STEPS)]


def test_partition_cuts_and_trains_as_one_rank():
    g0, l0 = cm.build(1)
    with g0:
        ref = losses(g0, l0, None)
    g, loss = cm.build(1)  # no yields: the partitioner places them
    with g, pipit.Schedule("1f1b", 2, 0, M) as sched:
        with pipit.partition(g, loss, schedule=sched) as part:
            assert part.stages == 2
            (a, b), (c, d) = part.ops(0), part.ops(1)
            assert a == 0 and b == c and d == len(part.op_nodes) and 0 < b < d  # contiguous, all ops
            assert all(x > 0 for x in part.costs + part.forward + part.bytes)
            assert all(f < t for f, t in zip(part.forward, part.costs))  # forward alone < forward + backward
            assert part.simulate(sched) > max(part.costs)
            assert "stage" in part.text()
            loss, = part.apply(g, loss)
            with pytest.raises(pipit.InvalidError):  # once per partition
                part.apply(g, loss)
        assert losses(g, loss, sched) == ref


def test_partition_refusals():
    g, loss = cm.build(1)
    with g:
        with pytest.raises(pipit.InvalidError):  # neither stages nor a schedule
            pipit.partition(g, loss)
        with pytest.raises(pipit.InvalidError, match="cut"):  # more stages than cut points
            pipit.partition(g, loss, stages=1000)
        with pytest.raises(pipit.InvalidError, match="yields"):
            pipit.partition(g, loss, stages=2, yields="nowhere")


def test_gpipe_simulation_is_the_hand_count():
    """GPipe, P = 2, M = 2, F = 1, B = 2, no W: makespan (M + P - 1)(F + B) = 9,
    bubble (P - 1) / (M + P - 1) = 1/3; rank 0's first F runs 0..1."""
    with pipit.Schedule("gpipe", 2, 0, 2) as s:
        with s.simulate(f=[1, 1], b=[2, 2], w=[0, 0]) as r:
            assert r.ranks == 2 and r.step_time == 9.0
            assert abs(r.bubble - 1 / 3) < 1e-12
            assert r.busy(0) == r.busy(1) == 6.0 and r.peak_live(0) == 2
            assert r.tasks(0)[0] == (0.0, 1.0) and r.tasks(1)[0] == (1.0, 2.0)
            assert "rank 0" in r.grid() and "<svg" in r.svg("gpipe")
        with pytest.raises(pipit.InvalidError, match="3 costs for 2 stages"):
            s.simulate(f=[1, 1, 1])
        text = pipit.schedule_text(s)
    assert text.startswith("# pipit schedule") and "F0.0" in text


def test_schedule_text_loads_back(tmp_path):
    with pipit.Schedule("zb-h1", 2, 0, 4) as s:
        p = tmp_path / "s.txt"
        p.write_text(s.text())
        with pipit.Schedule.load(str(p)) as t, s.simulate() as a, t.simulate() as b:
            assert (a.step_time, a.bubble) == (b.step_time, b.bubble)


def test_plan_counts_the_params_and_the_profile_times_the_ops():
    g, loss = cm.build(2)
    with g, pipit.Schedule("1f1b", 2, 0, M) as sched:
        with pipit.Program(g, loss, schedule=sched, microbatches=M) as p:
            plan = p.plan()
            assert len(plan["ranks"]) == 2 and plan["microbatches"] == M
            numel = {x["name"]: x["numel"] for x in plan["params"]}
            C, V = cm.C, cm.V
            assert numel["embed"] == V * C and numel["block0.w1"] == 2 * C * C
            assert sum(numel.values()) == V * C + cm.L * 4 * C * C
            assert "rank 0" in p.plan_text() and "RUN" in pipit.plan_text(p, verbose=True)
            p.set_profile()
            cm.init(p)
            p.step(cm.batches(M, 0))
            prof = p.profile()
            assert len(prof["ranks"]) == 2 and prof["ranks"][0]["total_s"] > 0 and "matmul" in prof["ranks"][0]["ops"]
            assert "matmul" in p.profile_text()
    n, why = pipit.mem_available()
    assert n > 0 and why


SIM = dict(layers=12, hidden=768, heads=12, seq=1024, vocab=50304, micro_batch=1, global_batch=8, tp=2, pp=2, dp=2,
           schedule="1f1b")


def test_simulate_is_pipit_sims(cli):
    out = subprocess.run([cli, "sim", "--layers", "12", "--hidden", "768", "--heads", "12", "--seq", "1024",
                          "--vocab", "50304", "--micro-batch", "1", "--global-batch", "8", "--tp", "2", "--pp", "2",
                          "--dp", "2", "--schedule", "1f1b", "--hw", "h100", "--json"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    with pipit.simulate("h100", **SIM) as rep:
        assert rep.json() == json.loads(out.stdout)
        s = rep.summary
        assert s["gpus"] == 8 and s["stages"] == 2 and 0 < s["mfu"] < 1 and s["step_s"] > 0
        assert rep.rank_peak_bytes(0) > 0 and rep.rank_busy(1) > 0 and "MFU" in rep.text()
    # recompute by name, as the CLI's --recompute: pointwise keeps less than none, full less than pointwise
    for mode in ("pointwise", "full"):
        out = subprocess.run([cli, "sim", "--layers", "12", "--hidden", "768", "--heads", "12", "--seq", "1024",
                              "--vocab", "50304", "--micro-batch", "1", "--global-batch", "8", "--tp", "2", "--pp",
                              "2", "--dp", "2", "--schedule", "1f1b", "--hw", "h100", "--recompute", mode, "--json"],
                             capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        with pipit.simulate("h100", recompute=mode, **SIM) as rep:
            assert rep.json() == json.loads(out.stdout)
    with pipit.simulate("h100", **SIM) as a, pipit.simulate("h100", recompute="pointwise", **SIM) as b, \
            pipit.simulate("h100", recompute=True, **SIM) as c:
        assert a.rank_peak_bytes(0) > b.rank_peak_bytes(0) > c.rank_peak_bytes(0)
    with pytest.raises(pipit.InvalidError, match="pointwise"):
        pipit.simulate("h100", recompute="some", **SIM)


def test_hardware_and_refusals():
    assert {"a100", "h100", "h200", "cpu"} <= set(pipit.Hardware.builtin_names())
    with pipit.Hardware("h100") as h:
        assert h.name == "h100" and h.mem_capacity > 0 and h.peak_flops("bf16") > h.peak_flops("fp32")
        h.set_links("inter=100Gbit:5us")
        assert h.links["inter_bw"] == 100e9 / 8 and abs(h.links["inter_lat"] - 5e-6) < 1e-15
        h.set_links(gpus_per_node=4)
        assert h.links["gpus_per_node"] == 4 and h.links["inter_bw"] == 100e9 / 8
        with pytest.raises(pipit.InvalidError):
            h.set_links(inter_bw=0.0)
        with pipit.Hardware.parse(h.json(), "copy") as c:
            assert c.links == h.links and c.peak_flops("bf16") == h.peak_flops("bf16")
    with pytest.raises(pipit.InvalidError, match="nope"):
        pipit.Hardware("nope")
    with pytest.raises(pipit.FormatError):
        pipit.Hardware.parse("{", "broken")
    with pytest.raises(pipit.InvalidError, match="divisible"):
        pipit.simulate("h100", **dict(SIM, tp=8))
    with pytest.raises(TypeError):
        pipit.simulate("h100", layer=12)
