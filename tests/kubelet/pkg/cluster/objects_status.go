package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"kcsi.dev/kcsi/tests/kubelet/pkg/observe"
)

// objectLines: what the kubelet and the plugin leave on the API objects of the node's
// namespace: each pod's phase, each claim's and volume's status (phase, capacity,
// conditions), and the reasons and messages of the events about each object.
func (n *Node) objectLines(ctx context.Context, z *observe.Normalizer) []string {
	var lines []string
	pods, err := n.Suite.Client.CoreV1().Pods(n.NS).List(ctx, metav1.ListOptions{})
	if err != nil {
		return []string{"pods: " + err.Error()}
	}
	for _, p := range pods.Items {
		line := fmt.Sprintf("Pod %s phase %s", p.Name, p.Status.Phase)
		if p.Status.Reason != "" {
			line += " reason " + p.Status.Reason
		}
		lines = append(lines, line)
	}
	pvcs, err := n.Suite.Client.CoreV1().PersistentVolumeClaims(n.NS).List(ctx, metav1.ListOptions{})
	if err != nil {
		return append(lines, "claims: "+err.Error())
	}
	for _, c := range pvcs.Items {
		var conds []string
		for _, cond := range c.Status.Conditions {
			conds = append(conds, fmt.Sprintf("%s=%s(%s)", cond.Type, cond.Status, cond.Reason))
		}
		size := c.Status.Capacity.Storage()
		lines = append(lines, fmt.Sprintf("PVC %s phase %s capacity %s conditions [%s] resize %v",
			c.Name, c.Status.Phase, size, strings.Join(conds, " "), c.Status.AllocatedResourceStatuses))
		if c.Spec.VolumeName == "" {
			continue
		}
		pv, err := n.Suite.Client.CoreV1().PersistentVolumes().Get(ctx, c.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			lines = append(lines, "PV of "+c.Name+": "+err.Error())
			continue
		}
		lines = append(lines, z.Apply(fmt.Sprintf("PV %s phase %s capacity %s", pv.Name, pv.Status.Phase, pv.Spec.Capacity.Storage())))
	}
	events, err := n.settledEvents(ctx, pods.Items)
	if err != nil {
		return append(lines, "events: "+err.Error())
	}
	objs := make([]string, 0, len(events))
	for obj := range events {
		objs = append(objs, obj)
	}
	sort.Strings(objs)
	for _, obj := range objs {
		reasons, messages := map[string]bool{}, map[string]bool{}
		for e := range events[obj] {
			reasons[e.typeReason] = true
			messages[e.typeReason+": "+eventMessage(z, e.message)] = true
		}
		lines = append(lines, z.Apply("events of "+obj+": "+strings.Join(slices.Sorted(maps.Keys(reasons)), ", ")))
		// What a user reads in `kubectl describe`: each distinct message, as upstream's plugin
		// makes the kubelet and the attach/detach controller write it.
		for _, m := range slices.Sorted(maps.Keys(messages)) {
			lines = append(lines, z.Apply("event of "+obj+": "+m))
		}
	}
	return lines
}

// duration: a Go duration in an event message ("pulled in 1.2s", "after 500ms").
var duration = regexp.MustCompile(`\b[0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h)\b`)

// eventMessage is an event's message with the plugin's names normalised and durations
// replaced, so both plugins' runs compare.
func eventMessage(z *observe.Normalizer, message string) string {
	return duration.ReplaceAllString(z.Apply(message), "<duration>")
}

// event is what the suite compares of an event: its type and reason, and its message.
type event struct{ typeReason, message string }

// settledEvents is the set of events (type and reason, message) per "<kind> <name>" of the
// namespace's events once the kubelet's and controllers' event pipelines have delivered them: events are
// posted asynchronously, so a snapshot taken as a pod turns Running could otherwise miss its
// Started event in one run and not the other. Settled: every Running pod has its Started
// event and two reads settleGap apart agree (or settleMax passed: the last read is used).
func (n *Node) settledEvents(ctx context.Context, pods []v1.Pod) (map[string]map[event]bool, error) {
	const settleGap, settleMax = 250 * time.Millisecond, 10 * time.Second
	deadline := time.Now().Add(settleMax)
	var last map[string]map[event]bool
	for {
		events, err := n.Suite.Client.CoreV1().Events(n.NS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		reasons := map[string]map[event]bool{}
		for _, e := range events.Items {
			obj := e.InvolvedObject.Kind + " " + e.InvolvedObject.Name
			if reasons[obj] == nil {
				reasons[obj] = map[event]bool{}
			}
			reasons[obj][event{e.Type + " " + e.Reason, e.Message}] = true
		}
		started := true
		for _, p := range pods {
			if p.Status.Phase != v1.PodRunning {
				continue
			}
			found := false
			for e := range reasons["Pod "+p.Name] {
				found = found || e.typeReason == "Normal Started"
			}
			started = started && found
		}
		if started && reflect.DeepEqual(reasons, last) || time.Now().After(deadline) {
			return reasons, nil
		}
		last = reasons
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(settleGap):
		}
	}
}

// nodeLines: what the plugin publishes about the node: CSINode drivers, the node-ID
// annotation, topology labels.
func (n *Node) nodeLines(ctx context.Context, z *observe.Normalizer) []string {
	var lines []string
	cn, err := n.Suite.Client.StorageV1().CSINodes().Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		return []string{"CSINode: " + err.Error()}
	}
	// A list keyed by name (listType=map): its order follows which driver registered or
	// re-registered last (e.g. after a kubelet restart), not the plugin.
	drivers := slices.Clone(cn.Spec.Drivers)
	sort.Slice(drivers, func(i, j int) bool { return drivers[i].Name < drivers[j].Name })
	b, _ := json.Marshal(drivers)
	lines = append(lines, "CSINode.spec.drivers "+z.Apply(string(b)))
	lines = append(lines, "CSINode migrated-plugins "+cn.Annotations["storage.alpha.kubernetes.io/migrated-plugins"])
	nd, err := n.Suite.Client.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
	if err != nil {
		return append(lines, "Node: "+err.Error())
	}
	lines = append(lines, "Node nodeid annotation "+z.Apply(nd.Annotations["csi.volume.kubernetes.io/nodeid"]))
	var labels []string
	for k, v := range nd.Labels {
		if strings.Contains(k, "hostpath") {
			labels = append(labels, k+"="+z.Apply(v))
		}
	}
	sort.Strings(labels)
	return append(lines, "Node driver labels "+strings.Join(labels, ","))
}

// ForgetEvents deletes the namespace's events, so a scenario's snapshots compare its own
// events only: an earlier scenario's name the scenario's normaliser does not know would
// otherwise differ between the plugins' runs.
func (n *Node) ForgetEvents(ctx context.Context) error {
	return n.Suite.Client.CoreV1().Events(n.NS).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
}
