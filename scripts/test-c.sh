#!/usr/bin/env bash
# C suite: the headers (kcsi.h, kcsi_dlopen.h) as C11 and C++17, the C API test against the real hostpathplugin (plain, under
# AddressSanitizer, under valgrind), dlopen of every contract symbol, the exported-symbol
# snapshot, the SONAME, and `make install` + pkg-config + the example host.
#   KCSI_UPDATE_SNAPSHOT=1 scripts/test-c.sh   rewrites tests/c/exported_symbols.txt
# Runs every step, then fails if any failed.
set -uo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
LIBDIR=${KCSI_LIBDIR:-$REPO/target/release}   # KCSI_LIBDIR: test another build of the library
LIB=$LIBDIR/libkcsi.so
CFLAGS=(-std=c11 -Wall -Wextra -Werror -pedantic -I"$REPO/include")

[ -e "$LIB" ] || make --no-print-directory build || exit 1
HOSTPATH=$(scripts/peers/path.sh hostpath) || exit 1   # built by `make peers` (scripts/test.sh does it)

WORK=$(mktemp -d /tmp/kcsi-c.XXXXXX)
DRIVER_PID=
cleanup() {
  if [ -n "$DRIVER_PID" ]; then kill "$DRIVER_PID" 2>/dev/null; wait "$DRIVER_PID" 2>/dev/null; fi
  # Nothing here mounts, but never leave a mount behind a test dir.
  grep -o " $WORK[^ ]*" /proc/self/mountinfo 2>/dev/null | sort -r | xargs -r -n1 umount -l 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT

DRIVER=c-test.csi.k8s.io
SOCK=$WORK/csi.sock
"$HOSTPATH" --endpoint="unix://$SOCK" --drivername="$DRIVER" --nodeid=c-test-node \
  --statedir="$WORK/state" >"$WORK/driver.log" 2>&1 &
DRIVER_PID=$!
# Ready when a connect succeeds (the socket file appears at bind(), before listen()).
listening() { python3 -c 'import socket,sys; socket.socket(socket.AF_UNIX).connect(sys.argv[1])' "$SOCK" 2>/dev/null; }
for _ in $(seq 400); do listening && break; sleep 0.05; done
listening || { echo "hostpathplugin did not start:"; cat "$WORK/driver.log"; exit 1; }

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

# Each run gets its own root dir.
run_api_test() {
  local bin=$1; shift
  local root; root=$(mktemp -d "$WORK/root.XXXXXX")
  "$@" "$bin" "$SOCK" "$DRIVER" "$root"
}

api_test() {
  gcc "${CFLAGS[@]}" -O1 tests/c/api_test.c -L"$LIBDIR" -lkcsi -Wl,-rpath,"$LIBDIR" -o "$WORK/api_test" &&
    run_api_test "$WORK/api_test" env
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
  ldd "$WORK/kcsi-host" | grep -q "libkcsi.so.1 => $prefix/lib/libkcsi.so.1" ||
    { echo "example does not load the installed libkcsi.so.1:"; ldd "$WORK/kcsi-host"; return 1; }
  local root; root=$(mktemp -d "$WORK/root.XXXXXX")
  "$WORK/kcsi-host" "$DRIVER" "$SOCK" "$root" node-example | tee "$WORK/example.out" &&
    grep -q "\"name\":\"$DRIVER\"" "$WORK/example.out" && grep -q "^deregistered $DRIVER" "$WORK/example.out"
}

asan() {
  gcc "${CFLAGS[@]}" -g -O1 -fsanitize=address -fno-omit-frame-pointer tests/c/api_test.c \
    -L"$LIBDIR" -lkcsi -Wl,-rpath,"$LIBDIR" -o "$WORK/api_test_asan" || return 1
  # Proof the sanitizer is really in the binary, not just asked for.
  ldd "$WORK/api_test_asan" | grep -q libasan || { echo "libasan is not linked"; return 1; }
  ASAN_OPTIONS=detect_leaks=1:exitcode=23 \
    LSAN_OPTIONS=suppressions=$REPO/tests/c/lsan.supp:print_suppressions=0 \
    run_api_test "$WORK/api_test_asan" env >"$WORK/asan.out" 2>&1
  local rc=$?
  cat "$WORK/asan.out"
  grep -q "^asan: on" "$WORK/asan.out" || { echo "the test binary was not built with ASAN"; return 1; }
  return $rc
}

valgrind_run() {
  gcc "${CFLAGS[@]}" -g -O0 tests/c/api_test.c -L"$LIBDIR" -lkcsi -Wl,-rpath,"$LIBDIR" -o "$WORK/api_test_vg" || return 1
  run_api_test "$WORK/api_test_vg" valgrind -q --error-exitcode=1 --leak-check=full \
    --errors-for-leak-kinds=definite --show-leak-kinds=definite \
    --suppressions="$REPO/tests/c/valgrind.supp"
}

step header-c11 header_c
step header-c++17 header_cxx
step api-test api_test
step dlopen-contract dlopen_test
step exported-symbols exported_symbols
step soname soname
step install-pkgconfig-example install_and_example
step asan asan
step valgrind valgrind_run

echo "C suite: $passed passed, ${#failed[@]} failed${failed[*]:+ (${failed[*]})}"
[ ${#failed[@]} -eq 0 ]
