#!/usr/bin/env python3
"""gen_decls.py -- writes python/pipit/_decls.py from include/*.h.

The low-level layer of the Python package (pipit._lib) declares every
PIPIT_API function of the public headers to ctypes from the table this
script generates: each function's return and argument types, every
`typedef struct { ... } name;` as a field list (ctypes Structures), the
enum constants and the integer #defines. The table is committed; the test
tests/python/test_decls.py regenerates it and fails when a header gained,
lost or changed a function or struct that _decls.py does not have (run
`python3 python/gen_decls.py` and commit the result).

Usage: gen_decls.py [--check] [INCLUDE_DIR] [OUT]
  --check  compare with OUT instead of writing it (exit 1 on a difference)
"""
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

# C scalar types -> ctypes names
SCALARS = {
    "int": "c_int", "unsigned": "c_uint", "unsigned int": "c_uint", "long": "c_long",
    "double": "c_double", "float": "c_float", "size_t": "c_size_t", "char": "c_char",
    "int8_t": "c_int8", "uint8_t": "c_uint8", "int16_t": "c_int16", "uint16_t": "c_uint16",
    "int32_t": "c_int32", "uint32_t": "c_uint32", "int64_t": "c_int64", "uint64_t": "c_uint64",
    "void": "None",
}


class HeaderError(Exception):
    pass


def strip(text):
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", " ", text)
    return text


def parse(include_dir):
    enums, defines, structs, funcs, enum_types, opaque = {}, {}, [], {}, set(), set()
    files = sorted(f for f in os.listdir(include_dir) if f.startswith("pipit") and f.endswith(".h"))
    for fn in files:
        raw = strip(open(os.path.join(include_dir, fn), encoding="utf-8").read())
        # integer #defines (PIPIT_MAX_DIMS 4, PIPIT_MAX_STAGES 32767, ...)
        for m in re.finditer(r"^\s*#\s*define\s+(PIPIT_[A-Z0-9_]+)\s+(.+)$", raw, flags=re.M):
            v = m.group(2).strip()
            v = re.sub(r"\(\s*int64_t\s*\)", "", v)
            if re.fullmatch(r"[0-9()<\s]+", v):
                defines[m.group(1)] = int(eval(v, {}))  # digits, shifts and parentheses only
        body = re.sub(r"^\s*#[^\n]*(\\\n[^\n]*)*", " ", raw, flags=re.M)
        body = body.replace('extern "C" {', " ")
        for m in re.finditer(r"typedef\s+struct\s+(\w+)\s+(\w+)\s*;", body):
            opaque.add(m.group(2))
        for m in re.finditer(r"(typedef\s+)?enum\s*\{(.*?)\}\s*(\w*)\s*;", body, flags=re.S):
            if m.group(3):
                enum_types.add(m.group(3))
            val = -1
            for item in m.group(2).split(","):
                item = item.strip()
                if not item:
                    continue
                if "=" in item:
                    name, expr = (s.strip() for s in item.split("=", 1))
                    expr = re.sub(r"\b(PIPIT_\w+)\b", lambda k: str(enums[k.group(1)]), expr)
                    val = int(eval(expr, {}))
                else:
                    name, val = item, val + 1
                enums[name] = val
        for m in re.finditer(r"typedef\s+struct\s*\{(.*?)\}\s*(\w+)\s*;", body, flags=re.S):
            fields = []
            for decl in m.group(1).split(";"):
                decl = " ".join(decl.split())
                if not decl:
                    continue
                fields.extend(split_decl(decl))
            structs.append((m.group(2), fields))
        for m in re.finditer(r"PIPIT_API\s+([^;]*?)\b(pipit_\w+)\s*\(([^;]*?)\)\s*;", body, flags=re.S):
            ret = " ".join(m.group(1).split())
            args = " ".join(m.group(3).split())
            params = [] if args in ("void", "") else [" ".join(a.split()) for a in split_args(args)]
            funcs[m.group(2)] = (ret, params)
    # the status enum comes from an X-macro: PIPIT_STATUS_<NAME> in map order
    statuses = re.findall(r"X\((\w+),", strip(open(os.path.join(include_dir, "pipit.h"), encoding="utf-8").read()))
    for i, s in enumerate(statuses):
        enums["PIPIT_STATUS_" + s] = i
    enums["PIPIT_STATUS_COUNT"] = len(statuses)
    enum_types.add("pipit_status")
    return enums, defines, structs, funcs, enum_types, opaque


def split_args(s):
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    out.append(cur)
    return out


def split_decl(decl):
    """'const double *f, *b, *w' -> [(f, 'const double *'), ...]; arrays as 'T[N]'."""
    m = re.match(r"^((?:const\s+)?(?:unsigned\s+)?\w+)\s*(.*)$", decl)
    base, rest = m.group(1), m.group(2)
    out = []
    for d in rest.split(","):
        d = d.strip()
        stars = d.count("*")
        consts = " const" * d.count("const")
        d = d.replace("*", "").replace("const", "").strip()
        arr = re.match(r"(\w+)\s*\[\s*(\w+)\s*\]", d)
        name = arr.group(1) if arr else d
        ty = base + consts + " " + "*" * stars if stars else base
        out.append((name, (ty.strip(), arr.group(2) if arr else None)))
    return out


def ctype_of(ty, structs, enum_types, opaque, ret=False):
    t = " ".join(ty.replace("*", " * ").split())
    stars = t.count("*")
    core = " ".join(w for w in t.replace("*", " ").split() if w not in ("const", "struct"))
    if stars == 0:
        if core in SCALARS:
            return SCALARS[core]
        if core in enum_types:
            return "c_int"
        if core in structs:
            return "S." + core
        raise HeaderError("unknown type '%s'" % ty)
    if stars == 1 and core == "char":
        return "c_char_p"
    if core in SCALARS or core in enum_types or core in structs or core in opaque or core == "FILE":
        return "c_void_p"
    raise HeaderError("unknown pointer type '%s'" % ty)


def param_name_type(p):
    p = re.sub(r"\[\s*\w*\s*\]$", "", p).strip() + (" *" if p.rstrip().endswith("]") else "")
    m = re.match(r"^(.*?)(\w+)\s*(\*?)$", p)
    ty, name = m.group(1), m.group(2)
    if p.endswith("*"):  # an array parameter rewritten above: "pipit_feed out *"
        ty, name = ty + "*", m.group(2)
    if not ty.strip():
        ty, name = name, ""
    return name, ty.strip()


def render(include_dir):
    enums, defines, structs, funcs, enum_types, opaque = parse(include_dir)
    names = {n for n, _ in structs}
    lines = ['"""Generated by python/gen_decls.py from include/*.h: do not edit.',
             "",
             "STRUCTS: (name, [(field, ctypes type, array length or None)]) in header order;",
             "FUNCTIONS: name -> (restype, [(argname, argtype)]); types are ctypes names",
             '(S.name: a struct of STRUCTS); ENUMS and DEFINES: the integer constants."""',
             "", "STRUCTS = ["]
    for name, fields in structs:
        lines.append("    (%r, [" % name)
        for fname, (fty, arr) in fields:
            n = None
            if arr is not None:
                n = int(arr) if arr.isdigit() else defines[arr]
            lines.append("        (%r, %r, %r)," % (fname, ctype_of(fty, names, enum_types, opaque), n))
        lines.append("    ]),")
    lines.append("]")
    lines.append("")
    lines.append("FUNCTIONS = {")
    for fname in sorted(funcs):
        ret, params = funcs[fname]
        rt = ctype_of(ret, names, enum_types, opaque, ret=True)
        args = []
        for p in params:
            an, at = param_name_type(p)
            args.append((an, ctype_of(at, names, enum_types, opaque)))
        if rt == "c_char_p" and any(" ".join(at.split()) == "size_t *" for _, at in map(param_name_type, params)):
            rt = "c_void_p"  # bytes of a given length (pipit_tokenizer_token), not a C string: a raw pointer
        lines.append("    %r: (%r, %r)," % (fname, rt, args))
    lines.append("}")
    lines.append("")
    lines.append("ENUMS = {")
    for k in sorted(enums):
        lines.append("    %r: %d," % (k, enums[k]))
    lines.append("}")
    lines.append("")
    lines.append("DEFINES = {")
    for k in sorted(defines):
        lines.append("    %r: %d," % (k, defines[k]))
    lines.append("}")
    return "\n".join(lines) + "\n"


def main(argv):
    check = "--check" in argv
    argv = [a for a in argv if a != "--check"]
    inc = argv[0] if argv else os.path.join(ROOT, "include")
    out = argv[1] if len(argv) > 1 else os.path.join(HERE, "pipit", "_decls.py")
    text = render(inc)
    if check:
        have = open(out, encoding="utf-8").read() if os.path.exists(out) else ""
        if have != text:
            sys.stderr.write("%s is stale: the headers in %s changed; run python3 python/gen_decls.py\n" % (out, inc))
            return 1
        return 0
    with open(out, "w", encoding="utf-8") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
