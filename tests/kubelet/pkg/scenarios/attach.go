package scenarios

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"kcsi.dev/kcsi/tests/kubelet/pkg/cluster"
	"kcsi.dev/kcsi/tests/kubelet/pkg/observe"
)

// attachPVC: the controller creates the VolumeAttachment, the sidecar attaches it, the kubelet
// waits for it, stages and publishes; deleting the pod unpublishes, unstages, and the
// controller detaches (the VolumeAttachment goes, ControllerUnpublishVolume).
func attachPVC(ctx context.Context, n *cluster.Node, o *observe.Observation) error {
	c, err := n.AttachClaim(ctx, "attach")
	if err != nil {
		return err
	}
	defer n.DeleteClaim(context.Background(), c)
	pod := n.ClaimPod("attach", c)
	return runPod(ctx, n, o, pod, map[string]string{"attach": c.Handle}, func(pod *v1.Pod, z *observe.Normalizer) error {
		target := n.MountPath(pod, c.PV)
		o.CheckMounted("the attached volume is mounted at the pod's mount path", target)
		ok, detail := n.Attach.Attached(ctx, c)
		o.Check("the VolumeAttachment is attached and the volume is in node.status.volumesAttached", ok, detail)
		return nil
	})
}

// attachControllerRestart: the controller restarts while the volume is attached; it rebuilds
// its state from node.status.volumesAttached and its reconciler's sync asks the plugin's
// VolumesAreAttached, which must keep the volume attached (no detach, no ControllerUnpublish).
func attachControllerRestart(ctx context.Context, n *cluster.Node, o *observe.Observation) error {
	c, err := n.AttachClaim(ctx, "adc-restart")
	if err != nil {
		return err
	}
	defer n.DeleteClaim(context.Background(), c)
	pod := n.ClaimPod("adc-restart", c)
	return runPod(ctx, n, o, pod, map[string]string{"adc-restart": c.Handle}, func(pod *v1.Pod, z *observe.Normalizer) error {
		cluster.StopProc(n.Attach.Controller)
		m, logAt := n.Mark(), observe.LogSize(n.Attach.ControllerLog)
		if err := n.Attach.StartController(); err != nil {
			return err
		}
		// Two syncs of the new controller's reconciler: VolumesAreAttached has answered at
		// least once (the first sync starts one sync period after the controller).
		const syncLine = "Starting reconciling attached volumes still attached"
		err := cluster.WaitFor(ctx, time.Minute, "two reconciler syncs of the restarted controller", func() (bool, error) {
			b, err := os.ReadFile(n.Attach.ControllerLog)
			if err != nil || int64(len(b)) < logAt {
				return false, err
			}
			return strings.Count(string(b[logAt:]), syncLine) >= 2, nil
		})
		o.Check("the restarted controller's reconciler synced twice", err == nil, fmt.Sprint(err))
		ok, detail := n.Attach.Attached(ctx, c)
		o.Check("the volume stays attached across the controller restart", ok, detail)
		n.Snapshot(ctx, o, "controller restarted:", m, z)
		return nil
	})
}

// attachLimit: the driver takes one attachment per node (-attach-limit=1). A second pod's
// ControllerPublishVolume fails with ResourceExhausted; the VolumeAttachment keeps the error
// with its code, the kubelet's VerifyExhaustedResource sees it when the pod's volumes time out
// (2 min 3 s, volume_manager.go WaitForAttachAndMount), refreshes CSINode through NodeGetInfo
// and rejects the pod (Failed, VolumeAttachmentLimitExceeded). The attach driver's
// NodeGetInfo is compared in full: the only one in the "limit reached:" snapshot is that
// refresh, and the CSINode's allocatable count it writes is compared too.
func attachLimit(ctx context.Context, n *cluster.Node, o *observe.Observation) error {
	if err := n.Attach.RestartDriver(ctx, 1); err != nil {
		return err
	}
	defer func() {
		if err := n.Attach.RestartDriver(context.Background(), 0); err != nil {
			fmt.Fprintf(os.Stderr, "kubelet-e2e: restarting %s without a limit: %v\n", cluster.AttachDriverName, err)
		}
	}()
	// VerifyExhaustedResource acts only for a driver with an allocatable update period. The
	// periodic refresh first fires one period after the change (both plugins' tickers), so an
	// hour keeps it out of the scenario, which takes under 4 minutes.
	restore, err := withDriverSpec(ctx, n, cluster.AttachCSIDriver(), func(s *storagev1.CSIDriverSpec) {
		period := int64(3600)
		s.NodeAllocatableUpdatePeriodSeconds = &period
	})
	if err != nil {
		return err
	}
	defer restore()
	first, err := n.AttachClaim(ctx, "limit-a")
	if err != nil {
		return err
	}
	defer n.DeleteClaim(context.Background(), first)
	second, err := n.AttachClaim(ctx, "limit-b")
	if err != nil {
		return err
	}
	defer n.DeleteClaim(context.Background(), second)
	handles := map[string]string{"limit-a": first.Handle, "limit-b": second.Handle}
	return runPod(ctx, n, o, n.ClaimPod("limit-a", first), handles, func(_ *v1.Pod, z *observe.Normalizer) error {
		m := n.Mark()
		pod, err := n.Suite.Client.CoreV1().Pods(n.NS).Create(ctx, n.ClaimPod("limit-b", second), metav1.CreateOptions{})
		if err != nil {
			return err
		}
		defer n.DeletePod(context.Background(), pod, podTimeout)
		n.AddPod(z, pod)
		var reason string
		err = cluster.WaitFor(ctx, 4*time.Minute, "pod limit-b rejected by the kubelet", func() (bool, error) {
			p, err := n.Suite.Client.CoreV1().Pods(n.NS).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			reason = p.Status.Reason
			return p.Status.Phase == v1.PodFailed, nil
		})
		o.Check("the pod over the attach limit fails with VolumeAttachmentLimitExceeded",
			err == nil && reason == "VolumeAttachmentLimitExceeded", fmt.Sprintf("%v, reason %q", err, reason))
		n.Snapshot(ctx, o, "limit reached:", m, z)
		// limit-b goes before limit-a's teardown frees the node's one attach slot: while its
		// VolumeAttachment is there, the external-attacher keeps retrying ControllerPublish
		// on its own backoff, and whether a retry lands after the slot is free is timing.
		if err := n.DeletePod(ctx, pod, podTimeout); err != nil {
			return err
		}
		return cluster.WaitFor(ctx, 2*time.Minute, "limit-b's VolumeAttachment gone", func() (bool, error) {
			vas, err := n.Attach.Attachments(ctx)
			if err != nil {
				return false, err
			}
			for _, va := range vas {
				if pv := va.Spec.Source.PersistentVolumeName; pv != nil && *pv == second.PV {
					return false, nil
				}
			}
			return true, nil
		})
	})
}
