#!/usr/bin/env bash
# C suite: the headers (kcsi.h, kcsi_dlopen.h) as C11 and C++17, the C API test and the
# lifecycle test (every volume export through a whole lifecycle, volumes created with `kcsi
# create-volume`) against the real hostpathplugin, each plain, under AddressSanitizer and under
# valgrind; a check that those two programs call every exported function; dlopen of every
# contract symbol, the exported-symbol
# snapshot, the SONAME, and `make install` + pkg-config + the example host.
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

WORK=$(mktemp -d /tmp/kcsi-c.XXXXXX)
DRIVER_PID=
cleanup() {
  if [ -n "$DRIVER_PID" ]; then kill "$DRIVER_PID" 2>/dev/null; wait "$DRIVER_PID" 2>/dev/null; fi
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

# Every exported function is called by one of the programs ASAN and valgrind run.
every_export_exercised() {
  local missing
  missing=$(nm -D --defined-only "$LIB" | awk '{print $NF}' | grep '^kcsi_' | sort -u |
    while read -r f; do grep -qw "$f" tests/c/api_test.c tests/c/lifecycle_test.c || echo "$f"; done)
  [ -z "$missing" ] || { echo "exports no C test calls (so neither ASAN nor valgrind checks them):"; echo "$missing"; return 1; }
  echo "every export is called by tests/c/api_test.c or tests/c/lifecycle_test.c"
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

# asan_run PROGRAM RUNNER: PROGRAM built with AddressSanitizer (leak checks on), run by RUNNER.
asan_run() {
  local name=$1 runner=$2
  c_program "$name" "${name}_asan" -g -O1 -fsanitize=address -fno-omit-frame-pointer || return 1
  # Proof the sanitizer is really in the binary, not just asked for.
  ldd "$WORK/${name}_asan" | grep -q libasan || { echo "libasan is not linked"; return 1; }
  ASAN_OPTIONS=detect_leaks=1:exitcode=23 \
    LSAN_OPTIONS=suppressions=$REPO/tests/c/lsan.supp:print_suppressions=0 \
    "$runner" "$WORK/${name}_asan" env >"$WORK/$name-asan.out" 2>&1
  local rc=$?
  cat "$WORK/$name-asan.out"
  return $rc
}
asan() {
  asan_run api_test run_api_test || return 1
  grep -q "^asan: on" "$WORK/api_test-asan.out" || { echo "the test binary was not built with ASAN"; return 1; }
  asan_run lifecycle_test run_lifecycle_test
}

# valgrind_run PROGRAM RUNNER
valgrind_run() {
  local name=$1 runner=$2
  c_program "$name" "${name}_vg" -g -O0 || return 1
  "$runner" "$WORK/${name}_vg" valgrind -q --error-exitcode=1 --leak-check=full \
    --errors-for-leak-kinds=definite --show-leak-kinds=definite \
    --suppressions="$REPO/tests/c/valgrind.supp"
}
valgrind_both() {
  valgrind_run api_test run_api_test && valgrind_run lifecycle_test run_lifecycle_test
}

step header-c11 header_c
step header-c++17 header_cxx
step api-test api_test
step lifecycle-test lifecycle_test
step every-export-exercised every_export_exercised
step dlopen-contract dlopen_test
step exported-symbols exported_symbols
step soname soname
step install-pkgconfig-example install_and_example
step asan asan
step valgrind valgrind_both

echo "C suite: $passed passed, ${#failed[@]} failed${failed[*]:+ (${failed[*]})}"
[ ${#failed[@]} -eq 0 ]
