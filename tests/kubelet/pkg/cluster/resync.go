package cluster

import (
	"path/filepath"
	"strings"

	"kcsi.dev/kcsi/tests/kubelet/pkg/audit"
	"kcsi.dev/kcsi/tests/kubelet/pkg/observe"
)

// attacherResync says whether a successful ControllerPublishVolume repeated after an identical
// successful one was the external-attacher's own resync, from the API server's audit log:
// from its creation (the attach/detach controller's) until the repeat was answered, the
// VolumeAttachment was written by the external-attacher alone (its finalizer, its node ID
// annotation, its status), and by it at least once, so that nothing the plugin under test
// did can have made the attacher sync it again. Without an audit log, a VolumeAttachment
// name or the times, the answer is no, and the repeat is compared in full.
func (n *Node) attacherResync(first, repeat observe.Call) bool {
	volume, _ := repeat.Request["volume_id"].(string)
	if n.Suite.AuditLog == "" || n.Attach == nil || volume == "" || first.At.IsZero() || repeat.At.IsZero() {
		return false
	}
	va := attachmentName(volume, AttachDriverName, n.Name) // the drivers' node ID is the node's name
	events, err := audit.Read(n.Suite.AuditLog)
	if err != nil {
		return false
	}
	attacher := filepath.Base(n.Attach.attacherBin) + "/" // client-go's default user agent
	wrote, other := false, false                          // since the VolumeAttachment's last creation
	for _, e := range events {
		if e.ObjectRef == nil || e.ObjectRef.Resource != "volumeattachments" || e.ObjectRef.Name != va ||
			e.RequestReceivedTimestamp.After(repeat.At) {
			continue
		}
		switch e.Verb {
		case "create":
			wrote, other = false, false
		case "update", "patch", "delete":
			if strings.HasPrefix(e.UserAgent, attacher) {
				wrote = true
			} else {
				other = true
			}
		}
	}
	return wrote && !other
}
