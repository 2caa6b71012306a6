package observe

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"kcsi.dev/kcsi/internal/mountinfo"
)

// FileLines lists what the CSI plugin owns under the kubelet root: pods' volume dirs and the
// plugin's global dirs, with type, mode and vol_data.json contents. A file in one of kcsi's
// allowedEmptyDirs, but for its blanks, lives only while a save runs (a requiresRepublish SetUp rewrites
// vol_data.json on every pod sync), so a walk that met one is taken again; one still there
// after tempFileGrace was left behind and shows.
func (z *Normalizer) FileLines(root string) ([]string, error) {
	deadline := time.Now().Add(tempFileGrace)
	for {
		lines, inFlight, err := z.fileLinesOnce(root)
		if err != nil || !inFlight || time.Now().After(deadline) {
			return lines, err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// tempFileGrace is far above a save's write, fsync and rename (under a millisecond here).
const tempFileGrace = 2 * time.Second

// onlyBlanks: the dir holds nothing but kcsi's blanks (temp files made ahead of need,
// ".vol_data.json.<pid>.<random>.blank"), if anything.
func onlyBlanks(entries []os.DirEntry) bool {
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".vol_data.json.") || !strings.HasSuffix(e.Name(), ".blank") {
			return false
		}
	}
	return true
}

// holdsOnlyAllowedDirs: the dir is above one of allowedEmptyDirs and holds nothing but the
// way down to it, which holds nothing but blanks (kcsi made it for its temp dir; upstream's
// plugin has no such dir).
func holdsOnlyAllowedDirs(path, rel string) bool {
	entries, err := os.ReadDir(path)
	if err != nil {
		return false
	}
	for _, e := range entries {
		childRel := filepath.Join(rel, e.Name())
		child := filepath.Join(path, e.Name())
		if !e.IsDir() {
			return false
		}
		if _, ok := allowedEmptyDirs[childRel]; ok {
			if inner, err := os.ReadDir(child); err != nil || !onlyBlanks(inner) {
				return false
			}
			continue
		}
		if !isAboveAllowedDir(childRel) || !holdsOnlyAllowedDirs(child, childRel) {
			return false
		}
	}
	return isAboveAllowedDir(rel)
}

func isAboveAllowedDir(rel string) bool {
	for dir := range allowedEmptyDirs {
		if strings.HasPrefix(dir, rel+string(filepath.Separator)) {
			return true
		}
	}
	return false
}

// fileLinesOnce is one walk of fileLines, and whether it met a file in an allowedEmptyDir.
func (z *Normalizer) fileLinesOnce(root string) ([]string, bool, error) {
	points, err := mountinfo.Under(root)
	if err != nil {
		return nil, false, err
	}
	mounted := map[string]bool{}
	for _, p := range points {
		mounted[p] = true
	}
	var lines []string
	inFlight := false
	filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(root, path)
		if _, ok := allowedEmptyDirs[rel]; ok && d.IsDir() {
			if entries, err := os.ReadDir(path); err == nil && onlyBlanks(entries) {
				return filepath.SkipDir
			}
			inFlight = true
		}
		if d.IsDir() && rel != "." && holdsOnlyAllowedDirs(path, rel) {
			return filepath.SkipDir
		}
		parts := strings.Split(rel, string(filepath.Separator))
		keep := false
		switch {
		case parts[0] == "pods" && len(parts) <= 2:
			keep = len(parts) == 2 // the pod dir itself
		case parts[0] == "pods":
			keep = strings.HasPrefix(parts[2], "volume") || parts[2] == "plugins"
		case parts[0] == "plugins" && len(parts) >= 2:
			keep = parts[1] == "kubernetes.io"
		}
		if !keep {
			if d.IsDir() && rel != "." && rel != "pods" && rel != "plugins" && !(parts[0] == "pods" && len(parts) <= 2) {
				return filepath.SkipDir
			}
			return nil
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(path, &st); err != nil {
			return nil
		}
		line := fmt.Sprintf("%s %s %o", z.Apply(rel), fileType(st.Mode), st.Mode&0o7777)
		if mounted[path] {
			line += " mountpoint"
			lines = append(lines, line)
			return filepath.SkipDir // the driver's data
		}
		if d.Name() == "vol_data.json" {
			b, _ := os.ReadFile(path)
			var m map[string]string
			json.Unmarshal(b, &m)
			nb, _ := json.Marshal(m)
			line += " " + z.Apply(string(nb))
		}
		lines = append(lines, line)
		return nil
	})
	// The walk's order is the raw names' (random pod UIDs); compare in the normalized order.
	sort.Strings(lines)
	return lines, inFlight, nil
}

func fileType(mode uint32) string {
	switch mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		return "dir"
	case syscall.S_IFLNK:
		return "symlink"
	case syscall.S_IFBLK:
		return "blockdev"
	case syscall.S_IFREG:
		return "file"
	}
	return "other"
}
