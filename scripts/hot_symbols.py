"""link/hot-symbols.txt from the page cache (scripts/hot-symbols.sh).

  hot_symbols.py collect KUBELET_COPY CONTROLLER_COPY LIST
      the functions on the cached pages of two copies of a build with every function on a page
      of its own: each ran in that process. Writes LIST afresh.
  hot_symbols.py refine KUBELET_COPY CONTROLLER_COPY LIST
      the same read of two copies of the release build, ordered by LIST: every function on a
      cached page joins LIST (a page holds a few, so a function the collection missed costs the
      hot block at most a page, not a 64 KiB window of fault-around), and a listed one moves to
      the group of the processes that ran it.

LIST holds three groups, each under a comment line LLD skips: the functions both processes ran,
then the kubelet's own, then the controller's own, so that each process's code is contiguous.
"""
import ctypes
import mmap
import os
import subprocess
import sys

GROUPS = ("both", "kubelet", "controller")

libc = ctypes.CDLL(None, use_errno=True)
libc.mmap.restype = ctypes.c_void_p
libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]


def cached(lib):
    """The page numbers of lib in the page cache: mincore on a fresh mapping of it."""
    fd = os.open(lib, os.O_RDONLY)
    size = os.fstat(fd).st_size
    vec = (ctypes.c_ubyte * ((size + 4095) // 4096))()
    addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
    if addr in (None, ctypes.c_void_p(-1).value) or libc.mincore(addr, size, vec) != 0:
        sys.exit(f"hot-symbols: mincore {lib}: {os.strerror(ctypes.get_errno())}")
    libc.munmap(addr, size)
    os.close(fd)
    return {i for i, v in enumerate(vec) if v & 1}


def functions(lib):
    """(file offset, length, name) of each function in lib's executable segment."""
    segs = []
    for line in subprocess.run(["readelf", "-lW", lib], capture_output=True, text=True, check=True).stdout.splitlines():
        p = line.split()
        if p[:1] == ["LOAD"] and "E" in p[6:-1]:
            segs.append((int(p[2], 16), int(p[1], 16), int(p[4], 16)))  # vaddr, offset, filesz
    out = []
    for line in subprocess.run(["nm", "-S", "--defined-only", lib], capture_output=True, text=True, check=True).stdout.splitlines():
        p = line.split()
        if len(p) != 4 or p[2] not in "tTwW":
            continue
        vaddr = int(p[0], 16)
        for v, o, n in segs:
            if v <= vaddr < v + n:
                out.append((vaddr - v + o, max(int(p[1], 16), 1), p[3]))
    return sorted(out)


def ran_by(kubelet, controller):
    """name -> the group of the processes that ran it, for each function on a cached page;
    and how many functions the build has."""
    pages = {"kubelet": cached(kubelet), "controller": cached(controller)}
    ran, funcs = {}, functions(kubelet)
    for start, length, name in funcs:
        span = range(start // 4096, (start + length - 1) // 4096 + 1)
        by = [role for role, cache in pages.items() if any(pg in cache for pg in span)]
        if by:
            ran[name] = "both" if len(by) == 2 else by[0]
    return ran, len(funcs)


def read_list(path):
    groups = {g: [] for g in GROUPS}
    group = "both"  # a list written before the groups were marked
    for line in open(path):
        line = line.strip()
        if line.startswith("# "):
            group = line[2:]
        elif line:
            groups[group].append(line)
    return groups


def write_list(path, groups):
    with open(path, "w") as f:
        for g in GROUPS:
            f.write(f"# {g}\n")
            f.writelines(n + "\n" for n in dict.fromkeys(groups[g]))


def main():
    mode, kubelet, controller, listing = sys.argv[1:]
    ran, total = ran_by(kubelet, controller)  # in address order
    if mode == "collect":
        groups = {g: [n for n, r in ran.items() if r == g] for g in GROUPS}
        write_list(listing, groups)
        print(f"hot-symbols: of {total} functions, {len(groups['both'])} ran in both processes, "
              f"{len(groups['kubelet'])} in the kubelet only, {len(groups['controller'])} in the controller only; "
              f"listed in {listing}")
        return
    old = read_list(listing)
    was = {n: g for g in GROUPS for n in old[g]}
    # A listed function keeps its place unless this run says another group ran it; then it
    # and the functions new to the list go to the end of their group.
    groups = {g: [n for n in old[g] if ran.get(n, g) == g] for g in GROUPS}
    added = moved = 0
    for name, g in ran.items():
        if was.get(name, g) != g or name not in was:
            groups[g].append(name)
            added, moved = added + (name not in was), moved + (name in was)
    write_list(listing, groups)
    print(f"hot-symbols: {added} functions on pages the processes ran joined {listing}, "
          f"{moved} listed ones moved to another group; now "
          + ", ".join(f"{len(groups[g])} {g}" for g in GROUPS))


if __name__ == "__main__":
    main()
