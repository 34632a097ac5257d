"""Fixtures of the Python binding's tests (tests/python, run by the ctest
entry python_pytest: tests/python/run_pytest.sh). The package comes from
PYTHONPATH (the build tree's copy) or, run by hand, from python/ with
PIPIT_LIBRARY naming a libpipit.so."""
import os
import random
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
try:
    import pipit  # noqa: F401
except ImportError:
    sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "examples"))


@pytest.fixture(scope="session")
def cli():
    p = os.environ.get("PIPIT_CLI")
    if not p or not os.path.exists(p):
        pytest.skip("PIPIT_CLI (the pipit binary of this build) is not set")
    return p


@pytest.fixture(scope="session")
def text_file(tmp_path_factory):
    """A small text corpus (bytes < 128: the byte-level presets' vocab)."""
    r = random.Random(3)
    words = ["the", "cat", "sat", "on", "a", "mat", "pipeline", "stage", "rank", "yield", "loss", "step"]
    p = tmp_path_factory.mktemp("data") / "text.txt"
    p.write_text(" ".join(r.choice(words) for _ in range(6000)))
    return str(p)
