#!/usr/bin/env bash
# Fails when a source file breaks kcsi's layer rules (see docs/architecture.md). The layers,
# top down: ffi, node (the node agent), volume, host (src/host.rs), then csi, kube and disk.
#   1. the core never uses the C shell (`crate::ffi` only inside src/ffi);
#   2. nothing below the node agent uses it (`crate::node` only in src/node and src/ffi);
#   3. the host uses no volume operation, and csi, kube and disk use neither the host nor the
#      volume operations (`crate::host`, `crate::volume`);
#   4. the CSI side (src/csi) knows no Kubernetes types (`k8s_openapi`, `kube`, `crate::kube`);
#   5. Kubernetes access (src/kube) knows no CSI types (`crate::csi`, `proto`);
#   6. only the disk layer (src/disk) composes kubelet paths: no other file names a path
#      component of the kubelet's layout as a string literal;
#   7. the shared vocabulary (the files directly in src/ but lib.rs and host.rs) uses no layer;
#   8. no import circle between files: a file's `use` of another, directly or through others,
#      never leads back to it (a mod.rs naming its own submodules is containment, not an
#      import).
# Comments and `#[cfg(test)]` modules are not checked (tests build fixtures freely).
set -uo pipefail
cd "$(dirname "$0")/.."

bad=0
# code_of FILE: the file without comment lines and without its trailing test module.
code_of() {
  awk '/^#\[cfg\(test\)\]/ { exit } { print FILENAME ":" FNR ":" $0 }' "$1" |
    grep -vE '^[^:]+:[0-9]+:[[:space:]]*//'
}
forbid() { # DESCRIPTION REGEX FILE...
  local what=$1 re=$2; shift 2
  local f hits
  for f in "$@"; do
    hits=$(code_of "$f" | grep -E "$re") || continue
    printf '%s\n' "$hits" | sed "s|\$|   <- $what|" >&2
    bad=1
  done
}

mapfile -t core < <(find src -name '*.rs' -not -path 'src/ffi/*' | sort)
# src/lib.rs is the crate's facade: it re-exports from every layer and holds no logic.
mapfile -t below_node < <(find src -name '*.rs' -not -path 'src/ffi/*' -not -path 'src/node/*' -not -path src/lib.rs | sort)
mapfile -t below_host < <(find src/csi src/kube src/disk -name '*.rs' | sort)
mapfile -t csi < <(find src/csi -name '*.rs' | sort)
mapfile -t kube < <(find src/kube -name '*.rs' | sort)
mapfile -t not_disk < <(find src -name '*.rs' -not -path 'src/disk/*' | sort)
mapfile -t vocabulary < <(find src -maxdepth 1 -name '*.rs' -not -name lib.rs -not -name host.rs | sort)

forbid "the core must not use the C shell" '(crate|super)::ffi\b' "${core[@]}"
forbid "nothing below the node agent uses it" '(crate|super)::node\b' "${below_node[@]}"
forbid "the host uses no volume operation" '(crate|super)::volume\b' src/host.rs
forbid "csi, kube and disk use neither the host nor the volume operations" \
  'crate::(host|volume)\b' "${below_host[@]}"
forbid "the CSI side knows no Kubernetes types" '\b(k8s_openapi|kube)::|crate::kube\b' "${csi[@]}"
forbid "Kubernetes access knows no CSI types" 'crate::csi\b|\bproto::' "${kube[@]}"
forbid "only src/disk composes kubelet paths" \
  '"(pods|plugins|plugins_registry|volumes|volumeDevices|globalmount|vol_data\.json|kubernetes\.io~csi|staging|publish)"' \
  "${not_disk[@]}"

forbid "the shared vocabulary uses no layer" \
  '(crate|super)::(ffi|node|volume|host|csi|kube|disk)\b' "${vocabulary[@]}"

# Rule 8: every file's imports resolved to files (the longest module path that is a file),
# then the strongly connected components of that graph.
python3 - <<'PY' || bad=1
import os, re, sys

files = {}
for d, _, names in os.walk("src"):
    for n in names:
        if n.endswith(".rs"):
            path = os.path.join(d, n)
            parts = path[len("src/"):-len(".rs")].split("/")
            if parts[-1] in ("mod", "lib"):
                parts = parts[:-1]
            files[tuple(parts)] = path

def code(path):
    # The file without comment lines and without its trailing test module.
    out = []
    for line in open(path):
        if line.startswith("#[cfg(test)]"):
            break
        if not line.lstrip().startswith("//"):
            out.append(line)
    return "".join(out)

def expand(prefix, body):
    # `a::{b, c::{d, e}}` -> [a::b, a::c::d, a::c::e]
    body = body.strip()
    i = body.find("{")
    if i < 0:
        return [prefix + [s for s in body.split("::") if s]]
    head = prefix + [s for s in body[:i].split("::") if s]
    parts, depth, cur = [], 0, ""
    for c in body[i + 1:body.rfind("}")]:
        depth += (c == "{") - (c == "}")
        if c == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += c
    parts.append(cur)
    return [p for part in parts if part.strip() for p in expand(head, part)]

def resolve(module, path):
    first, rest = path[0], path[1:]
    if first == "crate":
        base = []
    elif first in ("self", "super"):
        base = list(module)
        while first == "super":
            base = base[:-1]
            first, rest = (rest[0], rest[1:]) if rest else ("", [])
        if first not in ("self", ""):
            rest = [first] + rest
    elif module + (first,) in files:
        base, rest = list(module), path
    else:
        return None
    full = base + [s.split(" as ")[0].strip() for s in rest]
    for k in range(len(full), -1, -1):
        if tuple(full[:k]) in files:
            return tuple(full[:k])
    return None

edges = {}
for module, path in files.items():
    text = code(path)
    deps = set()
    for use in re.finditer(r"\buse\s+([^;]+);", text):
        for p in expand([], use.group(1)):
            deps.add(resolve(module, p))
    for p in re.finditer(r"\b((?:crate|super|self)(?:::\w+)+)", text):
        deps.add(resolve(module, p.group(1).split("::")))
    # A parent module naming its own submodules is containment, not an import.
    edges[module] = {d for d in deps if d is not None and d[:len(module)] != module}

index, low, stack, on_stack, circles = {}, {}, [], set(), []
def visit(v):
    index[v] = low[v] = len(index)
    stack.append(v)
    on_stack.add(v)
    for w in edges[v]:
        if w not in index:
            visit(w)
            low[v] = min(low[v], low[w])
        elif w in on_stack:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        component = []
        while True:
            w = stack.pop()
            on_stack.discard(w)
            component.append(w)
            if w == v:
                break
        if len(component) > 1:
            circles.append(sorted(files[m] for m in component))
sys.setrecursionlimit(10000)
for v in sorted(edges):
    if v not in index:
        visit(v)
for c in circles:
    print("import circle: " + " <-> ".join(c) + "   <- no file imports itself through others", file=sys.stderr)
sys.exit(1 if circles else 0)
PY

if [ $bad != 0 ]; then echo "layer rules broken (scripts/check-layers.sh)" >&2; exit 1; fi
echo "layer rules hold"
