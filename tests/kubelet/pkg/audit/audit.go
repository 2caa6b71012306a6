// Package audit reads the API server's audit log (scripts/peers/apiserver.sh with
// KCSI_APISERVER_AUDIT=1: every request's metadata, no bodies).
package audit

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"time"
)

// Event is the part of an audit.k8s.io/v1 Event the suite and the benchmarks read.
type Event struct {
	AuditID    string `json:"auditID"`
	RequestURI string `json:"requestURI"`
	Verb       string `json:"verb"`
	UserAgent  string `json:"userAgent"`
	User       struct {
		Username string   `json:"username"`
		Groups   []string `json:"groups"`
	} `json:"user"`
	ObjectRef *struct {
		Resource    string `json:"resource"`
		Subresource string `json:"subresource"`
		Namespace   string `json:"namespace"`
		Name        string `json:"name"`
	} `json:"objectRef"`
	ResponseStatus *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"responseStatus"`
	RequestReceivedTimestamp time.Time `json:"requestReceivedTimestamp"`
}

// Read reads the log's requests, each once: a request has an event per stage (a watch one
// when it starts and one when it ends), the first one logged stands for it. A line that is
// not an event is an error.
func Read(path string) ([]Event, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var events []Event
	seen := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if !seen[e.AuditID] {
			seen[e.AuditID] = true
			events = append(events, e)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return events, nil
}
