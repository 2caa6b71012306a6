package volumeplugintest

import (
	"os/exec"
	"sort"
	"strings"
	"syscall"
	"testing"

	"kcsi.dev/kcsi/internal/mountinfo"
)

// UnmountUnder lazily unmounts every mount below dir, deepest first, so nothing is left
// behind even when a test failed half way.
func UnmountUnder(tb testing.TB, dir string) {
	points, err := mountinfo.Under(dir)
	if err != nil {
		tb.Fatalf("reading the mount table: %v", err)
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	for _, p := range points {
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil {
			tb.Logf("unmount %s: %v", p, err)
		}
	}
}

// IsMountPoint reads the mount table with the tests' own reader (kcsi.dev/kcsi/internal/mountinfo),
// never kcsi's.
func IsMountPoint(tb testing.TB, path string) bool {
	tb.Helper()
	ok, err := mountinfo.IsMountPoint(path)
	if err != nil {
		tb.Fatalf("reading the mount table: %v", err)
	}
	return ok
}

// DetachLoopsUnder detaches loop devices backed by files below dir (the driver's block
// volumes), in case a test stopped before the driver did.
func DetachLoopsUnder(tb testing.TB, dir string) {
	out, err := exec.Command("losetup", "--list", "--noheadings", "--output", "NAME,BACK-FILE").Output()
	if err != nil {
		return
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && strings.HasPrefix(f[1], dir+"/") {
			if err := exec.Command("losetup", "-d", f[0]).Run(); err != nil {
				tb.Logf("losetup -d %s: %v", f[0], err)
			}
		}
	}
}
