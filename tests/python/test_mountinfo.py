"""The harness's own mount-table reader (mountinfo.py), checked against a mount this test makes
with mount(8): a mount point whose name has a space, a tab and a backslash (written as octal
escapes in /proc/self/mountinfo) is found under its real name, and is gone once unmounted."""
import os
import shutil
import subprocess

from conftest import short_tempdir, unmount_below
from mountinfo import mounted, mounts_below


def test_mount_table_reader_finds_a_mount_point_under_its_real_name(needs_root):
    base = short_tempdir("kcsi-pm")
    point = os.path.join(base, "a b\tc\\d")
    os.makedirs(point)
    try:
        subprocess.run(["mount", "-t", "tmpfs", "kcsi-test", point], check=True)
        assert mounted(point)
        assert mounts_below(base) == [point]
        subprocess.run(["umount", point], check=True)
        assert not mounted(point) and mounts_below(base) == []
    finally:
        unmount_below(base)
        shutil.rmtree(base)
