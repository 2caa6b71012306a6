package observe

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// Call is one CSI request the driver logged (hostpath -v=5 logs "gRPCCall: {json}") once it
// answered it; Error is the error it answered with ("" for none).
type Call struct {
	Method  string
	Request map[string]any
	Error   string
	// At is when the driver logged it (its klog header, to the microsecond); zero if the line
	// has none.
	At time.Time `json:"-"`
}

// stateful methods are compared request by request; the others (capabilities, probes,
// stats) only by count (see countKeys and the allowlist).
var stateful = map[string]bool{
	"NodeStageVolume": true, "NodeUnstageVolume": true, "NodePublishVolume": true,
	"NodeUnpublishVolume": true, "NodeGetInfo": true, "NodeExpandVolume": true,
	"ControllerPublishVolume": true, "ControllerUnpublishVolume": true,
	"ControllerExpandVolume": true, // the external-resizer's, before the kubelet's NodeExpandVolume
}

// Mark is a position in the node's drivers' logs (the main driver's and, while it runs,
// the attach driver's) and when it was taken.
type Mark struct {
	Main, Attach int64
	At           time.Time
}

// LogSize is the log's size, 0 if it is not there yet.
func LogSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// callPrefix starts the line hostpath (-v=5) logs for each request it answered.
const callPrefix = "gRPCCall: "

// ReadCalls reads the requests a driver logged at offsets after from. A log it cannot read
// and a request line it cannot parse are errors: a comparison of two empty lists proves
// nothing.
func ReadCalls(log string, from int64) ([]Call, error) {
	f, err := os.Open(log)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if _, err := f.Seek(from, io.SeekStart); err != nil {
		return nil, fmt.Errorf("%s: %w", log, err)
	}
	var calls []Call
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		i := strings.Index(line, callPrefix)
		if i < 0 {
			continue
		}
		var c Call
		if err := json.Unmarshal([]byte(line[i+len(callPrefix):]), &c); err != nil || c.Method == "" {
			return nil, fmt.Errorf("%s: a request line that is not a logged call (%v): %q", log, err, line)
		}
		c.Method = c.Method[strings.LastIndex(c.Method, "/")+1:]
		c.At = loggedAt(line)
		calls = append(calls, c)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", log, err)
	}
	return calls, nil
}

// loggedAt is when klog wrote line ("Lmmdd hh:mm:ss.uuuuuu ..."), in this machine's zone (the
// driver's) and the year that puts it at most a day ahead of now; zero without a header.
func loggedAt(line string) time.Time {
	if len(line) < 21 {
		return time.Time{}
	}
	t, err := time.ParseInLocation("0102 15:04:05.000000", line[1:21], time.Local)
	if err != nil {
		return time.Time{}
	}
	now := time.Now()
	t = time.Date(now.Year(), t.Month(), t.Day(), t.Hour(), t.Minute(), t.Second(), t.Nanosecond(), time.Local)
	if t.After(now.Add(24 * time.Hour)) {
		t = t.AddDate(-1, 0, 0)
	}
	return t
}
