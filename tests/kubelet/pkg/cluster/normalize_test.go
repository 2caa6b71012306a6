package cluster

import (
	"crypto/sha256"
	"fmt"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kcsi.dev/kcsi/tests/kubelet/pkg/observe"
)

func TestAddPodRewritesOnlyTheInlineHandleUpstreamDerives(t *testing.T) {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", UID: "test-pod"}, Spec: v1.PodSpec{Volumes: []v1.Volume{
		{Name: "test-vol", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: DriverName}}},
		{Name: "claim", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: "c"}}},
	}}}
	z := &observe.Normalizer{}
	(&Node{Name: "node-kcsi"}).AddPod(z, pod)
	// Upstream's makeVolumeHandle("test-pod", "test-vol"), from its own test table.
	const upstream = "csi-77b4ec2e40cdc3e4fe6faa47461d327e48a98aadcbdafbf723ce9a664a5bb118"
	if got := z.Apply(upstream); got != "<ephemeral-handle(test-vol)>" {
		t.Errorf("upstream's handle becomes %q", got)
	}
	swapped := fmt.Sprintf("csi-%x", sha256.Sum256([]byte("test-vol"+"test-pod")))
	if got := z.Apply(swapped); got != swapped {
		t.Errorf("a handle upstream would not derive becomes %q, want it left as it is", got)
	}
	attachment := fmt.Sprintf("csi-%x", sha256.Sum256([]byte(upstream+DriverName+"node-kcsi")))
	if got := z.Apply(attachment); got != "<attachment(test-vol)>" {
		t.Errorf("the attachment ID made from upstream's handle becomes %q", got)
	}
	if got := z.Apply("pods/test-pod/volumes"); got != "pods/<uid(p)>/volumes" {
		t.Errorf("the pod UID becomes %q", got)
	}
}

func TestEventMessagesCompareWithoutTheirDurations(t *testing.T) {
	z := &observe.Normalizer{}
	z.Add("pv-kcsi", "<pv>")
	got := eventMessage(z, `Successfully pulled image "busybox" in 1.234s (1.5s including waiting); AttachVolume.Attach succeeded for volume "pv-kcsi" after 500ms`)
	want := `Successfully pulled image "busybox" in <duration> (<duration> including waiting); AttachVolume.Attach succeeded for volume "<pv>" after <duration>`
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	if got := eventMessage(z, "MountVolume.SetUp failed for volume v2: rpc error"); got != "MountVolume.SetUp failed for volume v2: rpc error" {
		t.Errorf("a name with digits is left as it is: %s", got)
	}
}
