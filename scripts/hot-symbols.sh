#!/usr/bin/env bash
# make hot-symbols: regenerates link/hot-symbols.txt, the library's functions that the kubelet
# and the attach/detach controller run, which build.rs has the linker lay out first, side by
# side. The kernel maps a library's code 64 KiB around each page a process touches
# (fault-around): scattered, the functions that run would make nearly all of .text resident.
# How: the page cache itself says which functions ran.
#   1. The library is built as `make build` builds it, but with every function on a page of
#      its own (LLVM's -align-all-functions=12), into target/hot-symbols. The optimised code is the
#      release build's: alignment is chosen after inlining, and the flag goes in through
#      RUSTC_WRAPPER, which cargo leaves out of each crate's metadata, so symbol names and
#      hashes are the release build's too (the whole workspace, as `make build`: features,
#      and so hashes, are unified over what is built).
#   2. Two copies of it, one for the kubelet and one for the controller, go on an ext4 file
#      system of its own on a loop device with read-ahead off, mounted fresh: none of their
#      pages is cached, and a page comes into the cache only when a process executes it (the
#      kernel's fault-around maps cached pages, it reads none).
#   3. The memory benchmark (benches/kubelet/footprint: one pod on an attach-required volume
#      per plugin, started, run for a minute and torn down) runs three times with those copies in
#      place of the installed library, through a wrapper of the kubelet-e2e binary that picks
#      the copy.
#   4. mincore(2) reads which pages of each copy are cached: every function on one of them
#      ran in that process (scripts/hot_symbols.py). (std's and ring's precompiled code keep
#      their own alignment: every function on a page that ran is listed.) The list holds the
#      functions both ran, the kubelet's own and the controller's own, each group under a
#      comment line, so that each process's code is contiguous.
#   5. Refining, twice (KCSI_HOT_PASSES): the release build, ordered by the list, runs the same
#      way once; every function on a page it ran outside the list joins it, and a listed one
#      another process ran changes group. Runs differ (a pooled connection reused or opened
#      anew, a request retried), and each function a list misses costs the release build a
#      64 KiB window; here it costs the list at most the page it shares. The run also sees what
#      runs while the pod just runs (footprint_steady below): kcsi unmaps its code 10 s after
#      its calls (src/code_pages.rs), and what runs next maps back 64 KiB around each page, so
#      that code gets groups of its own in the middle of the list ("kubelet steady", "both
#      steady", "controller steady"), each process's steady code contiguous within its code.
# `scripts/hot-symbols.sh refine` refines the committed list without collecting anew (about 9 min
# a pass). A listed name the next build no longer has (changed code, another rustc) is skipped by
# the linker; any change of dependencies or features renames every function (the hash in each
# symbol), so collect anew then. `make bench-footprint` shows the effect. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
mode=${1:-collect}
passes=${KCSI_HOT_PASSES:-2}
case "$mode" in collect|refine) ;; *) echo "hot-symbols: unknown mode '$mode' (collect or refine)" >&2; exit 2 ;; esac
[ "$(id -u)" = 0 ] || { echo "hot-symbols: the kubelet and the drivers mount volumes and loop devices: run it as root" >&2; exit 1; }

out=$REPO/target/hot-symbols
mnt=$out/lib
img=$out/lib.ext4
cleanup() {
  if mountpoint -q "$mnt"; then umount "$mnt"; fi
  rm -f "$img"
}
trap cleanup EXIT
cleanup
mkdir -p "$out" "$mnt"

# The two copies of a build go on an ext4 file system of its own on a loop device with read-ahead
# off, mounted fresh: none of their pages is cached, and a page comes into the cache only when a
# process executes it (the kernel's fault-around maps cached pages, it reads none).
on_loop() {
  cleanup
  truncate -s "$(( 2 * $(stat -c %s "$1") / 1048576 + 64 ))M" "$img"
  mkfs.ext4 -q -F "$img"
  mount -o loop "$img" "$mnt"
  for role in kubelet controller; do
    mkdir "$mnt/$role"
    cp "$1" "$mnt/$role/libkcsi.so.1"
  done
  umount "$mnt"   # and mounted again: nothing of the file is cached
  mount -o loop,ro "$img" "$mnt"
  echo 0 >"/sys/block/$(basename "$(findmnt -no SOURCE "$mnt")")/queue/read_ahead_kb"
}

source scripts/kubelet-setup.sh hostpath registrar attacher etcd apiserver
E2E=$(scripts/kubelet-e2e-bin.sh)
FOOTPRINT=$(scripts/kubelet-e2e-bin.sh footprint)
# The nodes run `<e2e> kubelet ...` and `<e2e> controller ...`.
cat >"$out/e2e" <<WRAP
#!/bin/sh
case "\$1" in kubelet|controller) export LD_LIBRARY_PATH=$mnt/\$1\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH} ;; esac
exec "$E2E" "\$@"
WRAP
chmod +x "$out/e2e"
footprint() {
  "$FOOTPRINT" -repo "$REPO" -e2e "$out/e2e" -steady "${1:-60s}" -every 30s
}
# The same run, seeing what runs while the pod just runs: 20 s after the pod is Running, the
# copies' cached pages are saved (<role>.before), then unmapped from their process and evicted;
# 65 s later (the kubelet reads a volume's stats every minute) what is cached again is what ran
# since (<role>.steady), a page at a time.
footprint_steady() {
  local log=$out/footprint.log snaps=$out/snapshots
  rm -rf "$snaps" && mkdir -p "$snaps"
  footprint 90s | tee "$log" &
  local run=$!
  until grep -q '^\[kcsi\] one pod Running' "$log"; do
    kill -0 "$run" 2>/dev/null || { wait "$run"; return 1; }
    sleep 1
  done
  sleep 20
  for role in kubelet controller; do
    python3 scripts/hot_symbols.py snapshot "$mnt/$role/libkcsi.so.1" "$snaps/$role.before"
  done
  local pid
  for role in kubelet controller; do
    pid=$(pgrep -f "kubelet-e2e $role" | head -1) ||
      { echo "hot-symbols: no running 'kubelet-e2e $role' process to evict kcsi's pages from" >&2; return 1; }
    python3 scripts/hot_symbols.py evict "$mnt/$role/libkcsi.so.1" "$pid"
  done
  sleep 65
  for role in kubelet controller; do
    python3 scripts/hot_symbols.py snapshot "$mnt/$role/libkcsi.so.1" "$snaps/$role.steady"
  done
  wait "$run"
}

if [ "$mode" = collect ]; then
  echo "--- the library, one function to a page"
  cat >"$out/rustc-wrapper" <<'WRAP'
#!/bin/sh
rustc=$1; shift
exec "$rustc" "$@" -Cllvm-args=-align-all-functions=12
WRAP
  chmod +x "$out/rustc-wrapper"
  # Crates cargo built with another wrapper would keep that wrapper's code: start afresh then.
  if ! cmp -s "$out/rustc-wrapper" "$out/build/wrapper"; then
    rm -rf "$out/build"
    mkdir -p "$out/build"
    cp "$out/rustc-wrapper" "$out/build/wrapper"
  fi
  CARGO_TARGET_DIR=$out/build RUSTC_WRAPPER=$out/rustc-wrapper cargo build --quiet --release --locked --workspace
  on_loop "$out/build/release/libkcsi.so"
  # Three times: two runs differ by about 3 % of the functions they execute (timing: a pooled
  # connection reused or opened anew, a request retried); the page cache keeps what any run
  # executed.
  for run in 1 2 3; do
    echo "--- benches/kubelet/footprint on those copies, run $run of 3"
    footprint
  done
  python3 scripts/hot_symbols.py collect "$mnt" link/hot-symbols.txt
fi

# Refining: the release build, ordered by the list, run the same way. Each pass adds what its
# run executed outside the list (a collection's runs still miss timing-dependent paths, each a
# 64 KiB window of fault-around in the release build) and regroups what another process ran.
for pass in $(seq "$passes"); do
  echo "--- the release build ordered by the list, pass $pass of $passes"
  cargo build --quiet --release --locked --workspace
  on_loop target/release/libkcsi.so
  footprint_steady
  python3 scripts/hot_symbols.py refine "$mnt" link/hot-symbols.txt "$out/snapshots"
done
cargo build --quiet --release --locked --workspace
