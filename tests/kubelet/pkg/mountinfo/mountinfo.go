// Package mountinfo is the kubelet suite's own reader of the kernel's mount table
// (/proc/self/mountinfo, proc(5)): the suite's oracle for what is mounted, so that no check of
// it goes through kcsi's code.
package mountinfo

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
)

// Mount is one line of the mount table.
type Mount struct {
	Point  string // the mount point, unescaped
	Root   string // the path within the filesystem mounted there
	FSType string
	Source string
}

// Read parses /proc/self/mountinfo.
func Read() ([]Mount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	mounts, err := Parse(f)
	if err != nil {
		return nil, fmt.Errorf("/proc/self/mountinfo: %w", err)
	}
	return mounts, nil
}

// Parse reads a mount table in mountinfo's format: "<id> <parent> <major:minor> <root>
// <mount point> <options> [<optional fields>...] - <fstype> <source> <super options>".
func Parse(r io.Reader) ([]Mount, error) {
	var mounts []Mount
	sc := bufio.NewScanner(r)
	line := 0
	for sc.Scan() {
		line++
		fields := strings.Fields(sc.Text())
		sep := -1
		for i := 6; i < len(fields); i++ {
			if fields[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || len(fields) < sep+3 {
			return nil, fmt.Errorf("line %d: %q has no \"- <fstype> <source>\" after six fields", line, sc.Text())
		}
		m := Mount{FSType: fields[sep+1]}
		var err error
		if m.Root, err = unescape(fields[3]); err == nil {
			if m.Point, err = unescape(fields[4]); err == nil {
				m.Source, err = unescape(fields[sep+2])
			}
		}
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		mounts = append(mounts, m)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(mounts) == 0 {
		return nil, fmt.Errorf("no mounts (not even the root filesystem)")
	}
	return mounts, nil
}

// unescape undoes the kernel's octal escapes (\040 for a space, \011, \012, \134) in a path.
func unescape(s string) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' {
			b.WriteByte(s[i])
			continue
		}
		if i+4 > len(s) {
			return "", fmt.Errorf("%q: a backslash not followed by three octal digits", s)
		}
		v, err := strconv.ParseUint(s[i+1:i+4], 8, 8)
		if err != nil {
			return "", fmt.Errorf("%q: a backslash not followed by three octal digits", s)
		}
		b.WriteByte(byte(v))
		i += 3
	}
	return b.String(), nil
}

// Under lists the mount points at dir or beneath it, in the table's order (a mount's
// children after it).
func Under(dir string) ([]string, error) {
	mounts, err := Read()
	if err != nil {
		return nil, err
	}
	var points []string
	for _, m := range mounts {
		if m.Point == dir || strings.HasPrefix(m.Point, dir+"/") {
			points = append(points, m.Point)
		}
	}
	return points, nil
}

// IsMountPoint says whether path is a mount point.
func IsMountPoint(path string) (bool, error) {
	points, err := Under(path)
	if err != nil {
		return false, err
	}
	for _, p := range points {
		if p == path {
			return true, nil
		}
	}
	return false, nil
}
