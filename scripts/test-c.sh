#!/usr/bin/env bash
# C suite: the headers (kcsi.h, kcsi_dlopen.h) as C11 and C++17, the C API test and the
# lifecycle test (every volume export through a whole lifecycle, volumes created with `kcsi
# create-volume`) against the real hostpathplugin, and the attach test (a real attach and
# detach through a real kube-apiserver, the real external-attacher and hostpathplugin with
# -enable-attach, checked in the API server and the driver's log), each plain, under
# AddressSanitizer and under valgrind; a check that the programs ASAN and valgrind run call
# every exported function (read from their symbol tables); dlopen of every contract symbol,
# the exported-symbol snapshot, the SONAME, and `make install` + pkg-config + the example host.
#   KCSI_UPDATE_SNAPSHOT=1 scripts/test-c.sh   rewrites tests/c/exported_symbols.txt
# Runs every step, then fails if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
LIBDIR=${KCSI_LIBDIR:-$REPO/target/release}   # KCSI_LIBDIR: test another build of the library
LIB=$LIBDIR/libkcsi.so
CFLAGS=(-std=c11 -Wall -Wextra -Werror -pedantic -I"$REPO/include")

KCSI=$REPO/target/release/kcsi   # the provisioner's CreateVolume for the lifecycle test
[ -e "$LIB" ] && [ -x "$KCSI" ] || make --no-print-directory build || exit 1
HOSTPATH=$(scripts/peers/path.sh hostpath) || exit 1   # built by `make peers` (scripts/test.sh does it)
ATTACHER=$(scripts/peers/path.sh attacher) || exit 1
# The attach test's oracles read the API server's and the driver's JSON with jq.
command -v jq >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq jq >/dev/null; } || exit 1

WORK=$(mktemp -d /tmp/kcsi-c.XXXXXX)
DRIVER_PID= ATTACH_DRIVER_PID= ATTACHER_PID=
cleanup() {
  for pid in $ATTACHER_PID $ATTACH_DRIVER_PID $DRIVER_PID; do kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; done
  scripts/peers/apiserver.sh stop "$WORK/apiserver" >/dev/null
  # Never leave a mount behind a test dir.
  grep -o " $WORK[^ ]*" /proc/self/mountinfo 2>/dev/null | sort -r | xargs -r -n1 umount -l 2>/dev/null
  # A lifecycle run that died before DeleteVolume leaves its block volume's loop device.
  losetup -a | awk -F: -v w="$WORK/" 'index($0, w) { print $1 }' | xargs -r -n1 losetup -d 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

DRIVER=c-test.csi.k8s.io
SOCK=$WORK/csi.sock
"$HOSTPATH" --endpoint="unix://$SOCK" --drivername="$DRIVER" --nodeid=c-test-node \
  --statedir="$WORK/state" >"$WORK/driver.log" 2>&1 &
DRIVER_PID=$!
# Ready when a connect succeeds (the socket file appears at bind(), before listen()).
listening() { python3 -c 'import socket,sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])' "$1" 2>/dev/null; }
wait_listening() { for _ in $(seq 400); do listening "$1" && return 0; sleep 0.05; done; listening "$1"; }
wait_listening "$SOCK" || { echo "hostpathplugin did not start:"; cat "$WORK/driver.log"; exit 1; }

failed=(); passed=0
step() {
  local name=$1; shift
  echo "--- $name"
  if "$@"; then passed=$((passed + 1)); echo "--- $name: ok"; else failed+=("$name"); echo "--- $name: FAILED"; fi
}

header_c() { for h in include/kcsi.h include/kcsi_dlopen.h; do gcc "${CFLAGS[@]}" -fsyntax-only -x c "$h" || return 1; done; }
header_cxx() {
  for h in include/kcsi.h include/kcsi_dlopen.h; do
    g++ -std=c++17 -Wall -Wextra -Werror -pedantic -I"$REPO/include" -x c++ -fsyntax-only "$h" || return 1
  done &&
    # Linking a C++ program proves the declarations have C linkage (no mangled names).
    g++ -std=c++17 -Wall -Wextra -Werror -x c++ -I"$REPO/include" examples/c/host.c \
      -L"$LIBDIR" -lkcsi -Wl,-rpath,"$LIBDIR" -o "$WORK/host-cxx"
}

# Each run gets its own root dir. run_api_test BIN WRAPPER...: the API test;
# run_lifecycle_test BIN WRAPPER...: the lifecycle test on a fresh filesystem and block volume,
# deleted afterwards (hostpathplugin detaches the block volume's loop device only then).
run_api_test() {
  local bin=$1; shift
  local root; root=$(mktemp -d "$WORK/root.XXXXXX")
  "$@" "$bin" "$SOCK" "$DRIVER" "$root"
}
run_lifecycle_test() {
  local bin=$1; shift
  local root fs block rc; root=$(mktemp -d "$WORK/root.XXXXXX")
  fs=$("$KCSI" create-volume --endpoint "$SOCK" --name "c-fs-${root##*.}" --size 16Mi) || return 1
  block=$("$KCSI" create-volume --endpoint "$SOCK" --name "c-block-${root##*.}" --size 8Mi --block) ||
    { "$KCSI" delete-volume --endpoint "$SOCK" --volume-handle "$fs"; return 1; }
  "$@" "$bin" "$SOCK" "$DRIVER" "$root" "$fs" "$block"; rc=$?
  "$KCSI" delete-volume --endpoint "$SOCK" --volume-handle "$fs" || rc=1
  "$KCSI" delete-volume --endpoint "$SOCK" --volume-handle "$block" || rc=1
  return $rc
}

# The attach test's peers: a real kube-apiserver on etcd; a second hostpathplugin, with
# -enable-attach (which makes NodeStage require a ControllerPublishVolume first, so the first
# one stays without it), logging every call (-v=5); its Node, and its CSINode, where the real
# external-attacher looks up the driver's node ID.
API=$WORK/apiserver
ATTACH_DRIVER=c-attach.csi.k8s.io
ATTACH_NODE=c-attach-node
ATTACH_SOCK=$WORK/attach/csi.sock
ATTACH_LOG=$WORK/attach/driver.log
API_CURL=()   # curl as the API server's admin, set once it runs
# api METHOD PATH [BODY]: one request to the API server; prints the response body, fails on an
# HTTP error status.
api() {
  "${API_CURL[@]}" --fail-with-body -H 'Content-Type: application/json' -X "$1" ${3:+--data-binary "$3"} "$APISERVER_URL$2"
}
start_attach_peers() {
  scripts/peers/apiserver.sh start "$API" >"$WORK/apiserver-start.log" 2>&1 || { cat "$WORK/apiserver-start.log"; return 1; }
  APISERVER_URL=$(sed -n 's/^APISERVER_URL=//p' "$API/env")
  API_CURL=(curl -sS --cacert "$API/certs/apiserver.crt" -H "Authorization: Bearer $(cat "$API/token")")
  mkdir -p "$WORK/attach"
  "$HOSTPATH" --endpoint="unix://$ATTACH_SOCK" --drivername="$ATTACH_DRIVER" --nodeid="$ATTACH_NODE" \
    --statedir="$WORK/attach/state" -enable-attach -v=5 >"$ATTACH_LOG" 2>&1 &
  ATTACH_DRIVER_PID=$!
  wait_listening "$ATTACH_SOCK" || { echo "hostpathplugin -enable-attach did not start:"; cat "$ATTACH_LOG"; return 1; }
  local uid
  uid=$(api POST /api/v1/nodes "{\"metadata\":{\"name\":\"$ATTACH_NODE\"}}" | jq -r .metadata.uid) || return 1
  # Owned by the Node, as the kubelet makes it: the node host (wait_for_attach) replaces one that is not.
  api POST /apis/storage.k8s.io/v1/csinodes "{\"metadata\":{\"name\":\"$ATTACH_NODE\",\"ownerReferences\":[{
      \"apiVersion\":\"v1\",\"kind\":\"Node\",\"name\":\"$ATTACH_NODE\",\"uid\":\"$uid\"}]},
      \"spec\":{\"drivers\":[{\"name\":\"$ATTACH_DRIVER\",\"nodeID\":\"$ATTACH_NODE\"}]}}" >/dev/null || return 1
  "$ATTACHER" --csi-address="$ATTACH_SOCK" --kubeconfig="$API/kubeconfig" --timeout=30s --v=5 \
    >"$WORK/attach/external-attacher.log" 2>&1 &
  ATTACHER_PID=$!
  echo "kube-apiserver at $APISERVER_URL, $ATTACH_DRIVER with -enable-attach, external-attacher (pid $ATTACHER_PID)"
}

# driver_called METHOD HANDLE: the attach driver's log holds a successful METHOD for volume
# HANDLE on the test's node. Every gRPCCall line must parse (jq fails on one that does not).
driver_called() {
  sed -n 's/^.*gRPCCall: //p' "$ATTACH_LOG" | jq -e -s --arg m "/csi.v1.Controller/$1" --arg v "$2" \
    --arg n "$ATTACH_NODE" 'any(.[]; .Method == $m and .Request.volume_id == $v and .Request.node_id == $n and .Error == "")' \
    >/dev/null || { echo "no successful $1 of $2 on $ATTACH_NODE in the driver's log $ATTACH_LOG"; return 1; }
}

# run_attach_test BIN WRAPPER...: a fresh volume and its PersistentVolume; BIN attach, then the
# VolumeAttachment upstream names csi-<sha256(handle+driver+node)> is in the API server, attached,
# for that PV and node, and the driver published the volume to the node; BIN detach, then the
# VolumeAttachment is gone and the driver unpublished the volume.
run_attach_test() {
  local bin=$1; shift
  [ -n "$ATTACHER_PID" ] || { echo "the attach test's peers did not start"; return 1; }
  local root pv handle va
  root=$(mktemp -d "$WORK/root.XXXXXX")
  pv=$(printf 'pv-c-attach-%s' "${root##*.}" | tr '[:upper:]' '[:lower:]')
  handle=$("$KCSI" create-volume --endpoint "$ATTACH_SOCK" --name "$pv" --size 1Mi) || return 1
  api POST /api/v1/persistentvolumes "{\"metadata\":{\"name\":\"$pv\"},\"spec\":{\"capacity\":{\"storage\":\"1Mi\"},
    \"accessModes\":[\"ReadWriteOnce\"],\"csi\":{\"driver\":\"$ATTACH_DRIVER\",\"volumeHandle\":\"$handle\"}}}" >/dev/null || return 1
  va=csi-$(printf '%s%s%s' "$handle" "$ATTACH_DRIVER" "$ATTACH_NODE" | sha256sum | cut -d' ' -f1)
  local args=("$API/kubeconfig" "$ATTACH_DRIVER" "$ATTACH_NODE" "$root" "$pv" "$handle")

  "$@" "$bin" attach "${args[@]}" | tee "$root/attach.out"
  [ "${PIPESTATUS[0]}" = 0 ] || return 1
  grep -qx "attached $va" "$root/attach.out" || { echo "attach did not name the VolumeAttachment $va"; return 1; }
  api GET "/apis/storage.k8s.io/v1/volumeattachments/$va" >"$root/va.json" || return 1
  jq -e --arg d "$ATTACH_DRIVER" --arg n "$ATTACH_NODE" --arg pv "$pv" '.spec.attacher == $d and .spec.nodeName == $n
    and .spec.source.persistentVolumeName == $pv and .status.attached == true' "$root/va.json" >/dev/null ||
    { echo "VolumeAttachment $va is not $pv attached to $ATTACH_NODE by $ATTACH_DRIVER:"; cat "$root/va.json"; return 1; }
  driver_called ControllerPublishVolume "$handle" || return 1
  echo "VolumeAttachment $va attached in the API server; ControllerPublishVolume in the driver's log"

  "$@" "$bin" detach "${args[@]}" || return 1
  local code
  code=$("${API_CURL[@]}" -o /dev/null -w '%{http_code}' "$APISERVER_URL/apis/storage.k8s.io/v1/volumeattachments/$va")
  [ "$code" = 404 ] || { echo "VolumeAttachment $va after detach: HTTP $code, want 404"; return 1; }
  driver_called ControllerUnpublishVolume "$handle" || return 1
  echo "VolumeAttachment $va gone from the API server; ControllerUnpublishVolume in the driver's log"
  api DELETE "/api/v1/persistentvolumes/$pv" >/dev/null && "$KCSI" delete-volume --endpoint "$ATTACH_SOCK" --volume-handle "$handle"
}

# c_program NAME FLAGS...: builds tests/c/NAME.c against the library into $WORK/NAME<suffix>.
c_program() {
  local name=$1 out=$2; shift 2
  gcc "${CFLAGS[@]}" "$@" "tests/c/$name.c" -L"$LIBDIR" -lkcsi -Wl,-rpath,"$LIBDIR" -o "$WORK/$out"
}

api_test() {
  c_program api_test api_test -O1 && run_api_test "$WORK/api_test" env
}

lifecycle_test() {
  c_program lifecycle_test lifecycle_test -O1 && run_lifecycle_test "$WORK/lifecycle_test" env
}

attach_test() {
  c_program attach_test attach_test -O1 && run_attach_test "$WORK/attach_test" env
}

# Every exported function is called by the programs ASAN ran and by those valgrind ran: the
# kcsi_ symbols their binaries import from libkcsi.so (a call in a comment, or one the compiler
# dropped, imports nothing).
C_TESTS=(api_test lifecycle_test attach_test)
every_export_exercised() {
  local kind bins missing rc=0
  nm -D --defined-only "$LIB" | awk '$NF ~ /^kcsi_/ {print $NF}' | sort -u >"$WORK/exports-defined.txt"
  for kind in asan vg; do
    bins=("${C_TESTS[@]/#/$WORK/}"); bins=("${bins[@]/%/_$kind}")
    nm -D --undefined-only "${bins[@]}" >"$WORK/imports-$kind.nm" || { rc=1; continue; }
    awk '$NF ~ /^kcsi_/ {print $NF}' "$WORK/imports-$kind.nm" | sort -u >"$WORK/imports-$kind.txt"
    missing=$(comm -23 "$WORK/exports-defined.txt" "$WORK/imports-$kind.txt")
    if [ -n "$missing" ]; then
      echo "exports that none of the $kind binaries (${C_TESTS[*]}) calls:"; echo "$missing"; rc=1
    else
      echo "the $kind binaries of ${C_TESTS[*]} call all $(wc -l <"$WORK/exports-defined.txt") exports"
    fi
  done
  return $rc
}

dlopen_test() {
  gcc "${CFLAGS[@]}" tests/c/dlopen_test.c -ldl -o "$WORK/dlopen_test" &&
    "$WORK/dlopen_test" "$LIB" tests/c/contract_symbols.txt
}

exported_symbols() {
  nm -D --defined-only "$LIB" | awk '{print $NF}' | sort -u >"$WORK/exports.txt"
  local bad; bad=$(grep -v '^kcsi_' "$WORK/exports.txt")
  if [ -n "$bad" ]; then echo "libkcsi.so exports symbols outside the kcsi_ namespace:"; echo "$bad"; return 1; fi
  if [ "${KCSI_UPDATE_SNAPSHOT:-}" = 1 ]; then
    cp "$WORK/exports.txt" tests/c/exported_symbols.txt; echo "snapshot updated"; return 0
  fi
  local removed added
  removed=$(comm -23 tests/c/exported_symbols.txt "$WORK/exports.txt")
  added=$(comm -13 tests/c/exported_symbols.txt "$WORK/exports.txt")
  if [ -n "$added" ]; then
    echo "NOTICE: new exports (update the snapshot: KCSI_UPDATE_SNAPSHOT=1 scripts/test-c.sh):"; echo "$added"
  fi
  if [ -n "$removed" ]; then echo "exports REMOVED since the snapshot (an ABI break):"; echo "$removed"; return 1; fi
  echo "$(wc -l <"$WORK/exports.txt") exported symbols, all kcsi_*, none removed"
}

soname() {
  local s; s=$(readelf -d "$LIB" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
  echo "SONAME: ${s:-none}"
  [ "$s" = libkcsi.so.1 ]
}

install_and_example() {
  local prefix=$WORK/prefix
  make --no-print-directory install PREFIX="$prefix" >"$WORK/install.log" 2>&1 || { cat "$WORK/install.log"; return 1; }
  ls -l "$prefix/lib" "$prefix/include"
  local flags; flags=$(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --cflags --libs kcsi) || return 1
  echo "pkg-config --cflags --libs kcsi: $flags"
  # A dlopen host needs only the installed headers and pkg-config's -I.
  # shellcheck disable=SC2046  # word splitting of pkg-config output is intended
  gcc -std=c11 -Wall -Wextra -Werror -pedantic $(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --cflags kcsi) \
    tests/c/dlopen_test.c -ldl -o "$WORK/dlopen-installed" || return 1
  # shellcheck disable=SC2086  # word splitting of pkg-config output is intended
  gcc -std=c11 -Wall -Wextra -Werror -pedantic examples/c/host.c $flags -Wl,-rpath,"$prefix/lib" \
    -o "$WORK/kcsi-host" || return 1
  # grep without -q here and below: under pipefail, -q's early exit can fail ldd with SIGPIPE.
  ldd "$WORK/kcsi-host" | grep "libkcsi.so.1 => $prefix/lib/libkcsi.so.1" >/dev/null ||
    { echo "example does not load the installed libkcsi.so.1:"; ldd "$WORK/kcsi-host"; return 1; }
  local root; root=$(mktemp -d "$WORK/root.XXXXXX")
  "$WORK/kcsi-host" "$DRIVER" "$SOCK" "$root" node-example | tee "$WORK/example.out" &&
    grep -q "\"name\":\"$DRIVER\"" "$WORK/example.out" && grep -q "^deregistered $DRIVER" "$WORK/example.out"
}

# asan_run PROGRAM RUNNER: PROGRAM built with AddressSanitizer (leak checks on), run by RUNNER.
asan_run() {
  local name=$1 runner=$2
  c_program "$name" "${name}_asan" -g -O1 -fsanitize=address -fno-omit-frame-pointer || return 1
  # Proof the sanitizer is really in the binary, not just asked for.
  ldd "$WORK/${name}_asan" | grep libasan >/dev/null || { echo "libasan is not linked"; return 1; }
  # KCSI_MALLOC=system: kcsi allocates from the process's malloc, where LeakSanitizer sees it.
  KCSI_MALLOC=system ASAN_OPTIONS=detect_leaks=1:exitcode=23 \
    LSAN_OPTIONS=suppressions=$REPO/tests/c/lsan.supp:print_suppressions=0 \
    "$runner" "$WORK/${name}_asan" env >"$WORK/$name-asan.out" 2>&1
  local rc=$?
  cat "$WORK/$name-asan.out"
  return $rc
}
asan() {
  asan_run api_test run_api_test || return 1
  grep -q "^asan: on" "$WORK/api_test-asan.out" || { echo "the test binary was not built with ASAN"; return 1; }
  asan_run lifecycle_test run_lifecycle_test && asan_run attach_test run_attach_test
}

# valgrind_run PROGRAM RUNNER
valgrind_run() {
  local name=$1 runner=$2
  c_program "$name" "${name}_vg" -g -O0 || return 1
  # KCSI_MALLOC=system: kcsi allocates from the process's malloc, which valgrind watches.
  KCSI_MALLOC=system "$runner" "$WORK/${name}_vg" valgrind -q --error-exitcode=1 --leak-check=full \
    --errors-for-leak-kinds=definite --show-leak-kinds=definite \
    --suppressions="$REPO/tests/c/valgrind.supp"
}
valgrind_all() {
  valgrind_run api_test run_api_test && valgrind_run lifecycle_test run_lifecycle_test &&
    valgrind_run attach_test run_attach_test
}

step header-c11 header_c
step header-c++17 header_cxx
step api-test api_test
step lifecycle-test lifecycle_test
step attach-peers start_attach_peers
step attach-test attach_test
step dlopen-contract dlopen_test
step exported-symbols exported_symbols
step soname soname
step install-pkgconfig-example install_and_example
step asan asan
step valgrind valgrind_all
step every-export-exercised every_export_exercised

echo "C suite: $passed passed, ${#failed[@]} failed${failed[*]:+ (${failed[*]})}"
[ ${#failed[@]} -eq 0 ]
