#!/usr/bin/env bash
# Usage: scripts/peers/build.sh [hostpath] [registrar] [sanity] [etcd] [apiserver] [mockdriver] [faultdriver] [attacher] [resizer]
#        (default: all of them; see versions.sh)
#
# Builds kcsi's real test peers from the Go module proxy (a kubernetes-csi peer the proxy
# refuses comes from its source archive in $KCSI_PEER_ARCHIVES instead, vendor tree included,
# with the version stamped as its Makefile does) into
#   ${KCSI_PEERS_CACHE:-$HOME/.cache/kcsi-peers}/<name>-<version>-<goversion>/<binary>
# (outside git). Cached binaries are reused; only missing ones are built, one at a time
# (kube-apiserver alone needs several minutes and a few GB of RAM on 2 cores).
#
# Why wrapper modules: `go install pkg@version` refuses modules whose go.mod has `replace`
# lines, and all four peers have them. So each peer is built from a throw-away module
# `local/<name>` that carries the needed replace lines itself (only the main module's
# replaces apply): upstream's versioned replaces are copied verbatim, and k8s.io/kubernetes'
# local ./staging/src/k8s.io/<m> replaces are mapped to the published k8s.io/<m>@v0.<minor>.<patch>.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=versions.sh
source "$HERE/versions.sh"
GO=$KCSI_GO

peers=("$@")
[ ${#peers[@]} -gt 0 ] || peers=("${KCSI_DEFAULT_PEERS[@]}")
for p in "${peers[@]}"; do kcsi_peer_key "$p" >/dev/null; done   # reject typos before building

mkdir -p "$KCSI_PEERS_CACHE"

# upstream_replaces GOMOD STAGING: print `go mod edit` -replace flags derived from a go.mod.
upstream_replaces() {
  local gomod=$1 staging=$2 a b c d e left right rver
  # Collect both `replace x => y` lines and `replace ( ... )` blocks; drop comments.
  awk '
    /^replace[ \t]*\(/ { blk = 1; next }
    blk && /^\)/       { blk = 0; next }
    /^replace[ \t]/    { sub(/^replace[ \t]+/, ""); print; next }
    blk && /=>/        { print }
  ' "$gomod" | sed 's://.*$::' |
  while read -r a b c d e; do
    [ -n "$a" ] || continue
    if [ "$b" = "=>" ]; then left=$a right=$c rver=$d; else left="$a@$b" right=$d rver=$e; fi
    if [ -n "$rver" ]; then
      echo "-replace=$left=$right@$rver"
    elif [[ -n $staging && $left == k8s.io/* && $right == ./staging/* ]]; then
      echo "-replace=${left%@*}=${left%@*}@$staging"
    fi
    # Other local-path replaces (etcd's ../api, ./FORBIDDEN_DEPENDENCY) only matter inside
    # upstream's own repo: the published module versions are what we want.
  done
}

# build_from_archive NAME OUT LOG: the offline build of a kubernetes-csi peer from its archive.
build_from_archive() {
  local name=$1 out=$2 log=$3 archive pkg stamp work
  archive=$(kcsi_peer_var "$name" ARCHIVE); pkg=$(kcsi_peer_var "$name" ARCHIVE_PKG)
  stamp=$(kcsi_peer_var "$name" STAMP)
  [ -f "$KCSI_PEER_ARCHIVES/$archive.tar.gz" ] || {
    echo "no archive $KCSI_PEER_ARCHIVES/$archive.tar.gz (set KCSI_PEER_ARCHIVES)" >>"$log"; return 1; }
  work=$(mktemp -d "$KCSI_PEERS_CACHE/.archive-$name-XXXXXX")
  # Chained with && : this runs where errexit is off (build_from_archive ... && ...).
  tar -xzf "$KCSI_PEER_ARCHIVES/$archive.tar.gz" -C "$work" >>"$log" 2>&1 &&
    (cd "$work/$archive" && GOFLAGS=-mod=vendor CGO_ENABLED=0 \
      "$GO" build -trimpath -ldflags "$stamp" -o "$out" "$pkg") >>"$log" 2>&1
  local rc=$?
  rm -rf "$work"
  return $rc
}

build_one() {
  local name=$1 module version pkg bin staging src require ldflags out dir work log gomod start
  module=$(kcsi_peer_var "$name" MODULE); version=$(kcsi_peer_var "$name" VERSION)
  pkg=$(kcsi_peer_var "$name" PKG); bin=$(kcsi_peer_var "$name" BIN)
  staging=$(kcsi_peer_var "$name" STAGING); src=$(kcsi_peer_var "$name" SRC)
  require=$(kcsi_peer_var "$name" REQUIRE)   # extra module@version pins for a SRC peer
  out=$(kcsi_peer_bin "$name"); dir=$(dirname "$out")

  if [ -x "$out" ]; then echo "cached: $out"; return 0; fi

  start=$(date +%s)
  work=$(mktemp -d "$KCSI_PEERS_CACHE/.build-$name-XXXXXX")
  log="$KCSI_PEERS_CACHE/$(basename "$dir").build.log"
  echo "building $name $version (${pkg:-$src}) with $KCSI_GO_VERSION; log: $log"
  # errexit is ignored inside `( ... ) || handler`, so run the steps with errexit on and
  # collect the status afterwards instead.
  set +e
  (
    set -euo pipefail
    cd "$work"
    "$GO" mod init "local/$name"
    # Read upstream's go.mod from the module cache to copy its replace set.
    "$GO" mod download -json "$module@$version" >upstream.json || { cat upstream.json; exit 1; }
    gomod=$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p' upstream.json)
    [ -n "$gomod" ] || { cat upstream.json; echo "no go.mod for $module@$version"; exit 1; }
    flags=()
    if [ -n "$staging" ]; then
      for m in "${KCSI_K8S_STAGING[@]}"; do flags+=("-replace=k8s.io/$m=k8s.io/$m@$staging"); done
    fi
    mapfile -t -O "${#flags[@]}" flags < <(upstream_replaces "$gomod" "$staging")
    [ ${#flags[@]} -eq 0 ] || "$GO" mod edit "${flags[@]}"
    if [ -n "$src" ]; then
      # Our own main package: require the upstream module, then build the copied sources.
      cp "$src"/*.go .
      # shellcheck disable=SC2086 # REQUIRE is a space-separated list
      "$GO" get "$module@$version" $require
      pkg=.
    else
      "$GO" get "$pkg@$version"
    fi
    case "$name" in
      # Without these stamps kube-apiserver reports v0.0.0-master (and clients may reject it).
      apiserver) minor=${version#v1.}; minor=${minor%%.*}
                 ldflags="-X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor" ;;
      *) ldflags=$(kcsi_peer_var "$name" STAMP) ;;
    esac
    # Without -trimpath, as the kubelet-e2e binary and the volumeplugin tests are built: the flag
    # is part of a package's build-cache key, and the ~1 450 packages kube-apiserver shares with
    # the kubelet compile once per cold run only when both builds agree on it. Without it the
    # key holds the package's directory, the same module-cache path for every build here; with
    # it, two checkouts would share the cgo binding compiled with the first one's -L path.
    GOFLAGS="${GOFLAGS:+$GOFLAGS }-mod=mod" "$GO" build -ldflags "$ldflags" -o "$work/$bin" "$pkg"
  ) >"$log" 2>&1
  local rc=$?
  set -e
  if [ $rc -ne 0 ] && [ -n "$(kcsi_peer_var "$name" ARCHIVE)" ]; then
    echo "$name: the module proxy did not give $module@$version; building from its source archive" | tee -a "$log"
    build_from_archive "$name" "$work/$bin" "$log" && rc=0
  fi
  [ $rc -eq 0 ] || {
    echo "FAILED: $name after $(( $(date +%s) - start ))s; last lines of $log:" >&2
    tail -n 15 "$log" >&2
    rm -rf "$work"
    return 1
  }
  # Move into place only when complete, so a killed build never leaves a half binary "cached".
  mkdir -p "$dir"
  mv -f "$work/$bin" "$out"
  rm -rf "$work"
  echo "built $name in $(( $(date +%s) - start ))s: $out"
}

failed=()
for p in "${peers[@]}"; do
  build_one "$(kcsi_peer_key "$p")" || failed+=("$p")
done

echo "--- peer binaries"
for p in "${peers[@]}"; do
  b=$(kcsi_peer_bin "$p")
  if [ -x "$b" ]; then echo "$(kcsi_peer_key "$p") $b"; else echo "$(kcsi_peer_key "$p") MISSING ($b)"; fi
done
if [ ${#failed[@]} -gt 0 ]; then echo "failed: ${failed[*]}" >&2; exit 1; fi
