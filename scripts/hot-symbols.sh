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
#      ran in that process. (ring's C and assembly keep their own alignment: every function on
#      a page that ran is listed.) The list holds the functions both ran, then the kubelet's
#      own, then the controller's own, so that each process's code is contiguous.
# A listed name the next build no longer has (changed code, another rustc) is skipped by the
# linker. Regenerate after large changes; `make bench-footprint` shows the effect. Needs root.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
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
lib=$out/build/release/libkcsi.so

echo "--- on a loop device with read-ahead off"
size=$(( 2 * $(stat -c %s "$lib") / 1048576 + 64 ))
truncate -s "${size}M" "$img"
mkfs.ext4 -q -F "$img"
mount -o loop "$img" "$mnt"
for role in kubelet controller; do
  mkdir "$mnt/$role"
  cp "$lib" "$mnt/$role/libkcsi.so.1"
done
umount "$mnt"   # and mounted again: nothing of the file is cached
mount -o loop,ro "$img" "$mnt"
dev=$(findmnt -no SOURCE "$mnt")
echo 0 >"/sys/block/$(basename "$dev")/queue/read_ahead_kb"

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
# Three times: two runs differ by about 3 % of the functions they execute (timing: a pooled
# connection reused or opened anew, a request retried); the page cache keeps what any run
# executed.
for run in 1 2 3; do
  echo "--- benches/kubelet/footprint on those copies, run $run of 3"
  "$FOOTPRINT" -repo "$REPO" -e2e "$out/e2e" -steady 60s -every 30s
done

python3 - "$mnt/kubelet/libkcsi.so.1" "$mnt/controller/libkcsi.so.1" link/hot-symbols.txt <<'PY'
import ctypes, mmap, os, subprocess, sys
kubelet, controller, listing = sys.argv[1:]
# The pages of the file in the page cache: mincore on a fresh mapping of it.
libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
def cached(lib):
    fd = os.open(lib, os.O_RDONLY)
    size = os.fstat(fd).st_size
    vec = (ctypes.c_ubyte * ((size + 4095) // 4096))()
    addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if addr in (None, ctypes.c_void_p(-1).value) or libc.mincore(addr, size, vec) != 0:
        sys.exit(f"hot-symbols: mincore {lib}: {os.strerror(ctypes.get_errno())}")
    libc.munmap(addr, size)
    os.close(fd)
    return {i for i, v in enumerate(vec) if v & 1}
pages = {"kubelet": cached(kubelet), "controller": cached(controller)}
lib = kubelet
# Function symbols by file offset, through the executable segment's address.
segs = []
for line in subprocess.run(["readelf", "-lW", lib], capture_output=True, text=True, check=True).stdout.splitlines():
    p = line.split()
    if p[:1] == ["LOAD"] and "E" in p[6:-1]:
        segs.append((int(p[2], 16), int(p[1], 16), int(p[4], 16)))  # vaddr, offset, filesz
def offset(vaddr):
    for v, o, n in segs:
        if v <= vaddr < v + n:
            return vaddr - v + o
    return None
ran, total = {"both": [], "kubelet": [], "controller": []}, 0
for line in subprocess.run(["nm", "-S", "--defined-only", lib], capture_output=True, text=True, check=True).stdout.splitlines():
    p = line.split()
    if len(p) != 4 or p[2] not in "tTwW":
        continue
    total += 1
    start, length = offset(int(p[0], 16)), max(int(p[1], 16), 1)
    if start is None:
        continue
    span = range(start // 4096, (start + length - 1) // 4096 + 1)
    by = [role for role, cache in pages.items() if any(pg in cache for pg in span)]
    if by:
        ran["both" if len(by) == 2 else by[0]].append((start, p[3]))
names = list(dict.fromkeys(n for group in ran.values() for _, n in sorted(group)))
open(listing, "w").write("".join(n + "\n" for n in names))
print(f"hot-symbols: of {total} functions, {len(ran['both'])} ran in both processes, "
      f"{len(ran['kubelet'])} in the kubelet only, {len(ran['controller'])} in the controller only; "
      f"listed in {listing}")
PY
