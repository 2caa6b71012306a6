package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// attachDriverName is a second hostpath driver, one that needs attaching: the main driver
// keeps attachRequired: false (hostpath's -enable-attach makes NodeStage refuse a volume that
// was not ControllerPublished).
const attachDriverName = "attach.hostpath.csi.k8s.io"

// attachCSIDriver is the attach driver's CSIDriver object.
func attachCSIDriver() *storagev1.CSIDriver {
	d := hostpathCSIDriver()
	t := true
	d.Name = attachDriverName
	d.Spec.AttachRequired = &t
	d.Spec.VolumeLifecycleModes = []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}
	return d
}

// attachStack is what attach-required volumes need around a node, as a cluster runs it: the
// attach driver (hostpath -enable-attach) with its node-driver-registrar, the real
// external-attacher for it, and the real attach/detach controller with the node's plugin
// (kcsi's or upstream's), which the kubelet (enableControllerAttachDetach: true) waits on.
type attachStack struct {
	n                                       *node
	dir, socket, state, log, controllerLog  string
	driver, registrar, attacher, controller *exec.Cmd
	csi                                     *grpc.ClientConn
}

func (n *node) newAttachStack() *attachStack {
	dir := filepath.Join(n.dir, "attach")
	return &attachStack{n: n, dir: dir, socket: filepath.Join(n.root, "plugins", attachDriverName, "csi.sock"),
		state: filepath.Join(dir, "state"), log: filepath.Join(dir, "driver.log"),
		controllerLog: filepath.Join(dir, "controller.log")}
}

// start starts the stack and waits until the kubelet lists the driver in its CSINode.
func (a *attachStack) start(ctx context.Context) error {
	for _, d := range []string{filepath.Dir(a.socket), a.state, filepath.Join(a.dir, "flex")} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return err
		}
	}
	if err := a.startDriver(ctx, 0); err != nil {
		return err
	}
	var err error
	if a.registrar, err = startProc(filepath.Join(a.dir, "registrar.log"), a.n.s.registrar, "--csi-address="+a.socket,
		"--kubelet-registration-path="+a.socket, "--plugin-registration-path="+filepath.Join(a.n.root, "plugins_registry"), "-v=3"); err != nil {
		return fmt.Errorf("node-driver-registrar for %s: %w", attachDriverName, err)
	}
	if err := a.startController(); err != nil {
		return err
	}
	return waitFor(ctx, 60*time.Second, attachDriverName+" in the CSINode of "+a.n.name, func() (bool, error) {
		cn, err := a.n.s.client.StorageV1().CSINodes().Get(ctx, a.n.name, metav1.GetOptions{})
		if err != nil {
			return false, ignoreNotFound(err)
		}
		return hasDriver(cn, attachDriverName), nil
	})
}

// startDriver starts the driver (attachLimit > 0: hostpath's -attach-limit) and its
// external-attacher, which exits when it loses the driver, so it restarts with it.
func (a *attachStack) startDriver(ctx context.Context, attachLimit int) error {
	args := []string{"--endpoint=unix://" + a.socket, "--nodeid=" + a.n.name, "--statedir=" + a.state,
		"--drivername=" + attachDriverName, "-enable-attach", "-v=5"}
	if attachLimit > 0 {
		args = append(args, fmt.Sprintf("-attach-limit=%d", attachLimit))
	}
	var err error
	if a.driver, err = startProc(a.log, a.n.s.hostpath, args...); err != nil {
		return fmt.Errorf("hostpath driver %s: %w", attachDriverName, err)
	}
	// hostpath removes a stale socket and listens anew: dial only once the socket is there.
	if err := waitFor(ctx, 20*time.Second, attachDriverName+"'s socket", func() (bool, error) {
		_, err := os.Stat(a.socket)
		return err == nil, nil
	}); err != nil {
		return err
	}
	if a.csi == nil {
		if a.csi, err = grpc.NewClient("unix://"+a.socket, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
			return err
		}
	}
	if err := waitFor(ctx, 20*time.Second, attachDriverName+" answering Probe", func() (bool, error) {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := csi.NewIdentityClient(a.csi).Probe(pctx, &csi.ProbeRequest{})
		return err == nil, nil
	}); err != nil {
		return err
	}
	attacher, err := a.n.s.peer("attacher")
	if err != nil {
		return err
	}
	if a.attacher, err = startProc(filepath.Join(a.dir, "external-attacher.log"), attacher, "--csi-address="+a.socket,
		"--kubeconfig="+a.n.s.kubeconfig, "-v=3"); err != nil {
		return fmt.Errorf("external-attacher: %w", err)
	}
	return nil
}

// restartDriver restarts the driver (and its external-attacher) with another attach limit.
func (a *attachStack) restartDriver(ctx context.Context, attachLimit int) error {
	stopProc(a.attacher)
	stopProc(a.driver)
	return a.startDriver(ctx, attachLimit)
}

func (a *attachStack) startController() error {
	var err error
	a.controller, err = startProc(a.controllerLog, a.n.s.self, "controller", "-plugin", a.n.plugin,
		"-kubeconfig", a.n.s.kubeconfig, "-flex-dir", filepath.Join(a.dir, "flex"), "-v=5")
	if err != nil {
		return fmt.Errorf("attach/detach controller: %w", err)
	}
	return nil
}

func (a *attachStack) stop() {
	stopProc(a.controller)
	stopProc(a.attacher)
	stopProc(a.registrar)
	if a.csi != nil {
		a.csi.Close()
	}
	stopProc(a.driver)
}

// attachClaim is a claim on the attach driver.
func (n *node) attachClaim(ctx context.Context, name string) (*claim, error) {
	return n.createClaimOn(ctx, n.attach.csi, attachDriverName, name, false)
}

// snapshot adds what attaching shows: the requests the attach driver got, the node's
// VolumeAttachments and node.status.volumesAttached / volumesInUse.
func (a *attachStack) snapshot(ctx context.Context, o *observation, prefix string, m logMark, z *normalizer) {
	calls, err := readCalls(a.log, m.attach)
	if err != nil {
		o.fail(prefix+" the attach driver's requests", err)
	}
	// The controller attaches and detaches volumes in parallel: compared volume by volume
	// (by their normalized names), each volume's requests in their order.
	volume := func(c call) string { id, _ := c.Request["volume_id"].(string); return z.apply(id) }
	sort.SliceStable(calls, func(i, j int) bool { return volume(calls[i]) < volume(calls[j]) })
	o.addCalls(prefix+" attach driver", calls, m, z)
	o.add(prefix+" volume attachments", a.attachmentLines(ctx, z)...)
	o.add(prefix+" node attach status", a.nodeAttachLines(ctx, z)...)
}

func (a *attachStack) attachments(ctx context.Context) ([]storagev1.VolumeAttachment, error) {
	all, err := a.n.s.client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var mine []storagev1.VolumeAttachment
	for _, va := range all.Items {
		if va.Spec.NodeName == a.n.name {
			mine = append(mine, va)
		}
	}
	return mine, nil
}

func (a *attachStack) attachmentLines(ctx context.Context, z *normalizer) []string {
	vas, err := a.attachments(ctx)
	if err != nil {
		return []string{"VolumeAttachments: " + err.Error()}
	}
	var lines []string
	for _, va := range vas {
		pv := "<none>"
		if va.Spec.Source.PersistentVolumeName != nil {
			pv = *va.Spec.Source.PersistentVolumeName
		}
		line := fmt.Sprintf("VolumeAttachment %s attacher %s node %s pv %s inline %v attached %v metadata %v finalizers %v deleting %v",
			va.Name, va.Spec.Attacher, va.Spec.NodeName, pv, va.Spec.Source.InlineVolumeSpec != nil, va.Status.Attached,
			va.Status.AttachmentMetadata, va.Finalizers, va.DeletionTimestamp != nil)
		for what, e := range map[string]*storagev1.VolumeError{"attachError": va.Status.AttachError, "detachError": va.Status.DetachError} {
			if e != nil {
				code := "<none>"
				if e.ErrorCode != nil {
					code = fmt.Sprint(*e.ErrorCode)
				}
				line += fmt.Sprintf(" %s %q errorCode %s", what, e.Message, code)
			}
		}
		lines = append(lines, z.apply(line))
	}
	sort.Strings(lines)
	return lines
}

func (a *attachStack) nodeAttachLines(ctx context.Context, z *normalizer) []string {
	nd, err := a.n.s.client.CoreV1().Nodes().Get(ctx, a.n.name, metav1.GetOptions{})
	if err != nil {
		return []string{"Node: " + err.Error()}
	}
	var attached, inUse []string
	for _, v := range nd.Status.VolumesAttached {
		attached = append(attached, z.apply(fmt.Sprintf("%s devicePath %q", v.Name, v.DevicePath)))
	}
	for _, v := range nd.Status.VolumesInUse {
		inUse = append(inUse, z.apply(string(v)))
	}
	sort.Strings(attached)
	sort.Strings(inUse)
	return []string{"volumesAttached [" + strings.Join(attached, ", ") + "]", "volumesInUse [" + strings.Join(inUse, ", ") + "]"}
}

// waitDetached waits until the node has no VolumeAttachment and the controller and the
// kubelet have both let go of every attached volume in the Node's status.
func (a *attachStack) waitDetached(ctx context.Context) error {
	return waitFor(ctx, 2*time.Minute, "every VolumeAttachment of "+a.n.name+" deleted and its node status clear", func() (bool, error) {
		vas, err := a.attachments(ctx)
		if err != nil || len(vas) > 0 {
			return false, err
		}
		nd, err := a.n.s.client.CoreV1().Nodes().Get(ctx, a.n.name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return len(nd.Status.VolumesAttached) == 0 && len(nd.Status.VolumesInUse) == 0, nil
	})
}

// attached reports whether the claim's VolumeAttachment says attached, and the volume is in
// node.status.volumesAttached.
func (a *attachStack) attached(ctx context.Context, c *claim) (bool, string) {
	vas, err := a.attachments(ctx)
	if err != nil {
		return false, err.Error()
	}
	nd, err := a.n.s.client.CoreV1().Nodes().Get(ctx, a.n.name, metav1.GetOptions{})
	if err != nil {
		return false, err.Error()
	}
	vaOK, inStatus := false, false
	for _, va := range vas {
		if va.Spec.Source.PersistentVolumeName != nil && *va.Spec.Source.PersistentVolumeName == c.pv {
			vaOK = va.Status.Attached
		}
	}
	for _, v := range nd.Status.VolumesAttached {
		inStatus = inStatus || v.Name == v1.UniqueVolumeName("kubernetes.io/csi/"+attachDriverName+"^"+c.handle)
	}
	return vaOK && inStatus, fmt.Sprintf("VolumeAttachment attached %v, in node.status.volumesAttached %v", vaOK, inStatus)
}
