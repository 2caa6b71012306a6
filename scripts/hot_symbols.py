"""link/hot-symbols.txt from the page cache (scripts/hot-symbols.sh).

  hot_symbols.py snapshot COPY OUT
      writes the page numbers of COPY in the page cache to OUT (one per line).
  hot_symbols.py evict COPY PID
      drops COPY's pages from the page cache, first from process PID's read-only mappings of it
      (process_madvise MADV_PAGEOUT): what PID runs next comes back a page at a time.
  hot_symbols.py collect DIR LIST
      the functions on the cached pages of two copies of a build with every function on a page
      of its own (DIR/kubelet/libkcsi.so.1, DIR/controller/libkcsi.so.1): each ran in that
      process. Writes LIST afresh.
  hot_symbols.py refine DIR LIST SNAPSHOTS
      the same read of two copies of the release build, ordered by LIST, plus the snapshots
      SNAPSHOTS/<role>.{before,steady} taken while the pod ran (before: what ran until then;
      steady: what ran after the pages unmapped by kcsi's release were evicted): every function
      on a cached page joins LIST (a page holds a few, so a function the collection missed
      costs the hot block at most a page, not a 64 KiB window of fault-around), and a listed one
      moves to the group of the processes that ran it, steadily or not.

LIST holds six groups, each under a comment line LLD skips, so that what each process runs is
contiguous, and what it runs while a pod just runs (after kcsi gave back the pages its calls
left mapped) more so: the kubelet's own, the kubelet's own steady, both processes' steady, the
controller's own steady, both processes', the controller's own.
"""
import ctypes
import mmap
import os
import subprocess
import sys

GROUPS = ("kubelet", "kubelet steady", "both steady", "controller steady", "both", "controller")
ROLES = ("kubelet", "controller")

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


class iovec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


SYS_PROCESS_MADVISE, MADV_PAGEOUT = 440, 21  # x86_64


def evict(lib, pid):
    pidfd = os.pidfd_open(pid)
    real = os.path.realpath(lib)
    for line in open(f"/proc/{pid}/maps"):
        p = line.split()
        # The relocated pages (RELRO, written) are the process's own, not the file's.
        if len(p) < 6 or os.path.realpath(p[5]) != real or p[1] not in ("r-xp", "r--p") or (p[1] == "r--p" and int(p[2], 16)):
            continue
        start, end = (int(x, 16) for x in p[0].split("-"))
        iov = iovec(start, end - start)
        if libc.syscall(SYS_PROCESS_MADVISE, pidfd, ctypes.byref(iov), 1, MADV_PAGEOUT, 0) < 0:
            sys.exit(f"hot-symbols: process_madvise {pid} {lib}: {os.strerror(ctypes.get_errno())}")
    os.close(pidfd)
    fd = os.open(lib, os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)


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


def read_pages(path):
    return {int(line) for line in open(path)}


def group_of(roles, steady):
    """The group of a function the given processes ran (steadily or not)."""
    if not roles:
        return None
    name = "both" if len(roles) == 2 else roles[0]
    return f"{name} steady" if steady else name


def ran_by(lib, pages, steady):
    """name -> its group, for each function of lib on a cached page (pages and steady: role ->
    page numbers); and how many functions the build has."""
    ran, funcs = {}, functions(lib)
    for start, length, name in funcs:
        span = range(start // 4096, (start + length - 1) // 4096 + 1)
        on = lambda sets: [role for role in ROLES if any(pg in sets[role] for pg in span)]
        group = group_of(on(steady), True) or group_of(on(pages), False)
        if group:
            ran[name] = group
    return ran, len(funcs)


def read_list(path):
    groups = {g: [] for g in GROUPS}
    group = "both"
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
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "snapshot":
        with open(args[1], "w") as f:
            f.writelines(f"{pg}\n" for pg in sorted(cached(args[0])))
        return
    if mode == "evict":
        evict(args[0], int(args[1]))
        return
    copy = {role: os.path.join(args[0], role, "libkcsi.so.1") for role in ROLES}
    listing = args[1]
    pages = {role: cached(copy[role]) for role in ROLES}
    steady = {role: set() for role in ROLES}
    if mode == "refine":
        for role in ROLES:
            pages[role] |= read_pages(os.path.join(args[2], f"{role}.before"))
            steady[role] = read_pages(os.path.join(args[2], f"{role}.steady"))
    ran, total = ran_by(copy["kubelet"], pages, steady)  # in address order
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
