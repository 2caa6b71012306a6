#!/usr/bin/env bash
# Keeps the docs true.
#  1. docs/c-api.md against include/kcsi.h: every exported function and every result code (with
#     its number) appears in both, and the doc names no function the header lacks.
#  2. Every doc against the tree: README.md, docs/*.md and bindings/*/README.md. Each file, test
#     and make target a doc names in `code` must exist, and so must the C names (kcsi_*) and
#     environment variables (KCSI_*) it spells, the files its relative links point at, and the
#     section a link names (`[x.md](x.md#anchor)`, or `[x.md](x.md), "Heading"`).
#     Wrapped lines are joined first (Markdown reads a line break as a space), so a `code span`
#     or a sentence continued on the next line is read whole.
set -uo pipefail
cd "$(dirname "$0")/.."
header=include/kcsi.h doc=docs/c-api.md
bad=0

header_fns=$(grep -oE '^[a-z0-9_ ]*[ *]kcsi_[a-z0-9_]+\(' "$header" | grep -oE 'kcsi_[a-z0-9_]+' | sort -u)
doc_fns=$(grep -oE '\bkcsi_[a-z0-9_]+\(' "$doc" | grep -oE 'kcsi_[a-z0-9_]+' | sort -u)
for f in $header_fns; do
  grep -qE "\`$f[(\`]|\b$f," "$doc" || { echo "$doc does not describe $f" >&2; bad=1; }
done
for f in $doc_fns; do
  grep -qx "$f" <<<"$header_fns" || { echo "$doc names $f, which $header does not declare" >&2; bad=1; }
done
while read -r name value; do
  grep -qE "^\| \`$name\` \| $value \|" "$doc" || { echo "$doc lacks the row: | \`$name\` | $value |" >&2; bad=1; }
done < <(grep -oE '^#define (KCSI_OK|KCSI_ERR_[A-Z_]+) [0-9]+' "$header" | cut -d' ' -f2-)

[ $bad = 0 ] && echo "docs/c-api.md matches include/kcsi.h"

# What is checked in a doc's code spans and code blocks:
# - paths: a word under a top-level dir of the repo (`scripts/test.sh`), or any word with a `/`
#   and a source or doc extension, resolved from the repo root or from the doc's own dir
#   (`kcsi/_signatures.py` in bindings/python/README.md); a bare file name
#   (`volume_mounter.rs`) must be some file's name;
# - test names: `test_...`, `Test...`, and Rust tests (snake_case, four or more words), each
#   defined as a function somewhere in the tree;
# - `make TARGET`: a target of the Makefile; `cargo test --test NAME`, `--bench NAME`: a file
#   tests/NAME.rs, benches/NAME.rs (of the workspace or a member);
# - `kcsi_name` and `KCSI_NAME`: spelled in the headers or some source file.
python3 - README.md docs/*.md bindings/*/README.md <<'PY' || bad=1
import os, re, subprocess, sys

files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                       capture_output=True, text=True, check=True).stdout.split()
fileset = set(files)
basenames = {os.path.basename(f) for f in files}
dirs = {os.path.dirname(f) for f in files}
dirs |= {d.rsplit("/", i)[0] for d in list(dirs) for i in range(1, d.count("/") + 1)}
docs = set(sys.argv[1:])

def read(f):
    try:
        return open(f, errors="replace").read()
    except OSError:  # listed by git but deleted in the work tree
        return ""

sources = {f: read(f) for f in files
           if f not in docs and (re.search(r"\.(rs|go|py|c|h|sh|toml|in|txt)$", f)
                                 or os.path.basename(f) in ("Makefile", "run"))}
defined = set()
for f, text in sources.items():
    if re.search(r"\.(rs|go|py|c)$", f):
        defined.update(re.findall(r"(?:\bfn|\bdef|\bfunc(?: \([^)]*\))?) ([A-Za-z0-9_]+)\s*[(<\[]", text))
spelled = set()
for text in sources.values():
    spelled.update(re.findall(r"\b(?:kcsi|KCSI)_[A-Za-z0-9_]+", text))
protos = "".join(read(f) for f in files if f.endswith(".proto"))
targets = set(re.findall(r"^([a-z][a-z0-9-]*):", read("Makefile"), re.M))
top = tuple(sorted({f.split("/")[0] + "/" for f in files if "/" in f}))
exts = r"rs|go|py|c|h|sh|md|toml|txt|proto|mod"

def exists(path, base):
    p = os.path.normpath(path.rstrip("/"))
    return any(q in fileset or q in dirs for q in (p, os.path.normpath(os.path.join(base, p))))

def join_wrapped(text):
    """Fenced code blocks apart, and the rest with each paragraph on one line."""
    blocks = []
    def keep(m):
        blocks.append(m.group(1))
        return "\n\n"
    prose = re.sub(r"^[ \t]*```[^\n]*\n(.*?)^[ \t]*```[ \t]*$", keep, text, flags=re.M | re.S)
    paragraphs = [re.sub(r"[ \t]*\n[ \t]*", " ", p) for p in re.split(r"\n[ \t]*\n", prose)]
    return paragraphs, blocks

def headings(path):
    return [h.strip() for h in re.findall(r"^#+ (.*)$", read(path), re.M)]

def slug(title):  # GitHub's anchor for a heading
    return re.sub(r"[^\w\- ]", "", title.lower()).replace(" ", "-")

status = 0
for doc in sys.argv[1:]:
    base = os.path.dirname(doc)
    paragraphs, blocks = join_wrapped(read(doc))
    spans = blocks[:]
    for p in paragraphs:
        spans += re.findall(r"`([^`]+)`", p)
    problems = []
    for p in paragraphs:
        for link, section in re.findall(r"\]\(([^)\s]+)\)(?:, \"([^\"]+)\")?", p):
            target, _, anchor = link.partition("#")
            if re.match(r"[a-z]+:", target):
                continue
            path = os.path.normpath(os.path.join(base, target)) if target else doc
            if target and not exists(target, base):
                problems.append(f"link target {target!r}")
            elif path.endswith(".md"):
                titles = headings(path)
                if anchor and anchor not in {slug(h) for h in titles}:
                    problems.append(f"section #{anchor} of {path}")
                if section and not any(h.strip("`") == section or h.startswith(section) for h in titles):
                    problems.append(f"section \"{section}\" of {path}")
    for span in spans:
        for m in re.finditer(r"\bmake ([a-z][a-z0-9-]*)", span):
            if m.group(1) not in targets:
                problems.append(f"make target {m.group(1)!r} (no such target in the Makefile)")
        for m in re.finditer(r"--(test|bench)[ =]([a-z0-9_]+)", span):
            kind, name = m.groups()
            where = "benches" if kind == "bench" else "tests"
            if not any(f.endswith(f"{where}/{name}.rs") or f.endswith(f"{where}/{name}/main.rs") for f in files):
                problems.append(f"cargo --{kind} target {name!r} (no {where}/{name}.rs)")
        for m in re.finditer(r"(?<![\w.$/-])((?:kcsi|KCSI)_[A-Za-z0-9_]+)(?![\w<*{…])", span):
            if m.group(1) not in spelled:
                problems.append(f"{m.group(1)!r} (spelled in no header or source file)")
        for word in re.split(r"[\s,;()=:|\[\]]+", span):
            word = word.rstrip(".").strip("'\"`")
            if not word or re.search(r"[<*${…~]", word) or "://" in word:
                continue
            if word.startswith(top) or (re.search(rf"\.({exts})$", word) and "/" in word
                                        and not word.startswith(("/", "pkg/", "cmd/", "k8s.io/", "github.com/"))):
                if not exists(word, base):
                    problems.append(f"file {word!r}")
            elif re.fullmatch(rf"[a-z0-9_]+\.({exts})", word):
                if word not in basenames:
                    problems.append(f"file {word!r}")
            elif re.fullmatch(r"test_[a-z0-9_]+|Test[A-Z][A-Za-z0-9_]+|[a-z][a-z0-9]*(?:_[a-z0-9]+){3,}", word):
                if word.startswith("kcsi_") or re.search(rf"\b{word}\b", protos):
                    continue  # C API names (checked above) and CSI fields
                stem = re.sub(r"_(count|sum|bucket)$", "", word)
                if stem != word and any(stem in text for text in sources.values()):
                    continue  # a Prometheus histogram's series
                if word not in defined:
                    problems.append(f"test {word!r}")
    for p in sorted(set(problems)):
        print(f"{doc} names {p}, which does not exist", file=sys.stderr)
    if problems:
        status = 1
    else:
        print(f"{doc}: every file, test, make target, name and link it gives exists")
sys.exit(status)
PY
exit $bad
