#!/usr/bin/env bash
# Keeps docs/c-api.md true to include/kcsi.h: every exported function and every result code
# (with its number) appears in both, and the docs name no function the header lacks. Keeps
# README.md and docs/performance.md true to the tree: every file, test and make target they name
# in `code` exists.
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

# README.md, docs/performance.md: paths (`scripts/test.sh`, `tests/peer_smoke.rs`, a bare
# `volume_mounter.rs`), test names (`test_...`, `Test...`, and Rust tests, snake_case with four
# or more words) and `make TARGET`, each checked against the tree.
for readme in README.md docs/performance.md docs/testing.md; do
python3 - "$readme" <<'PY' || bad=1
import os, re, subprocess, sys
readme = sys.argv[1]
text = open(readme).read()
spans = re.findall(r"`([^`\n]+)`", text) + re.findall(r"```[a-z]*\n(.*?)```", text, re.S)
files = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard"],
                       capture_output=True, text=True, check=True).stdout.split()
basenames = {os.path.basename(f) for f in files}
dirs = {os.path.dirname(f) for f in files}
dirs |= {d.rsplit("/", i)[0] for d in list(dirs) for i in range(1, d.count("/") + 1)}
sources = [f for f in files if re.search(r"\.(rs|go|py|c)$", f)]
defined = set()
for f in sources:
    try:
        defined.update(re.findall(r"(?:\bfn|\bdef|\bfunc(?: \([^)]*\))?) ([A-Za-z0-9_]+)\s*[(<\[]", open(f, errors="replace").read()))
    except OSError:
        pass
protos = "".join(open(f).read() for f in files if f.endswith(".proto"))
targets = set(re.findall(r"^([a-z][a-z0-9-]*):", open("Makefile").read(), re.M))
top = ("tests/", "scripts/", "examples/", "bindings/", "docs/", "src/", "include/", "cli/",
       "proto/", "benches/", "fuzz/", ".ci/")
problems = []
for span in spans:
    for m in re.finditer(r"\bmake ([a-z][a-z0-9-]*)", span):
        if m.group(1) not in targets:
            problems.append(f"make target {m.group(1)!r} (no such target in the Makefile)")
    for word in re.split(r"[\s,;()=:|]+", span):
        word = word.rstrip(".").strip("'\"")
        if not word or "<" in word or "*" in word or "$" in word or "…" in word or "{" in word:
            continue
        if word.startswith(top):
            p = word.rstrip("/")
            if p not in files and p not in dirs:
                problems.append(f"file {word!r}")
        elif re.fullmatch(r"[a-z0-9_]+\.(rs|go|py|c|h|sh)", word):
            if word not in basenames:
                problems.append(f"file {word!r}")
        elif re.fullmatch(r"test_[a-z0-9_]+|Test[A-Z][A-Za-z0-9_]+|[a-z][a-z0-9]*(?:_[a-z0-9]+){3,}", word):
            if word.startswith("kcsi_") or re.search(rf"\b{word}\b", protos):
                continue  # C API names (checked against the header above) and CSI fields
            if word not in defined:
                problems.append(f"test {word!r}")
for p in sorted(set(problems)):
    print(f"{readme} names {p}, which does not exist", file=sys.stderr)
if not problems:
    print(f"{readme}: every file, test and make target it names exists")
sys.exit(1 if problems else 0)
PY
done
exit $bad
