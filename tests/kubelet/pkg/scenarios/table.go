package scenarios

import (
	"context"

	"kcsi.dev/kcsi/tests/kubelet/pkg/cluster"
	"kcsi.dev/kcsi/tests/kubelet/pkg/observe"
)

// scenario is one thing the suite does on a node, with each plugin in turn; what it proves
// holds for kcsi when both plugins' observations agree and every check passes.
type scenario struct {
	name   string
	proves string
	run    func(ctx context.Context, n *cluster.Node, o *observe.Observation) error
}

// scenarios is every scenario, in the order they run (-scenarios picks some by name).
var scenarios = []scenario{
	{"pod-with-pvc", "a pre-bound PVC: the bind mount is there, data written through it lands in the driver's volume; deleting the pod unpublishes, unstages and removes the pod dir", podWithPVC},
	{"kubelet-restart", "the kubelet restarted while the pod runs reconstructs the volume from disk and later tears it down cleanly; the node says Ready as soon after the restart as with upstream", kubeletRestart},
	{"block-pvc", "a volumeMode: Block PVC is staged and mapped into the pod as a block device, then torn down", blockPVC},
	{"inline-ephemeral", "a CSI ephemeral inline volume is published under the handle upstream derives from the pod UID and volume name, and torn down", inlineEphemeral},
	{"fsgroup", "the pod's fsGroup is applied to the volume (fsGroupPolicy: File)", fsGroup},
	// The attach/detach half: the real attach/detach controller with the node's plugin, the
	// real external-attacher and a driver that needs attaching (cluster.AttachStack).
	{"attach-pvc", "an attach-required PVC: VolumeAttachment attached by the external-attacher, staged and published; on delete unpublished, unstaged and detached", attachPVC},
	{"attach-controller-restart", "a restarted attach/detach controller's VolumesAreAttached keeps an attached volume attached", attachControllerRestart},
	{"attach-limit", "over the driver's attach limit the VolumeAttachment keeps ResourceExhausted and the pod fails with VolumeAttachmentLimitExceeded", attachLimit},
	// A driver that dies under an RPC: the operation is uncertain and retried once it is back.
	{"driver-killed-during-publish", "a driver SIGKILLed inside NodePublishVolume (the fault driver's injected hold) leaves the publish uncertain, and the retry brings the pod to Running", driverKilledDuringPublish},
	// kubernetes#85476: a kubelet killed between NodeUnpublishVolume and NodeUnstageVolume
	// (the fault driver holds the NodeUnstageVolume), restarted with no pod using the volume.
	{"unstage-window", "a kubelet SIGKILLed after a filesystem volume's last NodeUnpublishVolume and before its NodeUnstageVolume, restarted with no pod using it: kcsi unstages it within a few grace periods (upstream leaves it staged for good), while the volume a running pod uses stays staged and published and the pod Running", unstageWindow},
	{"unstage-window-block", "the same for a volumeMode: Block volume: kcsi unstages the block staging path no pod uses and removes its dirs, never the running pod's", unstageWindowBlock},
	// Volume expansion end to end with the real external-resizer.
	{"expand", "a claim grown while its pod runs: ControllerExpandVolume, then the kubelet's NodeExpandVolume, and the PVC's new capacity", expand},
	{"expand-refused", "a NodeExpandVolume the driver refuses with OutOfRange is final: NodeResizeError and NodeResizeInfeasible, capacity kept", expandRefused},
	// The corners the kubelet records differently when a plugin differs.
	{"rwop-fsgroup", "a ReadWriteOncePod PV with an fsType gets the fsGroup under fsGroupPolicy ReadWriteOnceWithFSType", rwopFSGroup},
	{"read-only-pvc", "a claim mounted read-only: NodePublish says so and a write fails with EROFS", readOnlyPVC},
	{"secrets", "NodeStage and NodePublish carry the Secret the PV names", secrets},
	{"token-republish", "tokenRequests with requiresRepublish: published again on every pod sync with the same, cached token", tokenRepublish},
}
