package cluster

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
	"kcsi.dev/kcsi/tests/kubelet/pkg/observe"
)

// AttachDriverName is a second hostpath driver, one that needs attaching: the main driver
// keeps attachRequired: false (hostpath's -enable-attach makes NodeStage refuse a volume that
// was not ControllerPublished).
const AttachDriverName = "attach.hostpath.csi.k8s.io"

// AttachCSIDriver is the attach driver's CSIDriver object.
func AttachCSIDriver() *storagev1.CSIDriver {
	d := HostpathCSIDriver()
	t := true
	d.Name = AttachDriverName
	d.Spec.AttachRequired = &t
	d.Spec.VolumeLifecycleModes = []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}
	return d
}

// AttachStack is what attach-required volumes need around a node, as a cluster runs it: the
// attach driver (hostpath -enable-attach) with its node-driver-registrar, the real
// external-attacher for it, and the real attach/detach controller with the node's plugin
// (kcsi's or upstream's), which the kubelet (enableControllerAttachDetach: true) waits on.
type AttachStack struct {
	n                                       *Node
	Dir, Socket, State, Log, ControllerLog  string
	Driver, Registrar, Attacher, Controller *exec.Cmd
	CSI                                     *grpc.ClientConn
	attacherBin                             string // the external-attacher's binary
}

func (n *Node) newAttachStack() *AttachStack {
	dir := filepath.Join(n.Dir, "attach")
	return &AttachStack{n: n, Dir: dir, Socket: filepath.Join(n.Root, "plugins", AttachDriverName, "csi.sock"),
		State: filepath.Join(dir, "state"), Log: filepath.Join(dir, "driver.log"),
		ControllerLog: filepath.Join(dir, "controller.log")}
}

// Start starts the stack and waits until the kubelet lists the driver in its CSINode.
func (a *AttachStack) Start(ctx context.Context) error {
	for _, d := range []string{filepath.Dir(a.Socket), a.State, filepath.Join(a.Dir, "flex")} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			return err
		}
	}
	if err := a.StartDriver(ctx, 0); err != nil {
		return err
	}
	var err error
	if a.Registrar, err = StartProc(filepath.Join(a.Dir, "registrar.log"), a.n.Suite.Registrar, "--csi-address="+a.Socket,
		"--kubelet-registration-path="+a.Socket, "--plugin-registration-path="+filepath.Join(a.n.Root, "plugins_registry"), "-v=3"); err != nil {
		return fmt.Errorf("node-driver-registrar for %s: %w", AttachDriverName, err)
	}
	if err := a.StartController(); err != nil {
		return err
	}
	return WaitFor(ctx, 60*time.Second, AttachDriverName+" in the CSINode of "+a.n.Name, func() (bool, error) {
		cn, err := a.n.Suite.Client.StorageV1().CSINodes().Get(ctx, a.n.Name, metav1.GetOptions{})
		if err != nil {
			return false, IgnoreNotFound(err)
		}
		return HasDriver(cn, AttachDriverName), nil
	})
}

// StartDriver starts the driver (attachLimit > 0: hostpath's -attach-limit) and its
// external-attacher, which exits when it loses the driver, so it restarts with it.
func (a *AttachStack) StartDriver(ctx context.Context, attachLimit int) error {
	args := []string{"--endpoint=unix://" + a.Socket, "--nodeid=" + a.n.Name, "--statedir=" + a.State,
		"--drivername=" + AttachDriverName, "-enable-attach", "-v=5"}
	if attachLimit > 0 {
		args = append(args, fmt.Sprintf("-attach-limit=%d", attachLimit))
	}
	var err error
	if a.Driver, err = StartProc(a.Log, a.n.Suite.Hostpath, args...); err != nil {
		return fmt.Errorf("hostpath driver %s: %w", AttachDriverName, err)
	}
	// hostpath removes a stale socket and listens anew: dial only once the socket is there.
	if err := WaitFor(ctx, 20*time.Second, AttachDriverName+"'s socket", func() (bool, error) {
		_, err := os.Stat(a.Socket)
		return err == nil, nil
	}); err != nil {
		return err
	}
	if a.CSI == nil {
		if a.CSI, err = grpc.NewClient("unix://"+a.Socket, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
			return err
		}
	}
	if err := WaitFor(ctx, 20*time.Second, AttachDriverName+" answering Probe", func() (bool, error) {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err := csi.NewIdentityClient(a.CSI).Probe(pctx, &csi.ProbeRequest{})
		return err == nil, nil
	}); err != nil {
		return err
	}
	if a.attacherBin, err = a.n.Suite.Peer("attacher"); err != nil {
		return err
	}
	if a.Attacher, err = StartProc(filepath.Join(a.Dir, "external-attacher.log"), a.attacherBin, "--csi-address="+a.Socket,
		"--kubeconfig="+a.n.Suite.KubeconfigOf(User(AttacherIdentity.NS, AttacherIdentity.SA)), "-v=3"); err != nil {
		return fmt.Errorf("external-attacher: %w", err)
	}
	return nil
}

// RestartDriver restarts the driver (and its external-attacher) with another attach limit.
func (a *AttachStack) RestartDriver(ctx context.Context, attachLimit int) error {
	StopProc(a.Attacher)
	StopProc(a.Driver)
	return a.StartDriver(ctx, attachLimit)
}

// StartController starts the attach/detach controller with the node's plugin.
func (a *AttachStack) StartController() error {
	var err error
	a.Controller, err = StartProc(a.ControllerLog, a.n.Suite.E2E, "controller", "-plugin", a.n.Plugin,
		"-kubeconfig", a.n.Suite.KubeconfigOf(User(ControllerSA[0], ControllerSA[1])), "-flex-dir", filepath.Join(a.Dir, "flex"), "-v=5")
	if err != nil {
		return fmt.Errorf("attach/detach controller: %w", err)
	}
	return nil
}

// Stop stops the stack's processes.
func (a *AttachStack) Stop() {
	StopProc(a.Controller)
	StopProc(a.Attacher)
	StopProc(a.Registrar)
	if a.CSI != nil {
		a.CSI.Close()
	}
	StopProc(a.Driver)
}

// AttachClaim is a claim on the attach driver.
func (n *Node) AttachClaim(ctx context.Context, name string) (*Claim, error) {
	return n.createClaimOn(ctx, n.Attach.CSI, AttachDriverName, name, false)
}

// Snapshot adds what attaching shows: the requests the attach driver got, the node's
// VolumeAttachments and node.status.volumesAttached / volumesInUse.
func (a *AttachStack) Snapshot(ctx context.Context, o *observe.Observation, prefix string, m observe.Mark, z *observe.Normalizer) {
	calls, err := observe.ReadCalls(a.Log, m.Attach)
	if err != nil {
		o.Fail(prefix+" the attach driver's requests", err)
	}
	// The controller attaches and detaches volumes in parallel: compared volume by volume
	// (by their normalized names), each volume's requests in their order.
	volume := func(c observe.Call) string { id, _ := c.Request["volume_id"].(string); return z.Apply(id) }
	sort.SliceStable(calls, func(i, j int) bool { return volume(calls[i]) < volume(calls[j]) })
	o.AddCalls(prefix+" attach driver", calls, m, z)
	o.Add(prefix+" volume attachments", a.attachmentLines(ctx, z)...)
	o.Add(prefix+" node attach status", a.nodeAttachLines(ctx, z)...)
}

// Attachments lists the node's VolumeAttachments.
func (a *AttachStack) Attachments(ctx context.Context) ([]storagev1.VolumeAttachment, error) {
	all, err := a.n.Suite.Client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var mine []storagev1.VolumeAttachment
	for _, va := range all.Items {
		if va.Spec.NodeName == a.n.Name {
			mine = append(mine, va)
		}
	}
	return mine, nil
}

func (a *AttachStack) attachmentLines(ctx context.Context, z *observe.Normalizer) []string {
	vas, err := a.Attachments(ctx)
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
		lines = append(lines, z.Apply(line))
	}
	sort.Strings(lines)
	return lines
}

func (a *AttachStack) nodeAttachLines(ctx context.Context, z *observe.Normalizer) []string {
	nd, err := a.n.Suite.Client.CoreV1().Nodes().Get(ctx, a.n.Name, metav1.GetOptions{})
	if err != nil {
		return []string{"Node: " + err.Error()}
	}
	var attached, inUse []string
	for _, v := range nd.Status.VolumesAttached {
		attached = append(attached, z.Apply(fmt.Sprintf("%s devicePath %q", v.Name, v.DevicePath)))
	}
	for _, v := range nd.Status.VolumesInUse {
		inUse = append(inUse, z.Apply(string(v)))
	}
	sort.Strings(attached)
	sort.Strings(inUse)
	return []string{"volumesAttached [" + strings.Join(attached, ", ") + "]", "volumesInUse [" + strings.Join(inUse, ", ") + "]"}
}

// WaitDetached waits until the node has no VolumeAttachment and the controller and the
// kubelet have both let go of every attached volume in the Node's status.
func (a *AttachStack) WaitDetached(ctx context.Context) error {
	return WaitFor(ctx, 2*time.Minute, "every VolumeAttachment of "+a.n.Name+" deleted and its node status clear", func() (bool, error) {
		vas, err := a.Attachments(ctx)
		if err != nil || len(vas) > 0 {
			return false, err
		}
		nd, err := a.n.Suite.Client.CoreV1().Nodes().Get(ctx, a.n.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return len(nd.Status.VolumesAttached) == 0 && len(nd.Status.VolumesInUse) == 0, nil
	})
}

// Attached reports whether the claim's VolumeAttachment says attached, and the volume is in
// node.status.volumesAttached.
func (a *AttachStack) Attached(ctx context.Context, c *Claim) (bool, string) {
	vas, err := a.Attachments(ctx)
	if err != nil {
		return false, err.Error()
	}
	nd, err := a.n.Suite.Client.CoreV1().Nodes().Get(ctx, a.n.Name, metav1.GetOptions{})
	if err != nil {
		return false, err.Error()
	}
	vaOK, inStatus := false, false
	for _, va := range vas {
		if va.Spec.Source.PersistentVolumeName != nil && *va.Spec.Source.PersistentVolumeName == c.PV {
			vaOK = va.Status.Attached
		}
	}
	for _, v := range nd.Status.VolumesAttached {
		inStatus = inStatus || v.Name == v1.UniqueVolumeName("kubernetes.io/csi/"+AttachDriverName+"^"+c.Handle)
	}
	return vaOK && inStatus, fmt.Sprintf("VolumeAttachment attached %v, in node.status.volumesAttached %v", vaOK, inStatus)
}
