package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The scenarios of the attach/detach half: the real attach/detach controller with the node's
// plugin, the real external-attacher and a driver that needs attaching (attach.go).
func init() {
	scenarios = append(scenarios,
		scenario{"attach-pvc", attachPVC},
		scenario{"attach-controller-restart", attachControllerRestart},
		scenario{"attach-limit", attachLimit},
	)
}

// attachPVC: the controller creates the VolumeAttachment, the sidecar attaches it, the kubelet
// waits for it, stages and publishes; deleting the pod unpublishes, unstages, and the
// controller detaches (the VolumeAttachment goes, ControllerUnpublishVolume).
func attachPVC(ctx context.Context, n *node, o *observation) error {
	c, err := n.attachClaim(ctx, "attach")
	if err != nil {
		return err
	}
	defer n.deleteClaim(context.Background(), c)
	pod := n.claimPod("attach", c)
	return n.runPod(ctx, o, pod, map[string]string{"attach": c.handle}, func(pod *v1.Pod, z *normalizer) error {
		target := mountPath(n, pod, c.pv)
		o.checkMounted("the attached volume is mounted at the pod's mount path", target)
		ok, detail := n.attach.attached(ctx, c)
		o.check("the VolumeAttachment is attached and the volume is in node.status.volumesAttached", ok, detail)
		return nil
	})
}

// attachControllerRestart: the controller restarts while the volume is attached; it rebuilds
// its state from node.status.volumesAttached and its reconciler's sync asks the plugin's
// VolumesAreAttached, which must keep the volume attached (no detach, no ControllerUnpublish).
func attachControllerRestart(ctx context.Context, n *node, o *observation) error {
	c, err := n.attachClaim(ctx, "adc-restart")
	if err != nil {
		return err
	}
	defer n.deleteClaim(context.Background(), c)
	pod := n.claimPod("adc-restart", c)
	return n.runPod(ctx, o, pod, map[string]string{"adc-restart": c.handle}, func(pod *v1.Pod, z *normalizer) error {
		stopProc(n.attach.controller)
		m, logAt := n.mark(), logSize(n.attach.controllerLog)
		if err := n.attach.startController(); err != nil {
			return err
		}
		// Two syncs of the new controller's reconciler: VolumesAreAttached has answered at
		// least once (the first sync starts one sync period after the controller).
		const syncLine = "Starting reconciling attached volumes still attached"
		err := waitFor(ctx, time.Minute, "two reconciler syncs of the restarted controller", func() (bool, error) {
			b, err := os.ReadFile(n.attach.controllerLog)
			if err != nil || int64(len(b)) < logAt {
				return false, err
			}
			return strings.Count(string(b[logAt:]), syncLine) >= 2, nil
		})
		o.check("the restarted controller's reconciler synced twice", err == nil, fmt.Sprint(err))
		ok, detail := n.attach.attached(ctx, c)
		o.check("the volume stays attached across the controller restart", ok, detail)
		n.snapshot(ctx, o, "controller restarted:", m, z)
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
func attachLimit(ctx context.Context, n *node, o *observation) error {
	if err := n.attach.restartDriver(ctx, 1); err != nil {
		return err
	}
	defer func() {
		if err := n.attach.restartDriver(context.Background(), 0); err != nil {
			fmt.Fprintf(os.Stderr, "kubelet-e2e: restarting %s without a limit: %v\n", attachDriverName, err)
		}
	}()
	// VerifyExhaustedResource acts only for a driver with an allocatable update period. The
	// periodic refresh first fires one period after the change (both plugins' tickers), so an
	// hour keeps it out of the scenario, which takes under 4 minutes.
	restore, err := n.withDriverSpec(ctx, attachCSIDriver(), func(s *storagev1.CSIDriverSpec) {
		period := int64(3600)
		s.NodeAllocatableUpdatePeriodSeconds = &period
	})
	if err != nil {
		return err
	}
	defer restore()
	first, err := n.attachClaim(ctx, "limit-a")
	if err != nil {
		return err
	}
	defer n.deleteClaim(context.Background(), first)
	second, err := n.attachClaim(ctx, "limit-b")
	if err != nil {
		return err
	}
	defer n.deleteClaim(context.Background(), second)
	handles := map[string]string{"limit-a": first.handle, "limit-b": second.handle}
	return n.runPod(ctx, o, n.claimPod("limit-a", first), handles, func(_ *v1.Pod, z *normalizer) error {
		m := n.mark()
		pod, err := n.s.client.CoreV1().Pods(n.ns).Create(ctx, n.claimPod("limit-b", second), metav1.CreateOptions{})
		if err != nil {
			return err
		}
		defer n.deletePod(context.Background(), pod, podTimeout)
		z.add(string(pod.UID), "<uid(limit-b)>")
		var reason string
		err = waitFor(ctx, 4*time.Minute, "pod limit-b rejected by the kubelet", func() (bool, error) {
			p, err := n.s.client.CoreV1().Pods(n.ns).Get(ctx, pod.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			reason = p.Status.Reason
			return p.Status.Phase == v1.PodFailed, nil
		})
		o.check("the pod over the attach limit fails with VolumeAttachmentLimitExceeded",
			err == nil && reason == "VolumeAttachmentLimitExceeded", fmt.Sprintf("%v, reason %q", err, reason))
		n.snapshot(ctx, o, "limit reached:", m, z)
		// limit-b goes before limit-a's teardown frees the node's one attach slot: while its
		// VolumeAttachment is there, the external-attacher keeps retrying ControllerPublish
		// on its own backoff, and whether a retry lands after the slot is free is timing.
		if err := n.deletePod(ctx, pod, podTimeout); err != nil {
			return err
		}
		return waitFor(ctx, 2*time.Minute, "limit-b's VolumeAttachment gone", func() (bool, error) {
			vas, err := n.attach.attachments(ctx)
			if err != nil {
				return false, err
			}
			for _, va := range vas {
				if pv := va.Spec.Source.PersistentVolumeName; pv != nil && *pv == second.pv {
					return false, nil
				}
			}
			return true, nil
		})
	})
}
