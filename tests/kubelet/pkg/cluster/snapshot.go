package cluster

import (
	"context"

	"kcsi.dev/kcsi/tests/kubelet/pkg/observe"
)

// Snapshot records, under prefix, the CSI requests since m, the plugin's files, the node
// objects and the namespace's pods, claims, volumes and events.
func (n *Node) Snapshot(ctx context.Context, o *observe.Observation, prefix string, m observe.Mark, z *observe.Normalizer) {
	calls, err := n.CallsSince(m)
	if err != nil {
		o.Fail(prefix+" the driver's requests", err)
	}
	o.AddCalls(prefix, calls, m, z)
	files, err := z.FileLines(n.Root)
	if err != nil {
		o.Fail(prefix+" the plugin's files", err)
	}
	o.Add(prefix+" files", files...)
	o.Add(prefix+" node objects", n.nodeLines(ctx, z)...)
	o.Add(prefix+" api objects", n.objectLines(ctx, z)...)
	if n.Attach != nil {
		n.Attach.Snapshot(ctx, o, prefix, m, z)
	}
}
