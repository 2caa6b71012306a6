"""The mount table as the kernel reports it, read by the tests themselves so that kcsi's own
mount code is never their oracle: /proc/self/mountinfo (proc(5)), whose fifth field is the
mount point with space, tab, newline and backslash written as octal escapes (\\040 ...)."""
import os
import re

_OCTAL = re.compile(rb"\\([0-7]{3})")


def mount_points():
    """Every mount point in the table, in its order (a path mounted twice appears twice)."""
    with open("/proc/self/mountinfo", "rb") as f:
        lines = f.read().splitlines()
    points = []
    for line in lines:
        fields = line.split(b" ")
        if len(fields) < 10 or b"-" not in fields[6:]:
            raise ValueError(f"/proc/self/mountinfo: not a mount line: {line!r}")
        points.append(os.fsdecode(_OCTAL.sub(lambda m: bytes([int(m.group(1), 8)]), fields[4])))
    return points


def mounted(path):
    """Whether something is mounted exactly at `path`."""
    return path in mount_points()


def mounts_below(path):
    """The mount points at or below `path`."""
    base = path.rstrip("/")
    return [p for p in mount_points() if p == base or p.startswith(base + "/")]
