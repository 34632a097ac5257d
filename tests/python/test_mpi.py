"""`mpirun -np 2 python3 examples/train.py` runs one rank per process, as
`pipit train` does: the checkpoint is the threads run's, byte for byte,
and processes started with different settings are all refused, naming the
setting (pipit_agree). Skipped without mpirun, in a build without MPI and
in sanitizer builds (as the CLI's MPI tests are)."""
import os
import shutil
import subprocess
import sys

import pytest

import pipit
import train as example  # examples/train.py

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRAIN = os.path.join(ROOT, "examples", "train.py")

pytestmark = [
    pytest.mark.skipif(not shutil.which("mpirun"), reason="no mpirun (apt install openmpi-bin)"),
    pytest.mark.skipif(not pipit.lib.pipit_have_mpi(), reason="this libpipit was built without MPI"),
    pytest.mark.skipif(bool(os.environ.get("PIPIT_SANITIZE")), reason="sanitizer build (Open MPI is not instrumented)"),
]


def mpirun(apps):
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_rmaps_base_oversubscribe="1", PYTHONPATH=os.pathsep.join(sys.path))
    cmd = ["mpirun", "--bind-to", "none", "--mca", "btl", "self,vader", "-x", "PYTHONPATH", "-x", "PIPIT_TIMEOUT=120"]
    if os.environ.get("PIPIT_LIBRARY"):
        cmd += ["-x", "PIPIT_LIBRARY"]
    for i, args in enumerate(apps):
        cmd += ([":"] if i else []) + ["-np", "1", sys.executable, TRAIN] + args
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)


def test_two_processes_give_the_threads_checkpoint(text_file, tmp_path):
    base = ["--data", text_file, "--layers", "2", "--ctx", "16", "--micro-batch", "2", "--steps", "2", "--pp", "2",
            "--schedule", "zb-h1", "--microbatches", "2"]
    t, m = str(tmp_path / "t.st"), str(tmp_path / "m.st")
    example.main(base + ["--save", t, "--quiet"])
    r = mpirun([base + ["--save", m, "--quiet"]] * 2)
    assert r.returncode == 0, r.stderr[-2000:]
    with open(t, "rb") as a, open(m, "rb") as b:
        assert a.read() == b.read()


def test_processes_that_disagree_are_refused(text_file):
    base = ["--data", text_file, "--layers", "2", "--ctx", "16", "--micro-batch", "2", "--steps", "1", "--pp", "2",
            "--quiet"]
    r = mpirun([base + ["--lr", "1e-3"], base + ["--lr", "2e-3"]])
    assert r.returncode != 0
    assert "disagree on lr: process 0 has '0.001'; process 1 has '0.002'" in r.stderr, r.stderr[-2000:]
