package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"reflect"
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
// conditions), and the reasons of the events about each object.
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
	reasons, err := n.settledEventReasons(ctx, pods.Items)
	if err != nil {
		return append(lines, "events: "+err.Error())
	}
	objs := make([]string, 0, len(reasons))
	for obj := range reasons {
		objs = append(objs, obj)
	}
	sort.Strings(objs)
	for _, obj := range objs {
		var rs []string
		for r := range reasons[obj] {
			rs = append(rs, r)
		}
		sort.Strings(rs)
		lines = append(lines, z.Apply("events of "+obj+": "+strings.Join(rs, ", ")))
	}
	return lines
}

// settledEventReasons is the set of "<type> <reason>" per "<kind> <name>" of the namespace's
// events once the kubelet's and controllers' event pipelines have delivered them: events are
// posted asynchronously, so a snapshot taken as a pod turns Running could otherwise miss its
// Started event in one run and not the other. Settled: every Running pod has its Started
// event and two reads settleGap apart agree (or settleMax passed: the last read is used).
func (n *Node) settledEventReasons(ctx context.Context, pods []v1.Pod) (map[string]map[string]bool, error) {
	const settleGap, settleMax = 250 * time.Millisecond, 10 * time.Second
	deadline := time.Now().Add(settleMax)
	var last map[string]map[string]bool
	for {
		events, err := n.Suite.Client.CoreV1().Events(n.NS).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		reasons := map[string]map[string]bool{}
		for _, e := range events.Items {
			obj := e.InvolvedObject.Kind + " " + e.InvolvedObject.Name
			if reasons[obj] == nil {
				reasons[obj] = map[string]bool{}
			}
			reasons[obj][e.Type+" "+e.Reason] = true
		}
		started := true
		for _, p := range pods {
			if p.Status.Phase == v1.PodRunning && !reasons["Pod "+p.Name]["Normal Started"] {
				started = false
			}
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
