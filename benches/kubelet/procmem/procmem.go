// Package procmem reads where a process's resident memory lies, from /proc/<pid>/smaps: its
// own binary's pages, libkcsi.so's, other files' (libc, ld.so), and anonymous memory (Go's and
// Rust's heaps, stacks, the binary's .bss); and how many threads it runs.
package procmem

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Usage is one reading, in bytes.
type Usage struct {
	Total, Binary, Lib, Files, Anon int64
	// LibDirty is the part of Lib written by this process (relocated pointers, statics): the
	// rest is clean code and read-only data, shared with every process that maps the library.
	LibDirty int64
	Threads  int
}

// Read reads pid's memory now.
func Read(pid int) (Usage, error) {
	var u Usage
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return u, err
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return u, err
	}
	defer f.Close()
	var bucket, dirty *int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		// A mapping's header: address range, perms, offset, device, inode[, path].
		if strings.Contains(fields[0], "-") && len(fields) >= 5 {
			path := ""
			if len(fields) >= 6 {
				path = fields[5]
			}
			dirty = nil
			switch {
			case path == exe:
				bucket = &u.Binary
			case strings.Contains(path, "libkcsi"):
				bucket, dirty = &u.Lib, &u.LibDirty
			case strings.HasPrefix(path, "/"):
				bucket = &u.Files
			default: // [heap], [stack], [vdso], unnamed
				bucket = &u.Anon
			}
			continue
		}
		kb, err := strconv.ParseInt(fields[1], 10, 64)
		if err != nil {
			continue
		}
		switch fields[0] {
		case "Rss:":
			u.Total += kb << 10
			*bucket += kb << 10
		case "Private_Dirty:":
			if dirty != nil {
				*dirty += kb << 10
			}
		}
	}
	if err := sc.Err(); err != nil {
		return u, err
	}
	u.Threads, err = threads(pid)
	return u, err
}

func threads(pid int) (int, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "Threads:"); ok {
			return strconv.Atoi(strings.TrimSpace(v))
		}
	}
	return 0, fmt.Errorf("/proc/%d/status names no Threads", pid)
}

// MiB is b in MiB.
func MiB(b int64) float64 { return float64(b) / (1 << 20) }
