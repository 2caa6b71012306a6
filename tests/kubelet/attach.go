package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	v1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// attachDriverName is a second hostpath driver, started with -enable-attach: its CSIDriver
// says attachRequired, so its volumes go through the attach/detach controller and the
// external-attacher (ControllerPublish / ControllerUnpublish) before the kubelet stages them.
const attachDriverName = "attach.hostpath.csi.k8s.io"

// attachCSIDriver: attach required, and the kubelet refreshes CSINode allocatable counts on
// ResourceExhausted attach errors (nodeAllocatableUpdatePeriodSeconds, which
// VerifyExhaustedResource needs).
func attachCSIDriver() *storagev1.CSIDriver {
	t, f := true, false
	period := int64(10)
	return &storagev1.CSIDriver{
		ObjectMeta: metav1.ObjectMeta{Name: attachDriverName},
		Spec: storagev1.CSIDriverSpec{
			AttachRequired:                     &t,
			PodInfoOnMount:                     &f,
			NodeAllocatableUpdatePeriodSeconds: &period,
			VolumeLifecycleModes:               []storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent},
		},
	}
}

// attachSide is what a cluster runs for an attach-required driver, next to a node's kubelet:
// the driver and its node-driver-registrar (a DaemonSet), the external-attacher (the
// driver's controller Deployment) and the attach/detach controller (kube-controller-manager)
// with the node's plugin (kcsi or upstream).
type attachSide struct {
	n                                       *node
	dir, socket, log                        string
	driver, registrar, attacher, controller *exec.Cmd
	csi                                     *grpc.ClientConn
}

// startAttach starts the attach side with the driver's extra flags (e.g. -attach-limit=1) and
// waits until the kubelet registered the driver.
func (n *node) startAttach(ctx context.Context, driverFlags ...string) (*attachSide, error) {
	if _, err := n.s.client.StorageV1().CSIDrivers().Create(ctx, attachCSIDriver(), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	dir, err := os.MkdirTemp(n.dir, "attach-")
	if err != nil {
		return nil, err
	}
	a := &attachSide{n: n, dir: dir, socket: filepath.Join(n.root, "plugins", attachDriverName, "csi.sock"), log: filepath.Join(dir, "driver.log")}
	if err := os.MkdirAll(filepath.Dir(a.socket), 0o750); err != nil {
		return nil, err
	}
	args := append([]string{"--endpoint=unix://" + a.socket, "--nodeid=" + n.name, "--statedir=" + filepath.Join(dir, "state"),
		"--drivername=" + attachDriverName, "-enable-attach", "-v=5"}, driverFlags...)
	if a.driver, err = startProc(a.log, n.s.hostpath, args...); err != nil {
		return nil, fmt.Errorf("attach driver: %w", err)
	}
	if err := waitFor(ctx, 20*time.Second, "the attach driver's socket", func() (bool, error) {
		_, err := os.Stat(a.socket)
		return err == nil, nil
	}); err != nil {
		a.stop()
		return nil, err
	}
	if a.csi, err = grpc.NewClient("unix://"+a.socket, grpc.WithTransportCredentials(insecure.NewCredentials())); err != nil {
		a.stop()
		return nil, err
	}
	if a.registrar, err = startProc(filepath.Join(dir, "registrar.log"), n.s.registrar, "--csi-address="+a.socket,
		"--kubelet-registration-path="+a.socket, "--plugin-registration-path="+filepath.Join(n.root, "plugins_registry"), "-v=3"); err != nil {
		a.stop()
		return nil, err
	}
	if a.attacher, err = startProc(filepath.Join(dir, "external-attacher.log"), n.s.attacher, "--csi-address="+a.socket,
		"--kubeconfig="+n.s.kubeconfig, "--v=5"); err != nil {
		a.stop()
		return nil, err
	}
	if err := a.startController(); err != nil {
		a.stop()
		return nil, err
	}
	if err := waitFor(ctx, 60*time.Second, n.name+"'s CSINode listing "+attachDriverName, func() (bool, error) {
		return n.csiNodeHas(ctx, attachDriverName)
	}); err != nil {
		a.stop()
		return nil, err
	}
	return a, nil
}

func (n *node) csiNodeHas(ctx context.Context, driver string) (bool, error) {
	cn, err := n.s.client.StorageV1().CSINodes().Get(ctx, n.name, metav1.GetOptions{})
	if err != nil {
		return false, ignoreNotFound(err)
	}
	for _, d := range cn.Spec.Drivers {
		if d.Name == driver {
			return true, nil
		}
	}
	return false, nil
}

func (a *attachSide) startController() error {
	var err error
	a.controller, err = startProc(filepath.Join(a.dir, "attachdetach-controller.log"), a.n.s.self, "controller",
		"-plugin", a.n.plugin, "-kubeconfig", a.n.s.kubeconfig, "-v=4")
	return err
}

func (a *attachSide) stopController() {
	stopProc(a.controller)
	a.controller = nil
}

// stop stops everything; the kubelet deregisters the driver when the registrar's socket goes.
func (a *attachSide) stop() {
	a.stopController()
	stopProc(a.attacher)
	stopProc(a.registrar)
	if a.csi != nil {
		a.csi.Close()
	}
	stopProc(a.driver)
	unmountUnder(a.dir)
	detachLoopsUnder(a.dir)
	waitFor(context.Background(), 30*time.Second, "the attach driver deregistered", func() (bool, error) {
		has, err := a.n.csiNodeHas(context.Background(), attachDriverName)
		return !has, err
	})
}

func (a *attachSide) mark() logMark { return markOf(a.log) }

// attachmentName is csi-<sha256(handle+driver+node)>, as both plugins name VolumeAttachments.
func (a *attachSide) attachmentName(handle string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(handle+attachDriverName+a.n.name)))
}

// normalizer adds the attach driver's attachment names to the node's placeholders.
func (a *attachSide) normalizer(uids, handles map[string]string) *normalizer {
	z := a.n.normalizer(uids, handles)
	extra := []string{}
	for name, h := range handles {
		extra = append(extra, a.attachmentName(h), "<attachment("+name+")>")
	}
	z.pairs = append(extra, z.pairs...)
	return z
}

// observe records, under prefix, the VolumeAttachments of the node, the CSI controller and
// node requests the attach driver received since m, and the node's volumesAttached /
// volumesInUse.
func (a *attachSide) observe(ctx context.Context, o *observation, prefix string, m logMark, z *normalizer) {
	compared, info := z.callLines(callsIn(a.log, m))
	o.add(prefix+" attach driver requests", compared...)
	o.add("info: "+prefix+" attach driver other calls", info...)
	o.add(prefix+" volume attachments", a.attachmentLines(ctx, z)...)
	o.add(prefix+" node volumes", a.nodeVolumeLines(ctx, z)...)
}

func (a *attachSide) attachmentLines(ctx context.Context, z *normalizer) []string {
	list, err := a.n.s.client.StorageV1().VolumeAttachments().List(ctx, metav1.ListOptions{})
	if err != nil {
		return []string{"VolumeAttachments: " + err.Error()}
	}
	var lines []string
	for _, va := range list.Items {
		if va.Spec.NodeName != a.n.name {
			continue
		}
		st := va.Status
		if st.AttachError != nil {
			st.AttachError.Time = metav1.Time{} // when, not what
		}
		if st.DetachError != nil {
			st.DetachError.Time = metav1.Time{}
		}
		spec, _ := json.Marshal(va.Spec)
		status, _ := json.Marshal(st)
		lines = append(lines, z.apply(fmt.Sprintf("%s finalizers=%v deleting=%v spec=%s status=%s",
			va.Name, va.Finalizers, va.DeletionTimestamp != nil, spec, status)))
	}
	sort.Strings(lines)
	return lines
}

func (a *attachSide) nodeVolumeLines(ctx context.Context, z *normalizer) []string {
	nd, err := a.n.s.client.CoreV1().Nodes().Get(ctx, a.n.name, metav1.GetOptions{})
	if err != nil {
		return []string{"Node: " + err.Error()}
	}
	var attached, inUse []string
	for _, v := range nd.Status.VolumesAttached {
		attached = append(attached, z.apply(fmt.Sprintf("%s devicePath=%q", v.Name, v.DevicePath)))
	}
	for _, v := range nd.Status.VolumesInUse {
		inUse = append(inUse, z.apply(string(v)))
	}
	sort.Strings(attached)
	sort.Strings(inUse)
	return []string{"volumesAttached [" + strings.Join(attached, ", ") + "]", "volumesInUse [" + strings.Join(inUse, ", ") + "]"}
}

// waitAttachment waits until the VolumeAttachment of handle satisfies done.
func (a *attachSide) waitAttachment(ctx context.Context, handle, what string, done func(*storagev1.VolumeAttachment) bool) error {
	name := a.attachmentName(handle)
	return waitFor(ctx, podTimeout, what, func() (bool, error) {
		va, err := a.n.s.client.StorageV1().VolumeAttachments().Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return done(nil), nil
		}
		if err != nil {
			return false, err
		}
		return done(va), nil
	})
}

// waitNodeVolumes waits until the node's status lists (attached) or no longer lists the
// volume of handle in volumesAttached.
func (a *attachSide) waitNodeVolumes(ctx context.Context, handle string, attached bool) error {
	want := v1.UniqueVolumeName("kubernetes.io/csi/" + attachDriverName + "^" + handle)
	return waitFor(ctx, podTimeout, fmt.Sprintf("%s in node.status.volumesAttached = %v", want, attached), func() (bool, error) {
		nd, err := a.n.s.client.CoreV1().Nodes().Get(ctx, a.n.name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		found := false
		for _, v := range nd.Status.VolumesAttached {
			found = found || v.Name == want
		}
		return found == attached, nil
	})
}

func isAttached(va *storagev1.VolumeAttachment) bool { return va != nil && va.Status.Attached }
func isGone(va *storagev1.VolumeAttachment) bool     { return va == nil }
