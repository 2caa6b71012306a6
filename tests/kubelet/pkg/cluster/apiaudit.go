package cluster

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"kcsi.dev/kcsi/tests/kubelet/pkg/audit"
	"kcsi.dev/kcsi/tests/kubelet/pkg/observe"
)

// Window is the time a scenario ran on a node.
type Window struct{ From, To time.Time }

// AuditRequests records, for each window, the API requests the node's kubelet and the
// attach/detach controller made in it (the API server's audit log: received from From to
// To), by user, verb and resource: kcsi's requests go out with its host's identity, so with
// kcsi they are the plugin's and the host's own together, as with upstream's. A watch of a
// resource its user already watched since since (the node's start) is left out: a watch
// restarts when its timeout (5 to 10 min, at random) ends, which is no scenario's doing.
// It also checks that the API server answered none of their requests, nor the
// external-attacher's or the external-resizer's, Forbidden. Nothing is recorded without an
// audit log.
func (n *Node) AuditRequests(obs []*observe.Observation, since time.Time, windows []Window) {
	if n.Suite.AuditLog == "" {
		return
	}
	events, err := audit.Read(n.Suite.AuditLog)
	if err != nil {
		for _, o := range obs {
			o.Fail("the API server's audit log", err)
		}
		return
	}
	node, controller := NodeUser(n.Name), User(ControllerSA[0], ControllerSA[1])
	compared := map[string]bool{node: true, controller: true}
	checked := map[string]bool{node: true, controller: true,
		User(AttacherIdentity.NS, AttacherIdentity.SA): true, User(ResizerIdentity.NS, ResizerIdentity.SA): true}
	race := graphRace(events, node)
	for i, w := range windows {
		o := obs[i]
		var raced []string
		watched := map[string]bool{} // user + resource
		set := map[string]bool{}
		var forbidden []string
		for _, e := range events {
			at := e.RequestReceivedTimestamp
			if at.Before(since) || !at.Before(w.To) || !checked[e.User.Username] {
				continue
			}
			resource := resourceOf(e)
			key := e.User.Username + " " + resource
			if at.Before(w.From) {
				if e.Verb == "watch" {
					watched[key] = true
				}
				continue
			}
			if e.ResponseStatus != nil && e.ResponseStatus.Code == http.StatusForbidden {
				line := fmt.Sprintf("%s %s %s (%s): %s", e.User.Username, e.Verb, e.RequestURI, e.UserAgent, e.ResponseStatus.Message)
				if race(e) {
					raced = append(raced, line)
				} else {
					forbidden = append(forbidden, line)
				}
			}
			if !compared[e.User.Username] || e.Verb == "watch" && watched[key] {
				continue
			}
			set[strings.ReplaceAll(e.User.Username, n.Name, "<node>")+" "+e.Verb+" "+resource] = true
		}
		o.Check("no API request of the kubelet, the attach/detach controller or a sidecar is answered Forbidden",
			len(forbidden) == 0, strings.Join(forbidden, "; "))
		if len(raced) > 0 {
			o.Add("info: the kubelet's pod GETs the Node authorizer refused while its graph lagged (not counted as Forbidden)", raced...)
		}
		lines := make([]string, 0, len(set))
		for l := range set {
			lines = append(lines, l)
		}
		slices.Sort(lines)
		o.Add(o.RequestsKey(), lines...)
	}
}

// graphLag bounds how long after a pod's creation the Node authorizer may not know yet that
// the pod is bound to the node.
const graphLag = 2 * time.Second

// graphRace says whether a Forbidden answer is the Node authorizer's lag, which no client
// can avoid and which a real cluster shows as well: the authorizer learns which pods are
// bound to a node from its own watch of the pods, so the node's kubelet asking for its pod
// (the status manager's GET before each status patch) right after the pod was created, or
// after it was deleted, is refused ("no relationship found between node ... and this
// object") and the status manager tries again at its next sync. Only a GET of a pod (not a
// subresource) by the node's own user, within graphLag of that pod's creation or after a
// delete of it, counts as that.
func graphRace(events []audit.Event, node string) func(audit.Event) bool {
	created, deleted := map[string][]time.Time{}, map[string][]time.Time{}
	for _, e := range events {
		if e.ObjectRef == nil || e.ObjectRef.Resource != "pods" || e.ObjectRef.Subresource != "" {
			continue
		}
		key := e.ObjectRef.Namespace + "/" + e.ObjectRef.Name
		switch e.Verb {
		case "create":
			created[key] = append(created[key], e.RequestReceivedTimestamp)
		case "delete":
			deleted[key] = append(deleted[key], e.RequestReceivedTimestamp)
		}
	}
	return func(e audit.Event) bool {
		if e.User.Username != node || e.Verb != "get" || e.ObjectRef == nil || e.ObjectRef.Resource != "pods" ||
			e.ObjectRef.Subresource != "" || !strings.Contains(e.ResponseStatus.Message, "no relationship found") {
			return false
		}
		at, key := e.RequestReceivedTimestamp, e.ObjectRef.Namespace+"/"+e.ObjectRef.Name
		return slices.ContainsFunc(created[key], func(t time.Time) bool { return !at.Before(t) && at.Sub(t) < graphLag }) ||
			slices.ContainsFunc(deleted[key], func(t time.Time) bool { return !at.Before(t) })
	}
}

// resourceOf is the event's resource[/subresource], or its non-resource URL.
func resourceOf(e audit.Event) string {
	if e.ObjectRef == nil {
		path, _, _ := strings.Cut(e.RequestURI, "?")
		return path
	}
	if e.ObjectRef.Subresource != "" {
		return e.ObjectRef.Resource + "/" + e.ObjectRef.Subresource
	}
	return e.ObjectRef.Resource
}
