#!/usr/bin/env python3
"""check_layout.py — which folder may include headers from which.

Usage: check_layout.py [SOURCE_DIR]     (default: the repository of this script)

Every `#include "..."` line of every file under src/, tools/, examples/ and
bench/ is checked against the table below. Quoted includes are rooted at src/
("ir/graph.h" is src/ir/graph.h); a name without a folder is the including
file's own folder. The public headers include/pipit*.h ("pipit.h",
"pipit_io.h", ...) may be included from everywhere, a folder may always
include its own headers, and no include may climb with "../". A violation
prints `file:line: FOLDER may not include Y/...` and the script exits 1 (2 for
a folder the table does not know: add it to the table).

Calls are checked too, since the public header hides where a function lives:
every function `pipit_*` / `pipit__*` defined in a file under src/ belongs to
that file's folder, and a call from another folder must follow the table
for an internal function (`pipit__*`, as its header would) and must not run
back up the layers for a public one (`pipit_*`): a folder may call the public
API of any folder except one that may itself reach it through the table
(compile calling the runtime's pipit_adamw closes compile -> runtime ->
compile). A violation prints `file:line: FOLDER may not call NAME (defined in
src/Y/...): ...`.

The table is the architecture: lower layers first; an arrow points from a
folder to the folders it may use. docs/architecture.md describes the layers.
"""

import os
import re
import sys

# ---------------------------------------------------------------- the rules
# folder -> internal folders it may include (besides itself and pipit*.h).
# "backend" covers src/backend and every src/backend/* (cpu, ...).
RULES = {
    "src/util":     [],
    "src/ir":       ["util"],
    "src/autodiff": ["ir", "util"],
    "src/schedule": ["util"],
    "src/compile":  ["schedule", "autodiff", "ir", "util"],
    "src/backend":  ["ir", "util"],
    "src/runtime":  ["backend", "compile", "schedule", "autodiff", "ir", "util"],
    "src/io":       ["util"],
    "src/models":   ["util"],
    "src/text":     ["util"],  # the tokenizer: on the public API, like io
    "src/partition": ["runtime", "compile", "schedule", "autodiff", "ir", "util"],
    "src/inspect":  ["runtime", "compile", "schedule", "autodiff", "ir", "backend", "io", "util"],
    "src/sim":      ["util"],  # the cost model: over the public schedule simulator
    "tools":        [],  # the CLI: public headers only
    "examples":     [],  # public headers only
    "bench":        [],  # public headers only (see FILE_RULES)
}
# Single files with rules of their own (white-box programs).
FILE_RULES = {
    "bench/bench_gemm.c": ["backend", "util"],
    "bench/bench_ops.c": ["backend", "util"],
    "bench/bench_bf16.c": ["backend", "util"],  # the bf16 GEMM against the fp32 one and the CPU's peaks
    "bench/bench_kernel.h": ["util"],  # their shared pool and data (pipit__malloc_aligned)
    "bench/bench_transport.c": ["runtime", "util"],
    "bench/bench_alltoall.c": ["runtime", "util"],  # the EP all-to-all against raw MPI_Alltoall (white-box, as bench_transport)
}
# Top-level folders that are checked.
CHECKED = ["src", "tools", "examples", "bench"]
# Files whose includes are looked at.
EXTENSIONS = (".c", ".h", ".def", ".inc", ".cu", ".cuh")
# ---------------------------------------------------------------------------

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def print_table(out):
    print("Include rules (folder: may include, besides itself and include/pipit*.h):", file=out)
    for folder, allowed in RULES.items():
        if allowed:
            text = ", ".join(allowed)
        else:
            text = "-" if folder.startswith("src/") else "(public headers only)"
        print(f"  {folder + ':':14} {text}", file=out)
    for f, allowed in FILE_RULES.items():
        print(f"  {f + ':':14} {', '.join(allowed)}", file=out)
    print('  everywhere:    no "../" in an include path', file=out)
    print("  calls:         pipit__* as the includes; pipit_* never into a folder that may reach the caller",
          file=out)


def group_of(rel):
    """The rule key of a file path relative to the root, e.g. src/backend/cpu/x.c
    -> src/backend, tools/main.c -> tools."""
    parts = rel.split("/")
    if parts[0] == "src":
        return "src/" + parts[1] if len(parts) > 2 else "src"
    return parts[0]


def check(root):
    violations = []
    unknown = set()
    src_folders = {d for d in os.listdir(os.path.join(root, "src"))
                   if os.path.isdir(os.path.join(root, "src", d))}
    for top in CHECKED:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for name in sorted(filenames):
                if not name.endswith(EXTENSIONS):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root).replace(os.sep, "/")
                group = group_of(rel)
                if rel in FILE_RULES:
                    allowed = FILE_RULES[rel]
                elif group in RULES:
                    allowed = RULES[group]
                else:
                    unknown.add(group)
                    continue
                own = group[len("src/"):] if group.startswith("src/") else None
                with open(path, encoding="utf-8", errors="replace") as fh:
                    for lineno, line in enumerate(fh, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        inc = m.group(1)
                        where = f"{rel}:{lineno}"
                        if "../" in inc or inc.startswith(".."):
                            violations.append(f'{where}: {group} may not include "{inc}" (no ../ paths; '
                                              f'include from the src/ root)')
                            continue
                        if "/" not in inc.lstrip("./"):
                            continue  # own folder, or a public header (pipit*.h)
                        target = inc.lstrip("./").split("/")[0]
                        if target not in src_folders:
                            continue  # not a pipit header (e.g. a system one in quotes)
                        if target == own or target in allowed:
                            continue
                        violations.append(f"{where}: {group} may not include {target}/... "
                                          f'("{inc}")')
    return violations, unknown


# ------------------------------------------------------------- calls
CALL = re.compile(r"\b(pipit_\w+)\s*\(")


def strip_c(text):
    """C text with comments and string/char literals blanked (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        if text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append("\n" * text.count("\n", i, j))
            i = j
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text[i] in "\"'":
            q, j = text[i], i + 1
            while j < n and text[j] != q and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(q + q)
            i = j + 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def scan_calls(text):
    """(definitions, calls) of pipit_ names: a name followed by "(" at brace
    depth 0 whose parameter list is followed by "{" is a definition; one inside
    a body (or a #define) is a call. Each: (name, line)."""
    depth, depths = 0, []
    for ch in text:
        depths.append(depth)
        depth += (ch == "{") - (ch == "}")
    defs, calls = [], []
    for m in CALL.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        start = text.rfind("\n", 0, m.start()) + 1
        if text[start:m.start()].lstrip().startswith("#"):
            if not text[start:m.start()].lstrip().startswith(("#define", "#  define", "# define")):
                continue
            calls.append((m.group(1), line))
            continue
        if depths[m.start()] > 0:
            calls.append((m.group(1), line))
            continue
        k, par = m.end(), 1
        while k < len(text) and par:
            par += (text[k] == "(") - (text[k] == ")")
            k += 1
        rest = text[k:k + 200].lstrip()
        if rest.startswith("{"):
            defs.append((m.group(1), line))
    return defs, calls


def reaches(start, goal):
    """Whether src folder `start` may reach `goal` through RULES (transitively)."""
    seen, todo = set(), [start]
    while todo:
        f = todo.pop()
        if f == goal:
            return True
        if f in seen:
            continue
        seen.add(f)
        todo.extend(RULES.get("src/" + f, []))
    return False


def check_calls(root):
    files = []  # (rel, group, allowed, own, text)
    for top in CHECKED:
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
            dirnames.sort()
            for name in sorted(filenames):
                if not name.endswith(EXTENSIONS):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")
                group = group_of(rel)
                allowed = FILE_RULES.get(rel, RULES.get(group))
                if allowed is None:
                    continue  # reported by check()
                with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as fh:
                    text = strip_c(fh.read())
                own = group[len("src/"):] if group.startswith("src/") else None
                files.append((rel, group, allowed, own, text))
    home = {}  # name -> src folder defining it
    scanned = []
    for rel, group, allowed, own, text in files:
        defs, calls = scan_calls(text)
        if own:
            for name, _ in defs:
                home.setdefault(name, own)
        scanned.append((rel, group, allowed, own, calls))
    violations = []
    for rel, group, allowed, own, calls in scanned:
        for name, line in calls:
            target = home.get(name)
            if target is None or target == own:
                continue
            where = f"{rel}:{line}"
            if name.startswith("pipit__"):
                if target not in allowed:
                    violations.append(f"{where}: {group} may not call {name} (internal, defined in src/{target}/): "
                                      f"{group} may not include {target}/...")
            elif own and reaches(target, own):
                violations.append(f"{where}: {group} may not call {name} (defined in src/{target}/): {target} sits "
                                  f"above {own} ({target} may reach {own}), so the call closes a circle; pass "
                                  f"what {own} needs down to it instead")
    return violations


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not os.path.isdir(os.path.join(root, "src")):
        print(f"check_layout: no src/ under {root}", file=sys.stderr)
        return 2
    violations, unknown = check(root)
    violations += check_calls(root)
    for v in violations:
        print(v)
    for g in sorted(unknown):
        print(f"{g}: folder has no include rule; add it to RULES in tools/check_layout.py")
    if violations or unknown:
        print(f"\n{len(violations)} include-layout violation(s).\n", file=sys.stderr)
        print_table(sys.stderr)
        return 1 if not unknown else 2
    print("include layout ok (includes and calls)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
