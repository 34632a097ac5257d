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


def test_structs_have_the_c_layout(tmp_path):
    """Every struct's size and every field's offset as the C compiler lays
    them out from the headers (a field list that drifted would misplace
    every later field silently)."""
    import ctypes
    import shutil
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        import pytest
        pytest.skip("no C compiler")
    lines = ["#include <stdio.h>", "#include <stddef.h>"]
    lines += ['#include "%s"' % f for f in sorted(os.listdir(INCLUDE)) if f.endswith(".h")]
    lines.append("int main(void) {")
    want = []
    for name, fields in _decls.STRUCTS:
        lines.append('    printf("%%zu\\n", sizeof(%s));' % name)
        want.append(ctypes.sizeof(getattr(pipit.S, name)))
        for f, _, _ in fields:
            lines.append('    printf("%%zu\\n", offsetof(%s, %s));' % (name, f))
            want.append(getattr(getattr(pipit.S, name), f).offset)
    lines.append("    return 0;\n}")
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines))
    exe = str(tmp_path / "layout")
    r = subprocess.run([cc, "-std=c11", "-I", INCLUDE, str(src), "-o", exe], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    got = [int(x) for x in subprocess.run([exe], capture_output=True, text=True, check=True).stdout.split()]
    assert got == want
