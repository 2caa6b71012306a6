package kcsi

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"kcsi.dev/kcsi/internal/mountinfo"
)

// The tests' oracle for what is mounted: the kernel's mount table read by internal/mountinfo,
// never by kcsi (a regression there must not make these checks agree with it).

// mountsUnder lists the mount points at or below dir, deepest first.
func mountsUnder(t testing.TB, dir string) []string {
	t.Helper()
	under, err := mountinfo.Under(dir)
	if err != nil {
		t.Fatalf("reading the mount table: %v", err)
	}
	sort.Slice(under, func(i, j int) bool { return len(under[i]) > len(under[j]) })
	return under
}

// isMountPoint tells whether path itself is a mount point.
func isMountPoint(t testing.TB, path string) bool {
	t.Helper()
	ok, err := mountinfo.IsMountPoint(path)
	if err != nil {
		t.Fatalf("reading the mount table: %v", err)
	}
	return ok
}

// nothingLeftMountedUnder fails t when a mount point is left at or below dir, then detaches
// every one of them so the test leaves none behind either way.
func nothingLeftMountedUnder(t testing.TB, dir string) {
	t.Helper()
	left := mountsUnder(t, dir)
	if len(left) == 0 {
		return
	}
	t.Errorf("left mounted under %s: %s", dir, strings.Join(left, ", "))
	for _, p := range left {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", p, err)
		}
	}
}

func TestMountTableReaderFindsAMountWhosePathNeedsEscaping(t *testing.T) {
	needsRoot(t)
	dir := filepath.Join(shortTempDir(t, "kcsigo-mnt"), "a b\\c\td")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if isMountPoint(t, dir) {
		t.Fatalf("%q is a mount point before anything was mounted there", dir)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=1m"); err != nil {
		t.Fatalf("mounting a tmpfs at %q: %v", dir, err)
	}
	t.Cleanup(func() { syscall.Unmount(dir, syscall.MNT_DETACH) })
	if !isMountPoint(t, dir) {
		t.Fatalf("the tmpfs at %q is not in the mount table as read here", dir)
	}
	if err := syscall.Unmount(dir, 0); err != nil {
		t.Fatal(err)
	}
	if left := mountsUnder(t, filepath.Dir(dir)); len(left) != 0 {
		t.Fatalf("after the unmount the table still lists %q", left)
	}
}
