package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kcsi.dev/kcsi/tests/kubelet/mountinfo"
)

// call is one CSI request the driver logged (hostpath -v=5 logs "gRPCCall: {json}") once it
// answered it; Error is the error it answered with ("" for none).
type call struct {
	Method  string
	Request map[string]any
	Error   string
}

// stateful methods are compared request by request; the others (capabilities, probes,
// stats) only by count (see countKeys and the allowlist).
var stateful = map[string]bool{
	"NodeStageVolume": true, "NodeUnstageVolume": true, "NodePublishVolume": true,
	"NodeUnpublishVolume": true, "NodeGetInfo": true, "NodeExpandVolume": true,
	"ControllerPublishVolume": true, "ControllerUnpublishVolume": true,
	"ControllerExpandVolume": true, // the external-resizer's, before the kubelet's NodeExpandVolume
}

// logMark is a position in the node's drivers' logs (the main driver's and, while it runs,
// the attach driver's) and when it was taken.
type logMark struct {
	main, attach int64
	at           time.Time
}

func (n *node) mark() logMark {
	m := logMark{main: logSize(n.driverLog), at: time.Now()}
	if n.attach != nil {
		m.attach = logSize(n.attach.log)
	}
	return m
}

func logSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// callsSince reads the requests the main driver logged after m.
func (n *node) callsSince(m logMark) ([]call, error) { return readCalls(n.driverLog, m.main) }

// allCallsSince reads the requests both of the node's drivers logged after m.
func (n *node) allCallsSince(m logMark) ([]call, error) {
	calls, err := n.callsSince(m)
	if err != nil || n.attach == nil {
		return calls, err
	}
	attach, err := readCalls(n.attach.log, m.attach)
	return append(calls, attach...), err
}

// callPrefix starts the line hostpath (-v=5) logs for each request it answered.
const callPrefix = "gRPCCall: "

// readCalls reads the requests a driver logged at offsets after from. A log it cannot read
// and a request line it cannot parse are errors: a comparison of two empty lists proves
// nothing.
func readCalls(log string, from int64) ([]call, error) {
	f, err := os.Open(log)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return nil, fmt.Errorf("%s: %w", log, err)
	}
	var calls []call
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		i := strings.Index(line, callPrefix)
		if i < 0 {
			continue
		}
		var c call
		if err := json.Unmarshal([]byte(line[i+len(callPrefix):]), &c); err != nil || c.Method == "" {
			return nil, fmt.Errorf("%s: a request line that is not a logged call (%v): %q", log, err, line)
		}
		c.Method = c.Method[strings.LastIndex(c.Method, "/")+1:]
		calls = append(calls, c)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", log, err)
	}
	return calls, nil
}

// logSince is the driver's log after m, for lines other than requests (e.g. a fault hook's).
func (n *node) logSince(m logMark) (string, error) {
	f, err := os.Open(n.driverLog)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if _, err := f.Seek(m.main, io.SeekStart); err != nil {
		return "", fmt.Errorf("%s: %w", n.driverLog, err)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return "", fmt.Errorf("%s: %w", n.driverLog, err)
	}
	return string(b), nil
}

// normalizer rewrites what legitimately differs between the two runs (node, namespace and
// directory names, pod UIDs, volume handles and the hashes made from them) to placeholders.
type normalizer struct {
	pairs []string
}

func (n *node) normalizer(uids map[string]string, handles map[string]string) *normalizer {
	z := &normalizer{}
	add := z.add
	add(n.root, "<root>")
	add(n.state, "<state>")
	for name, h := range handles {
		sum := sha256.Sum256([]byte(h))
		add(fmt.Sprintf("%x", sum), "<sha256("+name+")>")
		for _, d := range []string{driverName, attachDriverName} {
			att := sha256.Sum256([]byte(h + d + n.name))
			add(fmt.Sprintf("csi-%x", att), "<attachment("+name+")>")
		}
		add(h, "<handle("+name+")>")
		add("pv-"+name+"-"+n.plugin, "pv-"+name+"-<plugin>")
	}
	for name, uid := range uids {
		add(uid, "<uid("+name+")>")
	}
	add(n.ns, "<ns>")
	add(n.name, "<node>")
	return z
}

// add rewrites from to the placeholder to.
func (z *normalizer) add(from, to string) { z.pairs = append(z.pairs, from, to) }

var (
	ephemeralHandle = regexp.MustCompile(`csi-[0-9a-f]{64}`)
	// A JWT (a service-account token a driver got through tokenRequests) and an RFC 3339
	// time (its expiry) differ from run to run.
	serviceAccountToken = regexp.MustCompile(`eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*\.[A-Za-z0-9_-]*`)
	timestamp           = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ`)
)

func (z *normalizer) apply(s string) string {
	s = strings.NewReplacer(z.pairs...).Replace(s)
	s = serviceAccountToken.ReplaceAllString(s, "<token>")
	s = timestamp.ReplaceAllString(s, "<time>")
	return ephemeralHandle.ReplaceAllString(s, "<ephemeral-handle>")
}

// callLines: stateful requests in order, in full; the others counted by method.
func (z *normalizer) callLines(calls []call) (compared []string, counts map[string]int) {
	counts = map[string]int{}
	failed := map[string]bool{}   // a request line -> whether the last call with it failed
	resynced := map[string]bool{} // a request line -> whether a resync of it was folded
	for _, c := range calls {
		if !stateful[c.Method] {
			counts[c.Method]++
			continue
		}
		b, _ := json.Marshal(c.Request) // sorted keys
		line := c.Method + " " + z.apply(string(b))
		// A republish (requiresRepublish, for fresh tokenRequests tokens) repeats the last
		// request exactly, and so does the external-attacher's retry of a failed attach; how
		// many repeats a snapshot holds depends on when the timers fired, so those repeats
		// are counted apart (in buckets, countKeys) and the request compared once. The
		// external-attacher also syncs a VolumeAttachment again on its own update, before its
		// cache holds the "attached" it wrote, and attaches it again at once, or not: that
		// one repeat of a success per request is counted apart too. Any other repeated
		// request is compared in full.
		var repeat string
		switch {
		case c.Method == "NodePublishVolume" && strings.Contains(line, "serviceAccount.tokens") &&
			len(compared) > 0 && compared[len(compared)-1] == line:
			repeat = "republish"
		case c.Method == "ControllerPublishVolume" && failed[line]:
			repeat = "retry"
		case c.Method == "ControllerPublishVolume" && c.Error == "" && !failed[line] && !resynced[line] &&
			slices.Contains(compared, line):
			repeat, resynced[line] = "resync", true
		}
		failed[line] = c.Error != ""
		if repeat != "" {
			counts[c.Method+" "+repeat]++
			continue
		}
		compared = append(compared, line)
	}
	return compared, counts
}

// fileLines lists what the CSI plugin owns under the kubelet root: pods' volume dirs and the
// plugin's global dirs, with type, mode and vol_data.json contents. A file in one of kcsi's
// allowedEmptyDirs, but for its blanks, lives only while a save runs (a requiresRepublish SetUp rewrites
// vol_data.json on every pod sync), so a walk that met one is taken again; one still there
// after tempFileGrace was left behind and shows.
func (z *normalizer) fileLines(root string) ([]string, error) {
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

// fileLinesOnce is one walk of fileLines, and whether it met a file in an allowedEmptyDir.
func (z *normalizer) fileLinesOnce(root string) ([]string, bool, error) {
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
		line := fmt.Sprintf("%s %s %o", z.apply(rel), fileType(st.Mode), st.Mode&0o7777)
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
			line += " " + z.apply(string(nb))
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

// nodeLines: what the plugin publishes about the node: CSINode drivers, the node-ID
// annotation, topology labels.
func (n *node) nodeLines(ctx context.Context, z *normalizer) []string {
	var lines []string
	cn, err := n.s.client.StorageV1().CSINodes().Get(ctx, n.name, metav1.GetOptions{})
	if err != nil {
		return []string{"CSINode: " + err.Error()}
	}
	// A list keyed by name (listType=map): its order follows which driver registered or
	// re-registered last (e.g. after a kubelet restart), not the plugin.
	drivers := slices.Clone(cn.Spec.Drivers)
	sort.Slice(drivers, func(i, j int) bool { return drivers[i].Name < drivers[j].Name })
	b, _ := json.Marshal(drivers)
	lines = append(lines, "CSINode.spec.drivers "+z.apply(string(b)))
	lines = append(lines, "CSINode migrated-plugins "+cn.Annotations["storage.alpha.kubernetes.io/migrated-plugins"])
	nd, err := n.s.client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{})
	if err != nil {
		return append(lines, "Node: "+err.Error())
	}
	lines = append(lines, "Node nodeid annotation "+z.apply(nd.Annotations["csi.volume.kubernetes.io/nodeid"]))
	var labels []string
	for k, v := range nd.Labels {
		if strings.Contains(k, "hostpath") {
			labels = append(labels, k+"="+z.apply(v))
		}
	}
	sort.Strings(labels)
	return append(lines, "Node driver labels "+strings.Join(labels, ","))
}
