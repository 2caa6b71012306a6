package cluster

import (
	"crypto/sha256"
	"fmt"

	v1 "k8s.io/api/core/v1"

	"kcsi.dev/kcsi/tests/kubelet/pkg/observe"
)

// Normalizer rewrites the node's names, the volume handles (by volume name), the pods' UIDs
// and inline volumes' handles (AddPod), and what is made from them, to placeholders.
func (n *Node) Normalizer(handles map[string]string, pods ...*v1.Pod) *observe.Normalizer {
	z := &observe.Normalizer{Resynced: n.attacherResync}
	add := z.Add
	add(n.Root, "<root>")
	add(n.State, "<state>")
	for name, h := range handles {
		sum := sha256.Sum256([]byte(h))
		add(fmt.Sprintf("%x", sum), "<sha256("+name+")>")
		for _, d := range []string{DriverName, AttachDriverName} {
			add(attachmentName(h, d, n.Name), "<attachment("+name+")>")
		}
		add(h, "<handle("+name+")>")
		add("pv-"+name+"-"+n.Plugin, "pv-"+name+"-<plugin>")
	}
	for _, pod := range pods {
		n.AddPod(z, pod)
	}
	add(n.NS, "<ns>")
	add(n.Name, "<node>")
	return z
}

// AddPod rewrites the pod's UID and the handle of each of its CSI inline volumes, as
// upstream derives it (pkg/volume/csi/csi_util.go makeVolumeHandle: "csi-" + hex(sha256(pod
// UID + volume name))), and the attachment ID made from that handle (vol_data.json's): a
// handle a plugin derives otherwise is left as it is, and differs.
func (n *Node) AddPod(z *observe.Normalizer, pod *v1.Pod) {
	for _, v := range pod.Spec.Volumes {
		if v.CSI != nil {
			handle := fmt.Sprintf("csi-%x", sha256.Sum256([]byte(string(pod.UID)+v.Name)))
			z.Add(attachmentName(handle, v.CSI.Driver, n.Name), "<attachment("+v.Name+")>")
			z.Add(handle, "<ephemeral-handle("+v.Name+")>")
		}
	}
	z.Add(string(pod.UID), "<uid("+pod.Name+")>")
}

// attachmentName is upstream's pkg/volume/csi/csi_attacher.go getAttachmentName: the
// VolumeAttachment's name, and vol_data.json's attachmentID.
func attachmentName(handle, driver, node string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(handle+driver+node)))
}
