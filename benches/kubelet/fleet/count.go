package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"kcsi.dev/kcsi/tests/kubelet/pkg/audit"
	"kcsi.dev/kcsi/tests/kubelet/pkg/cluster"
)

type window struct{ from, to time.Time }

// request is what the fleet counts an API request by.
type request struct {
	client, verb, resource string
	failed                 bool // answered with an error status (a retry's cause, or a throttle)
}

type tally map[request]int

// client names the node component that sent a request, "" for the API server's own loopback
// requests and the harness's (apiserver.sh's curl, the suite's observer).
func client(userAgent string) string {
	switch {
	case strings.HasPrefix(userAgent, "kcsi-e2e-kubelet"):
		return "kubelet" // upstream's plugin uses the kubelet's client
	case strings.HasPrefix(userAgent, cluster.ObserverAgent), strings.HasPrefix(userAgent, "kube-apiserver/"),
		strings.HasPrefix(userAgent, "curl/"):
		return ""
	}
	agent, _, _ := strings.Cut(userAgent, "/") // kcsi's own client says "kcsi/<version>"
	return agent
}

// readAudit counts the nodes' requests received in each window.
func readAudit(path string, windows []window) ([]tally, error) {
	events, err := audit.Read(path)
	if err != nil {
		return nil, err
	}
	counts := make([]tally, len(windows))
	for i := range counts {
		counts[i] = tally{}
	}
	for _, e := range events {
		c := client(e.UserAgent)
		if c == "" {
			continue
		}
		r := request{client: c, verb: e.Verb}
		if e.ObjectRef != nil {
			r.resource = e.ObjectRef.Resource
			if e.ObjectRef.Subresource != "" {
				r.resource += "/" + e.ObjectRef.Subresource
			}
		} else {
			r.resource, _, _ = strings.Cut(e.RequestURI, "?")
		}
		r.failed = e.ResponseStatus != nil && e.ResponseStatus.Code >= 400
		for i, w := range windows {
			if t := e.RequestReceivedTimestamp; !t.Before(w.from) && t.Before(w.to) {
				counts[i][r]++
			}
		}
	}
	return counts, nil
}

func (t tally) sum(keep func(request) bool) int {
	n := 0
	for r, c := range t {
		if keep(r) {
			n += c
		}
	}
	return n
}

func all(request) bool { return true }

func isWrite(r request) bool {
	switch r.verb {
	case "create", "update", "patch", "delete", "deletecollection":
		return !r.failed
	}
	return false
}

func writesOf(resource string) func(request) bool {
	return func(r request) bool { return isWrite(r) && strings.Split(r.resource, "/")[0] == resource }
}

func byClient(c string) func(request) bool { return func(r request) bool { return r.client == c } }

func byVerb(v string) func(request) bool { return func(r request) bool { return r.verb == v } }

func failed(r request) bool { return r.failed }

// connections counts a process's established TCP connections to port on 127.0.0.1: its
// sockets' inodes matched against /proc/net/tcp.
func connections(pid, port int) int {
	fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	inodes := map[string]bool{}
	for _, fd := range fds {
		if l, err := os.Readlink(fd); err == nil && strings.HasPrefix(l, "socket:[") {
			inodes[strings.TrimSuffix(strings.TrimPrefix(l, "socket:["), "]")] = true
		}
	}
	data, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		return 0
	}
	n := 0
	remote := fmt.Sprintf(":%04X", port)
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		// sl local remote state ... inode (the tenth field); 01 is ESTABLISHED.
		if len(f) > 9 && strings.HasSuffix(f[2], remote) && f[3] == "01" && inodes[f[9]] {
			n++
		}
	}
	return n
}

// apiPort reads the API server's port from apiserver.sh's env file.
func apiPort(dir string) (int, error) {
	data, err := os.ReadFile(filepath.Join(dir, "env"))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "PORT="); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("%s/env names no PORT", dir)
}
