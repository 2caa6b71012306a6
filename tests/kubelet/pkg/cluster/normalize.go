package cluster

import (
	"crypto/sha256"
	"fmt"

	"kcsi.dev/kcsi/tests/kubelet/pkg/observe"
)

// Normalizer rewrites the node's names, the pods' UIDs (by pod name) and the volume handles (by
// volume name) and what is made from them to placeholders.
func (n *Node) Normalizer(uids map[string]string, handles map[string]string) *observe.Normalizer {
	z := &observe.Normalizer{}
	add := z.Add
	add(n.Root, "<root>")
	add(n.State, "<state>")
	for name, h := range handles {
		sum := sha256.Sum256([]byte(h))
		add(fmt.Sprintf("%x", sum), "<sha256("+name+")>")
		for _, d := range []string{DriverName, AttachDriverName} {
			att := sha256.Sum256([]byte(h + d + n.Name))
			add(fmt.Sprintf("csi-%x", att), "<attachment("+name+")>")
		}
		add(h, "<handle("+name+")>")
		add("pv-"+name+"-"+n.Plugin, "pv-"+name+"-<plugin>")
	}
	for name, uid := range uids {
		add(uid, "<uid("+name+")>")
	}
	add(n.NS, "<ns>")
	add(n.Name, "<node>")
	return z
}
