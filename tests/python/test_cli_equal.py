"""The same configuration through `pipit train` and through pipit.Trainer
(examples/train.py's flags) gives bitwise equal losses and a byte-equal
checkpoint: GPT-2 (tiny) and Llama (llama-tiny), P x T x D as threads,
f32 and bf16. Small models (2 layers, ctx 16) keep it to seconds."""
import json
import subprocess

import pytest

import train as example  # examples/train.py

CASES = [
    # name, CLI flags (examples/train.py takes the same)
    ("gpt2-pp2-zbh1", ["--model", "tiny", "--pp", "2", "--schedule", "zb-h1", "--microbatches", "2"]),
    ("gpt2-P2T2D2-bf16", ["--model", "tiny", "--pp", "2", "--tp", "2", "--dp", "2", "--dtype", "bf16"]),
    ("llama-P2T2-bf16", ["--model", "llama-tiny", "--pp", "2", "--tp", "2", "--dtype", "bf16",
                         "--schedule", "interleaved-1f1b", "--virtual", "2", "--microbatches", "2"]),
    ("gpt2-cosine-dualpipev", ["--model", "tiny", "--lr-schedule", "cosine", "--warmup", "1", "--pp", "2",
                               "--schedule", "dualpipev", "--microbatches", "4"]),
    ("llama-D2-seq", ["--model", "llama-tiny", "--dp", "2", "--data-order", "sequential", "--seed", "7",
                      "--lr", "3e-3"]),
    ("gpt2-D2-zero2", ["--model", "tiny", "--dp", "2", "--zero", "2", "--microbatches", "2"]),
    ("moe-tiny-pp2", ["--model", "moe-tiny", "--pp", "2", "--microbatches", "2"]),
    ("moe-flags", ["--model", "llama-tiny", "--dim", "64", "--experts", "4", "--top-k", "1", "--capacity-factor",
                   "1.5", "--shared-experts", "1", "--moe-every", "2", "--router", "sigmoid", "--aux-loss", "0.01"]),
    ("gpt2-docsep-posreset", ["--model", "tiny", "--doc-sep", "32", "--doc-pos-reset", "--pp", "2"]),
    ("llama-docsep", ["--model", "llama-tiny", "--doc-sep", "32", "--dp", "2"]),
    ("gpt2-P2T2-sp", ["--model", "tiny", "--pp", "2", "--tp", "2", "--sp", "--microbatches", "2"]),
    ("llama-pp2-recompute-pointwise", ["--model", "llama-tiny", "--pp", "2", "--microbatches", "2", "--recompute",
                                       "pointwise"]),
    ("gpt2-recompute-full-bf16", ["--model", "tiny", "--recompute", "full", "--dtype", "bf16"]),
    ("moe-dp2-ep2", ["--model", "moe-tiny", "--dp", "2", "--ep", "2", "--microbatches", "2"]),
    ("moe-dualpipev-ep2", ["--model", "moe-tiny", "--pp", "2", "--schedule", "dualpipev", "--dp", "2", "--ep", "2",
                           "--microbatches", "4"]),
    ("moe-ep2-no-overlap", ["--model", "moe-tiny", "--dp", "2", "--ep", "2", "--microbatches", "2",
                            "--no-a2a-overlap"]),
    ("moe-balance-bias", ["--model", "moe-tiny", "--balance-bias", "0.01", "--pp", "2", "--microbatches", "2"]),
]
SMALL = ["--layers", "4", "--ctx", "16", "--micro-batch", "2", "--steps", "3"]


@pytest.mark.parametrize("name,flags", CASES, ids=[c[0] for c in CASES])
def test_cli_and_python_agree_bitwise(cli, text_file, tmp_path, name, flags):
    args = ["--data", text_file] + flags + SMALL
    cpath, ppath = str(tmp_path / "cli.safetensors"), str(tmp_path / "py.safetensors")
    out = subprocess.run([cli, "train", "--json"] + args + ["--save", cpath], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    cli_losses = [json.loads(l)["loss"] for l in out.stdout.splitlines() if l.startswith('{"step"')]
    hist = example.main(args + ["--save", ppath, "--quiet"])
    py_losses = [float("%.9g" % h["loss"]) for h in hist]
    assert len(cli_losses) == 3
    assert py_losses == cli_losses
    with open(cpath, "rb") as a, open(ppath, "rb") as b:
        assert a.read() == b.read(), "the checkpoints differ"


def test_cli_evaluates_and_resumes_a_python_checkpoint(cli, text_file, tmp_path):
    """`pipit train --resume` continues a Python run as it continues its own."""
    ppath, cpath = str(tmp_path / "py.st"), str(tmp_path / "cli.st")
    base = ["--data", text_file, "--model", "tiny", "--layers", "2", "--ctx", "16", "--micro-batch", "2"]
    example.main(base + ["--steps", "2", "--save", ppath, "--quiet"])
    full = subprocess.run([cli, "train", "--json"] + base + ["--steps", "4", "--save", cpath],
                          capture_output=True, text=True)
    assert full.returncode == 0, full.stderr
    res = subprocess.run([cli, "train", "--json", "--resume", ppath, "--steps", "4", "--save", ppath],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    with open(cpath, "rb") as a, open(ppath, "rb") as b:
        assert a.read() == b.read()


def test_eval_matches_the_clis_validation(cli, text_file):
    """Trainer.eval on --val-data = `pipit train --val-data`'s val loss."""
    base = ["--data", text_file, "--model", "llama-tiny", "--layers", "2", "--ctx", "16", "--micro-batch", "2",
            "--steps", "2", "--pp", "2"]
    out = subprocess.run([cli, "train", "--json"] + base + ["--val-data", text_file], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    val = [json.loads(l)["val_loss"] for l in out.stdout.splitlines() if '"val_loss"' in l]
    import pipit
    m = pipit.models.preset("llama-tiny", layers=2, ctx=16, micro_batch=2)
    with pipit.Trainer(m, data=text_file, steps=2, pp=2) as t:
        t.train()
        assert [float("%.9g" % t.eval(text_file))] == val


def test_python_resumes_a_cli_checkpoint(cli, text_file, tmp_path):
    """Trainer(resume=) continues `pipit train --save` as the CLI's own
    --resume does: the 4-step checkpoint, byte for byte."""
    c2, c4, p4 = str(tmp_path / "c2.st"), str(tmp_path / "c4.st"), str(tmp_path / "p4.st")
    base = ["--data", text_file, "--model", "llama-tiny", "--layers", "2", "--ctx", "16", "--micro-batch", "2",
            "--pp", "2"]
    for steps, path in ((2, c2), (4, c4)):
        r = subprocess.run([cli, "train", "--json"] + base + ["--steps", str(steps), "--save", path],
                           capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    hist = example.main(base + ["--steps", "4", "--resume", c2, "--save", p4, "--quiet"])
    assert [h["step"] for h in hist] == [2, 3]
    with open(c4, "rb") as a, open(p4, "rb") as b:
        assert a.read() == b.read()


def test_zero_reaches_the_program_and_is_refused_as_the_cli_refuses_it(text_file):
    """Trainer(zero=N) compiles with options.zero N; the CLI's refusals."""
    import pipit
    m = pipit.models.preset("tiny", layers=2, ctx=16, micro_batch=2)
    with pipit.Trainer(m, data=text_file, steps=1, dp=2, zero=3) as t:
        assert t.program.options.zero == 3
        t.train()
    for kw in (dict(zero=2), dict(zero=4, dp=2), dict(zero1=True), dict(zero1=True, zero=2, dp=2)):
        with pytest.raises(pipit.InvalidError, match="zero"):
            pipit.Trainer(m, data=text_file, steps=1, **kw)


def test_moe_keywords_are_refused_without_experts():
    """The CLI's refusals of the MoE flags, by keyword."""
    import pipit
    assert pipit.models.preset("moe-tiny").config().experts == 8
    for kw, what in ((dict(top_k=2), "top_k"), (dict(router="sigmoid"), "router"),
                     (dict(experts=4, router="relu"), "router"), (dict(experts=2, top_k=3), "top_k")):
        with pytest.raises(pipit.InvalidError, match=what):
            pipit.models.llama(**kw)


def test_doc_sep_refusals(text_file):
    """The CLI's refusals of --doc-sep / --doc-pos-reset, by keyword."""
    import pipit
    m = pipit.models.preset("tiny", layers=2, ctx=16, micro_batch=2)
    for kw, what in ((dict(doc_sep=256), "outside the vocabulary"), (dict(doc_sep=-2), "outside the vocabulary"),
                     (dict(doc_pos_reset=True), "needs doc_sep")):
        with pytest.raises(pipit.InvalidError, match=what):
            pipit.Trainer(m, data=text_file, steps=1, **kw)


def test_moe_counts_and_balance_bias_are_the_clis(cli, text_file):
    """The step dict's moe_counts / moe_imbalance = `pipit train --json`'s;
    the refusals of --balance-bias are the CLI's."""
    args = ["--data", text_file, "--model", "llama-tiny", "--layers", "2", "--experts", "2", "--top-k", "1",
            "--dropless", "--balance-bias", "100", "--ctx", "16", "--micro-batch", "2", "--microbatches", "2",
            "--steps", "4"]
    out = subprocess.run([cli, "train", "--json"] + args, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    want = [json.loads(l) for l in out.stdout.splitlines() if l.startswith('{"step"')]
    hist = example.main(args + ["--quiet"])
    assert [h["moe_counts"] for h in hist] == [w["moe_counts"] for w in want]
    assert [float("%.9g" % x) for h in hist for x in h["moe_imbalance"]] == \
        [x for w in want for x in w["moe_imbalance"]]
    import pipit
    with pytest.raises(pipit.InvalidError, match="mixture-of-experts"):
        pipit.Trainer(pipit.models.preset("tiny"), data=text_file, balance_bias=0.1)
    with pytest.raises(pipit.InvalidError, match=">= 0"):
        pipit.models.preset("moe-tiny", balance_bias=-1.0)


def test_trainer_sp_refusals(text_file):
    """Trainer(sp=True) refuses what `pipit train --sp` refuses (tools/session.c)."""
    import pipit
    m = pipit.models.preset("tiny", layers=2, ctx=16, micro_batch=2)
    with pytest.raises(pipit.InvalidError, match=r"it needs tp 2 or more \(got tp 1\)"):
        pipit.Trainer(m, data=text_file, steps=1, sp=True)
    m = pipit.models.preset("tiny", layers=2, ctx=18, micro_batch=2)
    with pytest.raises(pipit.InvalidError, match="tp 4 does not divide ctx 18"):
        pipit.Trainer(m, data=text_file, steps=1, tp=4, sp=True)


def test_trainer_ep_refusals(text_file):
    """Trainer(ep=E) refuses what `pipit train --ep` refuses (tools/session.c check_ep)."""
    import pipit
    moe = pipit.models.preset("moe-tiny", layers=2, ctx=16, micro_batch=2)
    with pytest.raises(pipit.InvalidError, match="pass experts=N"):
        pipit.Trainer(pipit.models.preset("llama-tiny", layers=2, ctx=16), data=text_file, steps=1, dp=2, ep=2)
    with pytest.raises(pipit.InvalidError, match="ep 2 does not divide dp 3"):
        pipit.Trainer(moe, data=text_file, steps=1, dp=3, ep=2)
    with pytest.raises(pipit.InvalidError, match="ep 3 does not divide experts 8"):
        pipit.Trainer(moe, data=text_file, steps=1, dp=3, ep=3)
    with pytest.raises(pipit.InvalidError, match="expert and tensor parallelism together are not built"):
        pipit.Trainer(moe, data=text_file, steps=1, dp=2, ep=2, tp=2)
    with pytest.raises(pipit.InvalidError, match=r"ep must be in 1\.\.64"):
        pipit.Trainer(moe, data=text_file, steps=1, ep=0)
