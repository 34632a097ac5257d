"""The package as users get it: from the build tree (PYTHONPATH=BUILD/python)
and after `cmake --install` (PYTHONPATH=PREFIX/lib/python3/dist-packages),
each finding its library without LD_LIBRARY_PATH or PIPIT_LIBRARY."""
import os
import shutil
import subprocess
import sys

import pytest

BUILD = os.environ.get("PIPIT_BUILD_DIR")


def bare_env(pythonpath):
    env = {k: v for k, v in os.environ.items() if k not in ("PIPIT_LIBRARY", "LD_LIBRARY_PATH", "PYTHONPATH")}
    env["PYTHONPATH"] = pythonpath
    return env


def where(pythonpath, cwd):
    r = subprocess.run([sys.executable, "-c", "import pipit; print(pipit.library_path); print(pipit.version())"],
                       env=bare_env(pythonpath), cwd=cwd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return r.stdout.split()


@pytest.mark.skipif(not BUILD, reason="PIPIT_BUILD_DIR is not set (run by the ctest entry python_pytest)")
def test_build_tree_package_finds_its_library(tmp_path):
    lib, ver = where(os.path.join(BUILD, "python"), str(tmp_path))
    assert lib.startswith(BUILD) and ver


@pytest.mark.skipif(not BUILD or os.environ.get("PIPIT_SHARED_BUILD") != "1",
                    reason="the package is installed by shared builds only (-DBUILD_SHARED_LIBS=ON)")
def test_installed_package_finds_the_installed_library(tmp_path):
    cmake = shutil.which("cmake")
    if not cmake:
        pytest.skip("no cmake")
    prefix = tmp_path / "prefix"
    r = subprocess.run([cmake, "--install", BUILD, "--prefix", str(prefix)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    site = prefix / "lib" / "python3" / "dist-packages"
    lib, ver = where(str(site), str(tmp_path))
    assert os.path.realpath(lib).startswith(os.path.realpath(str(prefix))), lib
    assert ver
