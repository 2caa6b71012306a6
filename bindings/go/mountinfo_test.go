package kcsi

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// The tests' oracle for what is mounted: the kernel's mount table read by this package's own
// parser, never kcsi's (a regression there must not make these checks agree with it).

// mountPoints is the mount point of every line of /proc/self/mountinfo (its fifth field), with
// the kernel's octal escapes of space, tab, newline and backslash decoded.
func mountPoints(t testing.TB) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatalf("reading the mount table: %v", err)
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Split(line, " "); len(f) > 4 {
			points = append(points, unescapeMountinfo(f[4]))
		}
	}
	return points
}

// unescapeMountinfo decodes mountinfo's \ooo escapes.
func unescapeMountinfo(s string) string {
	var out strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				out.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		out.WriteByte(s[i])
	}
	return out.String()
}

// mountsUnder lists the mount points at or below dir, deepest first.
func mountsUnder(t testing.TB, dir string) []string {
	t.Helper()
	var under []string
	for _, p := range mountPoints(t) {
		if p == dir || strings.HasPrefix(p, dir+"/") {
			under = append(under, p)
		}
	}
	sort.Slice(under, func(i, j int) bool { return len(under[i]) > len(under[j]) })
	return under
}

// isMountPoint tells whether path itself is a mount point.
func isMountPoint(t testing.TB, path string) bool {
	t.Helper()
	for _, p := range mountPoints(t) {
		if p == path {
			return true
		}
	}
	return false
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
