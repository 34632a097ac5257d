"""The Pythonic wrappers of the last public functions that had none
(pipit.h's build queries, a program's optimizer state, step timing and
trace, pipit_probe_links, pipit_hw_calibrate and pipit_hw_apply_probe):
each against an oracle, the hand-computed AdamW moments, the schedule's
task count, the CLI's `pipit sim --calibrate`, and each refusal raises
pipit's message."""
import json
import os
import subprocess

import pytest

import pipit

B, D, M = 2, 4, 2
BETA1, BETA2 = 0.9, 0.95


def _program():
    g = pipit.Graph()
    x = g.input("x", [B, D])
    W = g.param("W", [D, D])
    h = x @ W - x
    loss = pipit.mean(h * h)
    p = pipit.Program(g, loss, microbatches=M, optimizer=pipit.adamw(1e-2, BETA1, BETA2, 1e-8, 0.0))
    p.set_param("W", [0.1 * ((i * 7) % 5 - 2) for i in range(D * D)])
    return g, p


def _feeds():
    return [{"x": [0.25 * ((m + 3 * i) % 7 - 3) for i in range(B * D)]} for m in range(M)]


def _flat(a):
    return [float(v) for v in (a.ravel() if hasattr(a, "ravel") else a)]


def test_program_queries_and_optimizer_state(tmp_path):
    g, p = _program()
    with g, p:
        assert p.param_numel("W") == D * D
        assert p.forward_only is False
        assert p.opt_steps == 0 and p.step_wall == 0.0
        p.step(_feeds(), update=False)  # gradients only: no update
        assert p.opt_steps == 0
        grad = _flat(p.get_grad("W"))
        p.step(_feeds())  # the same batch: the same gradient, one AdamW update from zero moments
        assert p.opt_steps == 1 and p.step_wall > 0.0
        m, v = _flat(p.get_opt_state("W", "exp_avg")), _flat(p.get_opt_state("W", 1))
        assert any(x != 0 for x in grad)
        for gi, mi, vi in zip(grad, m, v):  # m = (1 - b1) g, v = (1 - b2) g^2 (fp32 rounding)
            assert mi == pytest.approx((1 - BETA1) * gi, rel=1e-6, abs=1e-12)
            assert vi == pytest.approx((1 - BETA2) * gi * gi, rel=1e-5, abs=1e-12)
        # set then get: the same bits; opt_steps set and read back
        new = [0.5 + i for i in range(D * D)]
        p.set_opt_state("W", "exp_avg_sq", new)
        assert _flat(p.get_opt_state("W", "exp_avg_sq")) == new
        p.opt_steps = 7
        assert p.opt_steps == 7
        with pytest.raises(pipit.InvalidError, match="which must be"):
            p.get_opt_state("W", "exp_avg_cubed")
        with pytest.raises(pipit.Error) as e:
            p.get_opt_state("nope")
        assert "nope" in str(e.value)
        with pytest.raises(pipit.Error):
            p.opt_steps = -1
        # the last step: one rank, a forward and a backward task per microbatch
        st = p.last_step(0)
        assert len(st["tasks"]) == 2 * M
        assert sorted(k for k, _, _ in st["tasks"]).count("F") == M
        assert sorted(mb for _, _, mb in st["tasks"]) == sorted(list(range(M)) * 2)
        assert all(0 <= s <= e for s, e in zip(st["start"], st["end"]))
        assert st["busy"] > 0 and st["recv_wait"] >= 0
        with pytest.raises(pipit.InvalidError):
            p.last_step(5)
        tr = str(tmp_path / "t.json")
        p.write_trace(tr)
        assert "traceEvents" in json.load(open(tr))
        svg = str(tmp_path / "t.svg")
        p.write_trace(svg)
        assert open(svg).read().lstrip().startswith("<")
        with pytest.raises(pipit.IOFailure):
            p.write_trace(str(tmp_path / "no-such-dir" / "t.json"))
    for q in ("opt_steps", "step_wall", "forward_only"):  # a closed program: pipit's MISUSE message
        with pytest.raises(pipit.MisuseError, match="NULL"):
            getattr(p, q)
    with pytest.raises(pipit.MisuseError):
        p.last_step(0)


def test_forward_only_program():
    g = pipit.Graph()
    x = g.input("x", [B, D])
    W = g.param("W", [D, D])
    loss = pipit.mean(x @ W)
    with g, pipit.Program(g, loss, forward_only=True) as p:
        assert p.forward_only is True


def test_build_queries():
    assert pipit.have_mpi() in (True, False) and pipit.have_cuda() in (True, False)
    n = pipit.cuda_device_count()
    assert n >= 0 and (pipit.have_cuda() or n == 0)
    assert pipit.cpu_bf16_gemm()  # a name, e.g. "fp32 panels" on an AVX2 CPU
    assert pipit.cpu_blas_kernels()  # OpenBLAS's core name, e.g. "Haswell"
    advice = pipit.cpu_blas_advice()
    assert advice is None or "OPENBLAS_CORETYPE" in advice


def test_probe_links_one_process():
    pr = pipit.probe_links()
    assert pr["processes"] == 1 and pr["hosts"] == 1 and pr["per_host"] == 1
    assert pr["intra_bw"] > 0 and pr["intra_lat"] > 0
    assert pr["inter_bw"] == 0 and pr["inter_lat"] == 0  # one host: not measured


def test_calibrate_is_the_clis(cli, text_file, tmp_path):
    prof = str(tmp_path / "prof.json")
    subprocess.run([cli, "train", "--data", text_file, "--model", "tiny", "--layers", "1", "--dim", "32",
                    "--heads", "2", "--ctx", "16", "--steps", "2", "--profile", "--profile-out", prof],
                   check=True, capture_output=True)
    out = str(tmp_path / "hw.json")
    subprocess.run([cli, "sim", "--calibrate", prof, "--out", out], check=True, capture_output=True, cwd=tmp_path)
    want = json.load(open(out))
    with pipit.Hardware.calibrate(prof) as hw:
        probe = hw.apply_probe()  # measured now, as the CLI does
        got = json.loads(hw.json())
        links = hw.links
    # the fit from the profile: the CLI's numbers exactly; the links are measured (they vary)
    for k in ("name", "peak_flops", "train_dtype", "gemm_efficiency", "mem_bandwidth", "mem_efficiency",
              "kernel_overhead", "inter_node"):
        assert got[k] == want[k], k
    assert got["about"].replace(prof, os.path.basename(prof)) == want["about"].replace(prof, os.path.basename(prof))
    assert got["gpus_per_node"] == want["gpus_per_node"] == pipit.C.PIPIT_HW_THREADS_PER_NODE
    assert links["intra_bw"] == probe["intra_bw"] and links["intra_lat"] == probe["intra_lat"]
    # a probe given, not measured: its numbers go in as they are
    with pipit.Hardware.calibrate(prof) as hw:
        hw.apply_probe(dict(probe, intra_bw=1e9, intra_lat=2e-6))
        assert hw.links["intra_bw"] == 1e9 and hw.links["intra_lat"] == 2e-6
        with pytest.raises(TypeError):
            hw.apply_probe({"bandwidth": 1})
    with pytest.raises(pipit.Error) as e:
        pipit.Hardware.calibrate(str(tmp_path / "missing.json"))
    assert "missing.json" in str(e.value)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(pipit.Error):
        pipit.Hardware.calibrate(str(bad))


def test_graph_settings():
    with pipit.Graph() as g:
        assert g.context_parallel == 1 and g.sequence_parallel is False and g.documents is False
        g.context_parallel = 2
        g.sequence_parallel = True
        g.documents = True
        assert g.context_parallel == 2 and g.sequence_parallel is True and g.documents is True
        with pytest.raises(pipit.InvalidError, match="C = 0 context-parallel ranks"):
            g.context_parallel = 0
        x = g.input("x", [2, 4, 8])
        assert pipit.cp_gather(x).shape == (2, 8, 8)  # [B, 2L] of each of the C = 2 ranks
    with pipit.Graph(tensor_parallel=2) as t:
        y = t.input("y", [2, 4, 8])
        assert pipit.sp_gather(y, 1).shape == (2, 8, 8)
        assert pipit.sp_scatter(y, -2).shape == pipit.sp_split(y, 1).shape == (2, 2, 8)
        h, tg = t.input("h", [4, 8]), t.input("t", [4], "i32")
        W = t.param("W", [16, 8], sharded=(0, 2))
        assert pipit.tp_head_xent_mean(h, W, tg).shape == ()
        with pytest.raises(pipit.ShapeError, match="pipit_sp_split"):
            pipit.sp_split(t.input("odd", [2, 3, 8]), 1)


def test_topk_and_take_along():
    """topk's values and indices, and take_along at them, against Python's sort."""
    xs = [[3.0, -1.0, 7.5, 7.5, 0.25], [-2.0, -8.0, 4.0, 1.0, 9.0]]
    with pipit.Graph() as g:
        x = g.input("x", [2, 5])
        w = g.param("w", [5])
        y = x * w
        vals, idx = pipit.topk(y, 3)
        assert idx.dtype == "i32" and vals.shape == idx.shape == (2, 3)
        took = pipit.take_along(y, idx)
        with pytest.raises(pipit.ShapeError, match="k = 6"):
            pipit.topk(y, 6)
    g = pipit.Graph()
    x = g.input("x", [2, 5])
    w = g.param("w", [5])
    y = x * w
    vals, idx = pipit.topk(y, 3)
    took = pipit.take_along(y, idx)
    loss = pipit.mean(vals)
    with g, pipit.Program(g, loss, outputs=(vals, idx, took), optimizer=pipit.sgd(0.0)) as p:
        p.set_param("w", [1.0] * 5)
        p.step([{"x": [v for row in xs for v in row]}], update=False)
        got_v, got_i, got_t = (_flat(p.get_output(o)) for o in (vals, idx, took))
        want_i = [sorted(range(5), key=lambda j: (-row[j], j))[:3] for row in xs]  # ties: the lower index first
        assert [int(i) for i in got_i] == [j for r in want_i for j in r]
        assert got_v == [xs[r][j] for r in range(2) for j in want_i[r]]
        assert got_t == got_v


def test_schedule_tasks_and_queries():
    with pipit.Schedule("1f1b", 2, 0, 2) as s:  # 1F1B, P = 2, M = 2, by hand
        assert s.split_bw is False
        assert s.tasks(0) == [("F", 0, 0), ("F", 0, 1), ("BW", 0, 0), ("BW", 0, 1)]
        assert s.tasks(1) == [("F", 1, 0), ("BW", 1, 0), ("F", 1, 1), ("BW", 1, 1)]
        assert [s.stage_rank(k) for k in (0, 1, 2)] == [0, 1, -1]
        with pytest.raises(pipit.Error, match="rank 7 out of range"):
            s.tasks(7)
    with pipit.Schedule("zb-h1", 2, 0, 2) as z:
        assert z.split_bw is True
        assert sorted(k for k, _, _ in z.tasks(0)) == ["B", "B", "F", "F", "W", "W"]


def test_held_bytes_and_checkpoint_queries(tmp_path):
    g, p = _program()
    with g, p:
        p.step(_feeds())
        assert p.held_bytes(0, "params") == D * D * 4  # W, f32: 64 bytes, one 64-byte line
        assert p.held_bytes(0, "grads") == D * D * 4
        assert p.held_bytes(0, "moments") == 2 * D * D * 4
        with pytest.raises(pipit.InvalidError, match="kind must be"):
            p.held_bytes(0, "activations")
        with pytest.raises(pipit.InvalidError):
            p.held_bytes(3)
        f32, bf16 = str(tmp_path / "a.safetensors"), str(tmp_path / "b.safetensors")
        p.save(f32, meta={"step": "12", "neg": "-1"})
        p.save(bf16, dtype="bf16")
    with pipit.Checkpoint(f32) as ck, pipit.Checkpoint(bf16) as cb:
        assert ck.path == f32 and cb.path == bf16
        assert ck.dtype("W") == "f32" and cb.dtype("W") == "bf16"
        assert ck.meta_count("step") == 12
        with pytest.raises(pipit.FormatError, match="neg"):
            ck.meta_count("neg")
        with pytest.raises(pipit.FormatError):
            ck.meta_count("step", max=5)
        with pytest.raises(pipit.InvalidError):
            ck.meta_count("absent")
        with pytest.raises(pipit.InvalidError):
            ck.dtype("absent")
