"""Data and Tokenizer through the binding, against the file's own bytes:
each sequence of a batch is the T bytes at its offset, its targets the
T bytes one further; the tokenizer's ids decode back to the text, and the
tokens' bytes put together are the text."""
import pytest

import pipit


@pytest.mark.parametrize("order", ["random", "sequential"])
def test_batches_are_the_files_bytes(text_file, order):
    raw = open(text_file, "rb").read()
    T, B = 16, 3
    with pipit.Data(text_file, T, order, seed=5) as d:
        assert d.tokens == len(raw)
        x, y = d.batch(4, B)
        x, y = list(memoryview(x).cast("B").cast("i")), list(memoryview(y).cast("B").cast("i"))
        for b in range(B):
            off = d.offset(4 + b)
            assert x[b * T:(b + 1) * T] == list(raw[off:off + T])
            assert y[b * T:(b + 1) * T] == list(raw[off + 1:off + T + 1])
        val = d.split(10)
        assert val.windows == 10
        val.close()


def test_tokenizer_round_trip(tmp_path):
    texts = ["the cat sat on the mat", "the pipeline yields a stage", "ranks and stages and steps"]
    with pipit.Tokenizer.train(texts, 300) as tok:
        assert 256 < tok.vocab_size <= 300
        for t in texts + ["unseen words: zebra"]:
            ids = tok.encode(t)
            assert tok.decode(ids) == t
            assert b"".join(tok.token(i) for i in ids) == t.encode()
        assert len(tok.encode(texts[0])) < len(texts[0])  # merges were learned
        path = str(tmp_path / "tok.json")
        tok.save(path)
        with pipit.Tokenizer(path) as again:
            assert again.encode(texts[1]) == tok.encode(texts[1])
    with pytest.raises(pipit.Error):
        pipit.Tokenizer(str(tmp_path / "missing.json"))
