"""Every PIPIT_API function of include/*.h is declared to ctypes, and the
declarations are those of the headers as they are now: adding, removing
or changing a public function fails here until python/gen_decls.py is
run (and the library exports each of them)."""
import os
import re
import subprocess
import sys

import pipit
from pipit import _decls

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INCLUDE = os.path.join(ROOT, "include")


def header_functions():
    names = set()
    for f in os.listdir(INCLUDE):
        if f.endswith(".h"):
            text = re.sub(r"/\*.*?\*/", " ", open(os.path.join(INCLUDE, f)).read(), flags=re.S)
            names |= set(re.findall(r"PIPIT_API\s[^;(]*?\b(pipit_\w+)\s*\(", text))
    return names


def test_every_public_function_is_declared():
    names = header_functions()
    assert len(names) > 200
    assert sorted(names - set(_decls.FUNCTIONS)) == []
    assert sorted(set(_decls.FUNCTIONS) - names) == []


def test_declarations_match_the_headers():
    r = subprocess.run([sys.executable, os.path.join(ROOT, "python", "gen_decls.py"), "--check", INCLUDE,
                        os.path.join(ROOT, "python", "pipit", "_decls.py")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


def test_the_library_has_every_declared_function():
    assert pipit._lib.missing == []
    for name in _decls.FUNCTIONS:
        fn = getattr(pipit.lib, name)
        assert fn.argtypes is not None or _decls.FUNCTIONS[name][1] == []


def test_structs_have_the_c_sizes():
    # sizes the C compiler gives (x86-64 / aarch64 LP64): a field list that
    # drifted from the header would change them
    import ctypes
    assert ctypes.sizeof(pipit.S.pipit_val) == 16
    assert ctypes.sizeof(pipit.S.pipit_feed) == 24
    assert ctypes.sizeof(pipit.S.pipit_metrics) == 48
    assert ctypes.sizeof(pipit.S.pipit_optimizer) == 48
    assert ctypes.sizeof(pipit.S.pipit_task) == 8
