"""Trainer(reshard_after_forward=True) is `pipit train --reshard-after-forward`
(ZeRO-3 per task, issue 29): the option reaches the program, the same
3 steps give the CLI's losses and a byte-equal checkpoint (tiny GPT-2, 2
layers, ctx 16, D = 2 as threads), and it is refused without zero=3 as the
CLI refuses it."""
import json
import subprocess

import pytest

FLAGS = ["--model", "tiny", "--layers", "2", "--ctx", "16", "--micro-batch", "2", "--dp", "2", "--zero", "3",
         "--steps", "3"]


def test_reshard_after_forward_equals_the_cli(cli, text_file, tmp_path):
    import pipit
    cpath, ppath = str(tmp_path / "cli.safetensors"), str(tmp_path / "py.safetensors")
    out = subprocess.run([cli, "train", "--json", "--data", text_file] + FLAGS +
                         ["--reshard-after-forward", "--save", cpath], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    cli_losses = [json.loads(l)["loss"] for l in out.stdout.splitlines() if l.startswith('{"step"')]
    assert len(cli_losses) == 3
    m = pipit.models.preset("tiny", layers=2, ctx=16, micro_batch=2)
    with pipit.Trainer(m, data=text_file, steps=3, dp=2, zero=3, reshard_after_forward=True) as t:
        assert t.program.options.reshard_after_forward == 1 and t.program.options.zero == 3
        hist = t.train()
        t.save(ppath)
    assert [float("%.9g" % h["loss"]) for h in hist] == cli_losses
    with open(cpath, "rb") as a, open(ppath, "rb") as b:
        assert a.read() == b.read(), "the checkpoints differ"


def test_reshard_after_forward_needs_zero3(text_file):
    import pipit
    m = pipit.models.preset("tiny", layers=2, ctx=16, micro_batch=2)
    with pipit.Trainer(m, data=text_file, steps=1, dp=2, zero=3) as t:
        assert t.program.options.reshard_after_forward == 0  # off by default
    with pytest.raises(pipit.InvalidError, match="reshard_after_forward"):
        pipit.Trainer(m, data=text_file, steps=1, dp=2, zero=1, reshard_after_forward=True)
