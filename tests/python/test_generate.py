"""pipit.sample_token / Sampler / Decoder (pipit_decode.h from Python):
the decoder's tokens are `pipit sample`'s (greedy and seeded draws, the
same checkpoint), its logits the training graph's forward logits row by
row, and the sampler's rules hold on hand-made rows."""
import math
import subprocess
from ctypes import byref

import pytest

import pipit

SMALL = ["--model", "tiny", "--layers", "2", "--ctx", "16", "--micro-batch", "2"]
MODEL = pipit.models.preset("tiny", layers=2, ctx=16, micro_batch=2)
PROMPT = [116, 104, 101]


@pytest.fixture(scope="module")
def ckpt(cli, text_file, tmp_path_factory):
    p = str(tmp_path_factory.mktemp("dec") / "ck.safetensors")
    r = subprocess.run([cli, "train", "--data", text_file] + SMALL + ["--steps", "3", "--save", p],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return p


def flat(a):
    """A numpy array's or an array.array's numbers as a flat list."""
    return a.ravel().tolist() if hasattr(a, "ravel") else list(a)


def cli_sample(cli, ckpt, *flags):
    r = subprocess.run([cli, "sample", "--init", ckpt, "--prompt-ids", ",".join(map(str, PROMPT)), "--tokens", "10",
                        "--no-echo"] + list(flags), capture_output=True)
    assert r.returncode == 0, r.stderr
    return list(r.stdout)  # a byte-level model prints each token as its byte


def test_greedy_and_seeded_tokens_are_the_clis(cli, ckpt):
    with pipit.Decoder(MODEL, ckpt) as d:
        assert d.capacity == 16 and d.length == 0
        assert d.generate(PROMPT, 10) == cli_sample(cli, ckpt, "--temperature", "0")
        assert d.length == len(PROMPT) + 9
        d.reset()
        s = pipit.Sampler(temperature=0.9, top_k=20, top_p=1.0, seed=5)
        got = d.generate(PROMPT, 10, s)
    assert got == cli_sample(cli, ckpt, "--temperature", "0.9", "--top-k", "20", "--seed", "5")


def test_logits_are_the_training_graphs_rows(ckpt):
    """Each decoder step's logits = that row of the full-window forward (1e-4)."""
    T, toks = 16, [(7 * i + 3) % 200 for i in range(16)]
    m = pipit.models.preset("tiny", layers=2, ctx=16, micro_batch=1)
    c = m.config(1)
    with pipit.Graph() as g:
        lg = pipit.S.pipit_val()
        loss = g._val(pipit.lib.pipit_gpt2_build_logits(g.ptr, byref(c), byref(lg)))
        lv = g._val(lg)
        with pipit.Program(g, loss, outputs=(lv,), forward_only=1) as p:
            p.load(ckpt)
            p.step({"tokens": toks, "targets": toks, "positions": list(range(T))}, update=False)
            full = flat(p.get_output(lv))
    V = len(full) // T
    with pipit.Decoder(m, ckpt) as d:
        for t in range(T):
            row = flat(d.step(toks[t]))
            ref = full[t * V:(t + 1) * V]
            assert max(abs(a - b) for a, b in zip(row, ref)) < 1e-4, "position %d" % t
        with pytest.raises(pipit.InvalidError, match="full"):  # S = 16 slots used
            d.step(0)
        assert d.length == T


def first_row(x):
    return flat(x)[:256]


def test_weights_from_a_program_a_checkpoint_and_misuse(ckpt):
    with pipit.Decoder(MODEL, ckpt) as a, pipit.Checkpoint(ckpt) as ck, pipit.Decoder(MODEL, ck, batch=2) as b:
        c = pipit.Decoder(MODEL, a.program)  # parameters copied by name
        x = first_row(a.step(5))
        assert first_row(c.step(5)) == x
        assert first_row(b.step([5, 9])) == x
        with pytest.raises(pipit.InvalidError, match="2 sequences"):
            b.step(5)
        with pytest.raises(pipit.InvalidError, match="batch=1"):
            b.generate([1], 1)
        c.close()
        with pytest.raises(pipit.MisuseError):
            c.step(1)
    with pytest.raises(pipit.Error, match="nonexistent"):
        pipit.Decoder(MODEL, "/nonexistent/ck.safetensors")
    with pytest.raises(pipit.Error):  # a checkpoint of another shape
        pipit.Decoder(pipit.models.preset("tiny", layers=2, ctx=16, dim=64), ckpt)


def test_sampler_rules():
    assert pipit.sample_token([1.0, 3.0, 3.0, 2.0])[0] == 1  # argmax, the lowest id among equal maxima
    row = [0.0, -math.inf, 0.5, 0.25]
    s = pipit.Sampler(temperature=1.0, seed=11)
    draws = [s(row) for _ in range(300)]
    assert 1 not in draws and set(draws) == {0, 2, 3}  # -inf never drawn, the rest are
    assert [pipit.Sampler(temperature=5.0, top_k=1, seed=k)(row) for k in range(20)] == [2] * 20
    st = 11  # a seed reproduces: the state carried by hand draws the Sampler's tokens
    for want in draws[:50]:
        t, st = pipit.sample_token(row, temperature=1.0, state=st)
        assert t == want
    for bad, kw in (([math.nan, 1.0], {}), ([1.0], {"top_p": 2.0}), ([1.0], {"temperature": -1.0}),
                    ([-math.inf], {})):
        with pytest.raises(pipit.InvalidError):
            pipit.sample_token(bad, **kw)
    with pytest.raises(pipit.Error):  # no logits at all
        pipit.sample_token([])
