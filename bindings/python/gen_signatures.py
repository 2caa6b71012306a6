#!/usr/bin/env python3
"""Generates bindings/python/kcsi/_signatures.py (ctypes argtypes/restype) from include/kcsi.h.

Why generated: a ctypes function left on the default `int` restype truncates pointers on
64-bit hosts, and hand-kept signatures drift from the header. Every C type in the header must
map to a ctypes type here, or generation fails: nothing is ever left on a default.

It also writes kcsi/_methods.py: one explicit method per function on the class of the handle
it takes first, with type hints and defaults, so help() and editors show real signatures. A
parameter is named as in C, without the `_json` suffix where it takes a dict (the old name
still works as a keyword); a constructor `kcsi_<x>_new` is `Host.<x>` (`mounter_new` stays as
an alias). Its docstring is the header's doc in Python terms (None, return values, exception
classes, method names); a C-only phrase no rule here rewrites stops generation.

Usage: gen_signatures.py [--header include/kcsi.h] [--output .../_signatures.py] [--check]
  --check: exit 1 (and say so) when the committed file differs from what would be generated.
"""
import argparse
import os
import pprint
import re
import sys
import textwrap

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_HEADER = os.path.join(REPO, "include", "kcsi.h")
DEFAULT_OUTPUT = os.path.join(HERE, "kcsi", "_signatures.py")
METHODS_OUTPUT = os.path.join(HERE, "kcsi", "_methods.py")

# Scalar C types -> ctypes expression.
SCALARS = {
    "void": "None",
    "bool": "ctypes.c_bool",
    "int8_t": "ctypes.c_int8",
    "int16_t": "ctypes.c_int16",
    "int32_t": "ctypes.c_int32",
    "int64_t": "ctypes.c_int64",
    "uint8_t": "ctypes.c_uint8",
    "uint16_t": "ctypes.c_uint16",
    "uint32_t": "ctypes.c_uint32",
    "uint64_t": "ctypes.c_uint64",
    "size_t": "ctypes.c_size_t",
    "int": "ctypes.c_int",
    "double": "ctypes.c_double",
}


class Header:
    def __init__(self, text):
        self.opaque = []  # typedef struct X X;
        self.aliases = {}  # typedef int32_t kcsi_result;
        self.fnptrs = {}  # name -> (ret, [(type, name)])
        self.constants = {}  # #define NAME <int>
        self.functions = {}  # name -> (ret, [(type, name)], doc)
        self._parse(text)

    def _parse(self, text):
        for m in re.finditer(r"^\s*#define\s+(\w+)\s+(-?\d+)\s*$", text, re.M):
            self.constants[m.group(1)] = int(m.group(2))
        # Keep each function's doc comment (cbindgen c99 style: `//` lines), whose "Nullable:"
        # line names the parameters that may be NULL; then drop comments and preprocessor lines.
        docs = {}
        pending = []
        for line in text.splitlines():
            s = line.strip()
            if s.startswith("//"):
                pending.append(s[2:].strip())
                continue
            m = re.match(r"^[\w\s\*]*?\b(kcsi_\w+)\s*\(", s)
            if m and pending:
                docs[m.group(1)] = " ".join(pending)
            if s:
                pending = []
        body = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
        body = re.sub(r"//[^\n]*", " ", body)
        body = re.sub(r"^\s*#[^\n]*", " ", body, flags=re.M)
        body = body.replace('extern "C" {', " ")
        body = re.sub(r"\s+", " ", body)
        for stmt in body.split(";"):
            stmt = stmt.strip().strip("{}").strip()
            if not stmt:
                continue
            m = re.fullmatch(r"typedef struct (\w+) (\w+)", stmt)
            if m and m.group(1) == m.group(2):
                self.opaque.append(m.group(1))
                continue
            m = re.fullmatch(r"typedef (.+?) ?\( ?\* ?(\w+) ?\) ?\((.*)\)", stmt)
            if m:
                self.fnptrs[m.group(2)] = (norm(m.group(1)), params(m.group(3)))
                continue
            m = re.fullmatch(r"typedef (.+?) (\w+)", stmt)
            if m:
                self.aliases[m.group(2)] = norm(m.group(1))
                continue
            m = re.fullmatch(r"(.+?[\s\*])(\w+) ?\((.*)\)", stmt)
            if m and m.group(2).startswith("kcsi_"):
                self.functions[m.group(2)] = (norm(m.group(1)), params(m.group(3)), docs.get(m.group(2), ""))
                continue
            raise SystemExit(f"gen_signatures: cannot parse header statement: {stmt!r}")


def norm(ctype):
    """Canonical spelling: single spaces, `*` attached as ` *`."""
    ctype = re.sub(r"\s*\*\s*", " * ", ctype)
    ctype = re.sub(r"\s+", " ", ctype).strip()
    return ctype.replace("* *", "**").replace("* const *", "*const *").replace(" * ", " *").rstrip()


def params(text):
    text = text.strip()
    if text in ("", "void"):
        return []
    out = []
    for p in text.split(","):
        m = re.fullmatch(r"\s*(.+?[\s\*])(\w+)\s*", p)
        if not m:
            raise SystemExit(f"gen_signatures: cannot parse parameter {p!r}")
        out.append((norm(m.group(1)), m.group(2)))
    return out


def ctypes_expr(ctype, header, position):
    """ctypes for one C type. `position` is "arg" or "ret": a returned `const char *` is static
    or borrowed (c_char_p copies it into bytes), an owned `char *` is kept as a pointer."""
    t = ctype
    depth = t.count("*")
    base = t.replace("*const", "*").replace("const ", "").replace("*", "").strip()
    base = header.aliases.get(base, base) if base not in header.opaque else base
    if depth == 0:
        if base in header.fnptrs:
            return f"{base}"
        if base in SCALARS:
            return SCALARS[base]
        raise SystemExit(f"gen_signatures: no ctypes mapping for C type {ctype!r}")
    if base == "char":
        if depth == 1:
            # Input strings and borrowed/static results: bytes <-> NUL-terminated char array.
            # An owned `char *` (kcsi_string_free's argument) stays a raw pointer.
            return "ctypes.c_char_p" if t.startswith("const") else "ctypes.POINTER(ctypes.c_char)"
        if depth == 2:
            # `const char *const *`: an input array; `char **`: an owned-string out-parameter.
            return "ctypes.POINTER(ctypes.c_char_p)" if "const" in t else "ctypes.POINTER(ctypes.POINTER(ctypes.c_char))"
    if base == "void" and depth == 1:
        return "ctypes.c_void_p"
    if base in header.opaque:
        return "ctypes.POINTER(" * depth + base + ")" * depth
    if base in SCALARS and base != "void":
        return "ctypes.POINTER(" * depth + SCALARS[base] + ")" * depth
    raise SystemExit(f"gen_signatures: no ctypes mapping for C type {ctype!r}")


def generate(header_path):
    with open(header_path, encoding="utf-8") as f:
        h = Header(f.read())
    if not h.functions:
        raise SystemExit(f"gen_signatures: no kcsi_ functions found in {header_path}")
    out = []
    w = out.append
    w('"""ctypes signatures of libkcsi, GENERATED from include/kcsi.h by')
    w("bindings/python/gen_signatures.py. Do not edit; regenerate with")
    w("`python3 bindings/python/gen_signatures.py` (CI runs it with --check).")
    w('"""')
    w("# fmt: off")
    w("import ctypes")
    w("")
    w("# Opaque handle types: distinct classes, so ctypes refuses a mounter where a host is expected.")
    for name in h.opaque:
        w(f"class {name}(ctypes.Structure):")
        w("    pass")
        w("")
    for name, (ret, ps) in h.fnptrs.items():
        args = ", ".join([ctypes_expr(ret, h, "ret")] + [ctypes_expr(t, h, "arg") for t, _ in ps])
        w(f"{name} = ctypes.CFUNCTYPE({args})")
    w("")
    w("CONSTANTS = " + pprint.pformat(dict(sorted(h.constants.items())), width=100))
    w("")
    w("OPAQUE = " + repr(tuple(h.opaque)))
    w("")
    w("# name -> the parameters its header doc's \"Nullable:\" line names (err_out always may be NULL)")
    w("NULLABLE = {")
    for name, (_ret, _ps, doc) in h.functions.items():
        n = nullable_params(doc)
        if n:
            w(f"    {name!r}: {n!r},")
    w("}")
    w("")
    w("# name -> (C return type, ((C type, parameter name), ...), doc comment)")
    w("FUNCTIONS = {")
    for name, (ret, ps, doc) in h.functions.items():
        w(f"    {name!r}: ({ret!r}, {tuple(ps)!r}, {doc!r}),")
    w("}")
    w("")
    w("# name -> (restype, argtypes)")
    w("CTYPES = {")
    for name, (ret, ps, _doc) in h.functions.items():
        argtypes = ", ".join(ctypes_expr(t, h, "arg") for t, _ in ps)
        w(f"    {name!r}: ({ctypes_expr(ret, h, 'ret')}, [{argtypes}]),")
    w("}")
    w("")
    w("")
    w("def apply(lib):")
    w('    """Sets restype and argtypes of every header function the library exports; returns the')
    w('    names the library lacks (an older build than the header)."""')
    w("    missing = []")
    w("    for name, (restype, argtypes) in CTYPES.items():")
    w("        try:")
    w("            fn = getattr(lib, name)")
    w("        except AttributeError:")
    w("            missing.append(name)")
    w("            continue")
    w("        fn.restype = restype")
    w("        fn.argtypes = argtypes")
    w("    return missing")
    return "\n".join(out) + "\n"


def nullable_params(doc):
    m = re.search(r"Nullable: ([\w, ]+)\.", doc)
    return tuple(p.strip() for p in m.group(1).split(",")) if m else ()


def handle_class(ctype):
    """`kcsi_block_mapper *` -> BlockMapper."""
    return "".join(p.capitalize() for p in ctype[len("kcsi_"):-2].split("_"))


# Defaults the header states in prose: every `timeout_ms <= 0` means the host's timeout.
DEFAULTS = {"timeout_ms": "0"}
# Python annotations of C parameter and output types (other types have no method).
IN_TYPES = {"int64_t": "int", "int32_t": "int", "size_t": "int", "bool": "bool"}
# A `const uint64_t **` output is a pointer to a counter kcsi keeps: returned as the ctypes
# pointer, read with `.contents.value`.
OUT_TYPES = {"bool *": "bool", "int64_t *": "int", "int32_t *": "int", "const uint64_t **": "Any"}


def method_plan(name, ps):
    """(class, method name, [(C name, C type)] of the inputs, [(C name, C type)] of the outputs)
    of a function, or None when it takes no handle. A host's `<x>_new` is the method `<x>`."""
    if not ps or not ps[0][0].endswith(" *") or not ps[0][0].startswith("kcsi_") or name.endswith("_free"):
        return None
    own = ps[0][0][: -2]
    if own == "kcsi_error":
        return None
    method = name[len(own) + 1:] if name.startswith(own + "_") else name[len("kcsi_"):]
    if own != "kcsi_host" and not name.startswith(own + "_"):
        return None
    if own == "kcsi_host" and method.endswith("_new"):
        method = method[: -len("_new")]
    names = [n for _, n in ps]
    inputs, outputs = [], []
    for t, n in ps[1:]:
        if n == "err_out" or n.endswith("_len") and n[:-4] in names:
            continue
        if (n == "out" or n.endswith("_out")) and t.endswith("*"):
            outputs.append((n, t))
            continue
        inputs.append((n, "array" if f"{n}_len" in names else t))
    return handle_class(ps[0][0]), method, inputs, outputs


def c_alias(name, cls, method):
    """The C-derived method name kept as an alias (`mounter_new`), or None."""
    if cls == "Host" and name.endswith("_new"):
        return name[len("kcsi_"):]
    return None


def py_name(c_name):
    """`spec_json` -> `spec`: the argument is a dict (or JSON text)."""
    return c_name[: -len("_json")] if c_name.endswith("_json") else c_name


def in_type(c_name, ctype):
    if ctype == "array":
        return "Sequence[Text]"
    if ctype == "const char *":
        return "Json" if c_name.endswith("_json") else "Text"
    if ctype in IN_TYPES:
        return IN_TYPES[ctype]
    raise SystemExit(f"gen_signatures: no Python type for parameter {c_name} ({ctype})")


# JSON results with a declared shape (kcsi/_types.py); other JSON results are `Any`.
RESULT_TYPES = {
    "kcsi_host_status": "HostStatus",
    "kcsi_list_drivers": "List[DriverInfo]",
    "kcsi_list_device_mounts": "List[DeviceMount]",
    "kcsi_block_mapper_paths": "BlockMapperPaths",
    "kcsi_mounter_metrics": "VolumeMetrics",
    "kcsi_block_mapper_metrics": "VolumeMetrics",
    "kcsi_attacher_volumes_are_attached": "List[bool]",
}


def out_type(fname, c_name, ctype):
    if ctype == "char **" and fname in RESULT_TYPES:
        return RESULT_TYPES[fname]
    if ctype == "char **":
        return "Any" if c_name == "json_out" or c_name.endswith("_json_out") else "str"
    if ctype.startswith("kcsi_") and ctype.endswith(" **"):
        return repr(handle_class(ctype[:-1]))
    if ctype in OUT_TYPES:
        return OUT_TYPES[ctype]
    raise SystemExit(f"gen_signatures: no Python type for output {c_name} ({ctype})")


def signature(fname, inputs, outputs, nullable):
    """The method's parameter list and return annotation. A parameter gets a default (None when
    the header marks it Nullable, else from DEFAULTS) when every later one has one too."""
    sig = []
    defaults = True
    for n, t in reversed(inputs):
        hint = in_type(n, t)
        default = "None" if n in nullable else DEFAULTS.get(n)
        defaults = defaults and default is not None
        if n in nullable:
            hint = f"Optional[{hint}]"
        sig.append(f"{py_name(n)}: {hint} = {default}" if defaults else f"{py_name(n)}: {hint}")
    outs = [out_type(fname, n, t) for n, t in outputs]
    ret = "None" if not outs else outs[0] if len(outs) == 1 else f"Tuple[{', '.join(outs)}]"
    return ", ".join(["self"] + list(reversed(sig))), ret


METHODS_PRELUDE = """\"""Explicit methods of the handle classes, GENERATED from include/kcsi.h by
bindings/python/gen_signatures.py. Do not edit. Each method calls the C function its docstring
names with the conventions of kcsi.call (JSON parameters take dicts, outputs are returned).
\"""
# fmt: off
{typing}
from ._types import {types}
"""

# The header's doc in Python terms, rule by rule (pattern, replacement) in this order: the
# Python package copies and frees every string and closes handles itself, returns what C
# writes to an out-parameter, passes None for NULL, takes lists for arrays and dicts for JSON.
DOC_RULES = [
    (r" ?Caller frees (?:`\*\w+`|the string) with `kcsi_string_free`\.", ""),
    (r" \((?:caller frees it|freed) with `kcsi_string_free`\)", ""),
    (r", freed with `kcsi_string_free`", ""),
    (r"On success `\*out` receives an? (?:\w+ )*?the caller (?:owns and )?frees with `kcsi_\w+_free`"
     r"(?:; on error it is unchanged)?\.", "{returns_handle}"),
    (r"`\*out` points to it until `kcsi_host_free`; read it with an atomic 64-bit load \(acquire\)\.",
     "Returns a ctypes pointer to it, valid until the host is closed (`.contents.value` reads it)."),
    (r"writes (.+?) to `\*\w+_out`", r"returns \1"),
    (r"is written to `\*\w+_out`", "is returned"),
    (r"written to `\*\w+_out`", "returned"),
    (r"On success `\*\w+_out` is true\.", "Returns True on success."),
    (r"before `\*out` is set to true", "before True is returned"),
    (r"`\*\w+_out` receives", "returns"),
    (r"`\*\w+_out` a ", "returns a "),
    (r" ?Nullable: [\w, ]+\.", ""),
    (r" \(NULL = none\)", " (optional)"),
    (r"\bNULL\b|\bnull\b", "None"),
    (r"is `KCSI_OK`", "succeeds"),
    (r"for host `h`", "for this host"),
    (r"an array of `\w+_len` strings", "a list of strings"),
    (r"a JSON array", "a list"),
    (r" as JSON in ", " in "),
    (r" as JSON\b", " as a dict"),
]
# What must not be left of C in a docstring once the rules ran.
C_ONLY = re.compile(r"_out`|kcsi_string_free|_free`|\bNULL\b|KCSI_OK|KCSI_ERR_|_len`|\b\w+_json\b|`h`")


def py_doc(fname, doc, json_params, returns_handle, py_names):
    """`doc` (a header function's) in Python terms; stops generation at a C-only phrase left.
    `json_params`: the header's `X_json` parameter names, which are `X` in Python."""
    text = doc
    for pattern, repl in DOC_RULES:
        text = re.sub(pattern, repl.replace("{returns_handle}", returns_handle or ""), text)
    for n in json_params:
        text = re.sub(rf"\b{n}\b", py_name(n), text)
    text = re.sub(r"`KCSI_ERR_(\w+)`", lambda m: f"`kcsi.{error_class(m.group(1))}`", text)
    text = re.sub(r"`(kcsi_\w+)(`|\()", lambda m: f"`{py_names.get(m.group(1), m.group(1))}{m.group(2)}", text)
    text = re.sub(r"(^|[.:] )returns\b", r"\1Returns", text)
    text = re.sub(r"  +", " ", text).strip()
    left = C_ONLY.search(text) or next((m for m in re.finditer(r"`(kcsi_\w+)", text) if m.group(1) in py_names), None)
    if left or not text:
        raise SystemExit(f"gen_signatures: the doc of {fname} keeps the C-only {left.group(0) if left else 'nothing'!r} "
                         f"in Python terms (add a rule to DOC_RULES): {text!r}")
    if '"""' in text or "\\" in text:
        raise SystemExit(f"gen_signatures: the doc of {fname} cannot be a plain docstring: {text!r}")
    wrapped = textwrap.fill(text, width=96, initial_indent="        ", subsequent_indent="        ",
                            break_long_words=False, break_on_hyphens=False).strip()
    return f"{wrapped}\n\n        C function: {fname}."


def error_class(result):
    """`NOT_FOUND` -> `NotFound`, as kcsi/__init__.py names the exception of KCSI_ERR_NOT_FOUND."""
    return "".join(p.capitalize() for p in result.split("_"))


def generate_methods(header_path):
    with open(header_path, encoding="utf-8") as f:
        h = Header(f.read())
    classes = {}
    py_names = {}
    json_params = sorted({n for _r, ps, _d in h.functions.values() for _t, n in ps if n.endswith("_json")})
    for name, (_ret, ps, doc) in h.functions.items():
        plan = method_plan(name, ps)
        if plan:
            cls, method, inputs, outputs = plan
            py_names[name] = f"{cls}.{method}"
            classes.setdefault(cls, []).append((name, method, inputs, outputs, doc, nullable_params(doc)))
    out = []
    w = out.append
    for cls, methods in sorted(classes.items()):
        w("")
        w("")
        w(f"class _{cls}Methods:")
        w("    __slots__ = ()")
        for name, method, inputs, outputs, doc, nullable in methods:
            params, ret = signature(name, inputs, outputs, nullable)
            handle = ret.strip("'") if ret.startswith("'") else None
            returns_handle = handle and (f"Returns {'an' if handle[0] in 'AEIOU' else 'a'} `{handle}` "
                                         "(close it, or use it in a `with` block).")
            renamed = ", ".join(f"{n}={py_name(n)!r}" for n, _ in inputs if py_name(n) != n)
            w("")
            if renamed:
                w(f"    @old_names({renamed})")
            w(f"    def {method}({params}) -> {ret}:")
            w(f'        """{py_doc(name, doc, json_params, returns_handle, py_names)}"""')
            args = ", ".join(py_name(n) for n, _ in inputs) + ("," if len(inputs) == 1 else "")
            w(f"        return self._invoke({name!r}, ({args}))")
            alias = c_alias(name, cls, method)
            if alias:
                w(f"    {alias} = {method}")
    body = "\n".join(out) + "\n"
    used = [n for n in ("Any", "List", "Optional", "Sequence", "Tuple") if re.search(rf"\b{n}\b", body)]
    typing = f"from typing import {', '.join(used)}\n" if used else ""
    types = sorted({"Json", "Text", "old_names"} | {t for t in re.findall(r"-> (?:List\[)?(\w+)", body)
                                                   if t not in ("None", "str", "int", "bool", "Any", "List", "Tuple")})
    return METHODS_PRELUDE.format(typing=typing, types=", ".join(types)).rstrip("\n") + "\n" + body


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--header", default=DEFAULT_HEADER)
    ap.add_argument("--output", default=DEFAULT_OUTPUT)
    ap.add_argument("--check", action="store_true", help="fail if the output file is stale")
    a = ap.parse_args()
    wanted = {a.output: generate(a.header), METHODS_OUTPUT: generate_methods(a.header)}
    if a.check:
        stale = []
        for path, text in wanted.items():
            try:
                with open(path, encoding="utf-8") as f:
                    current = f.read()
            except FileNotFoundError:
                current = None
            if current != text:
                stale.append(path)
                print(f"{os.path.relpath(path)} is stale: run python3 bindings/python/gen_signatures.py", file=sys.stderr)
        return 1 if stale else 0
    for path, text in wanted.items():
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
