package cluster

import (
	"fmt"
	"io"
	"os"
	"time"

	"kcsi.dev/kcsi/tests/kubelet/pkg/observe"
)

// Mark is the drivers' logs' current ends: what they log after it is new.
func (n *Node) Mark() observe.Mark {
	m := observe.Mark{Main: observe.LogSize(n.DriverLog), At: time.Now()}
	if n.Attach != nil {
		m.Attach = observe.LogSize(n.Attach.Log)
	}
	return m
}

// CallsSince reads the requests the main driver logged after m.
func (n *Node) CallsSince(m observe.Mark) ([]observe.Call, error) {
	return observe.ReadCalls(n.DriverLog, m.Main)
}

// AllCallsSince reads the requests both of the node's drivers logged after m.
func (n *Node) AllCallsSince(m observe.Mark) ([]observe.Call, error) {
	calls, err := n.CallsSince(m)
	if err != nil || n.Attach == nil {
		return calls, err
	}
	attach, err := observe.ReadCalls(n.Attach.Log, m.Attach)
	return append(calls, attach...), err
}

// LogSince is the driver's log after m, for lines other than requests (e.g. a fault hook's).
func (n *Node) LogSince(m observe.Mark) (string, error) {
	f, err := os.Open(n.DriverLog)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if _, err := f.Seek(m.Main, io.SeekStart); err != nil {
		return "", fmt.Errorf("%s: %w", n.DriverLog, err)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return "", fmt.Errorf("%s: %w", n.DriverLog, err)
	}
	return string(b), nil
}
