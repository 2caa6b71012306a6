package main

import (
	"context"
	"fmt"
	"sort"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// objectLines: what the kubelet and the plugin leave on the API objects of the node's
// namespace: each pod's phase, each claim's and volume's status (phase, capacity,
// conditions), and the reasons of the events about each object.
func (n *node) objectLines(ctx context.Context, z *normalizer) []string {
	var lines []string
	pods, err := n.s.client.CoreV1().Pods(n.ns).List(ctx, metav1.ListOptions{})
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
	pvcs, err := n.s.client.CoreV1().PersistentVolumeClaims(n.ns).List(ctx, metav1.ListOptions{})
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
		pv, err := n.s.client.CoreV1().PersistentVolumes().Get(ctx, c.Spec.VolumeName, metav1.GetOptions{})
		if err != nil {
			lines = append(lines, "PV of "+c.Name+": "+err.Error())
			continue
		}
		lines = append(lines, z.apply(fmt.Sprintf("PV %s phase %s capacity %s", pv.Name, pv.Status.Phase, pv.Spec.Capacity.Storage())))
	}
	events, err := n.s.client.CoreV1().Events(n.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return append(lines, "events: "+err.Error())
	}
	reasons := map[string]map[string]bool{}
	for _, e := range events.Items {
		obj := e.InvolvedObject.Kind + " " + e.InvolvedObject.Name
		if reasons[obj] == nil {
			reasons[obj] = map[string]bool{}
		}
		reasons[obj][e.Type+" "+e.Reason] = true
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
		lines = append(lines, z.apply("events of "+obj+": "+strings.Join(rs, ", ")))
	}
	return lines
}
