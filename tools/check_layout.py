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


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not os.path.isdir(os.path.join(root, "src")):
        print(f"check_layout: no src/ under {root}", file=sys.stderr)
        return 2
    violations, unknown = check(root)
    for v in violations:
        print(v)
    for g in sorted(unknown):
        print(f"{g}: folder has no include rule; add it to RULES in tools/check_layout.py")
    if violations or unknown:
        print(f"\n{len(violations)} include-layout violation(s).\n", file=sys.stderr)
        print_table(sys.stderr)
        return 1 if not unknown else 2
    print("include layout ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
