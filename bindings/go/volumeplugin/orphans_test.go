package volumeplugin

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubernetes/pkg/volume"

	"kcsi.dev/kcsi/internal/mountinfo"
	"kcsi.dev/kcsi/volumeplugin/volumeplugintest"
)

// Volumes a killed kubelet left staged (kubernetes/kubernetes#85476), against the real hostpath
// driver and a real kube-apiserver. Every volume is staged, published and unpublished for real
// by one plugin instance; that instance is closed and a new one on the same root plays the
// restarted kubelet. The oracles are the driver's own log of its gRPC calls and its state
// file, the directories on disk and the mount table as the tests read it, never kcsi's
// answers. Each case that expects a volume to stay also has a control volume no pod uses and
// waits for it to be unstaged first, so the cleaner has provably looked (for longer than the
// grace period) at the volume that stayed.

const orphanGrace = time.Second

func TestAfterAKubeletRestart(t *testing.T) {
	volumeplugintest.NeedsRoot(t)
	c := startClusterWithNode(t)
	ctx := context.Background()
	// Staging reads attachRequired from the CSIDriver.
	if _, err := c.client.StorageV1().CSIDrivers().Create(ctx, volumeplugintest.HostpathCSIDriver(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	t.Run("filesystem and block volumes staged but no longer published, which no pod uses, are unstaged", func(t *testing.T) {
		e := newEnvIn(t, c)
		vols := []*stagedVolume{e.stage(t, "orphan-fs", false), e.stage(t, "orphan-block", true)}
		for _, v := range vols {
			e.publish(t, v, "aaaaaaaa-0000-0000-0000-000000000001")
			e.unpublish(t, v)
			if got := e.driverStaged(t, v.handle); len(got) != 1 || got[0] != v.staging {
				t.Fatalf("%s: the driver records it staged at %v, want %s", v.name, got, v.staging)
			}
		}
		e.restartKubelet(t, c)
		restarted := time.Now()
		for _, v := range vols {
			e.waitUnstaged(t, v)
			t.Logf("%s: unstaged %.2f s after the restart (grace period %s)", v.name, time.Since(restarted).Seconds(), orphanGrace)
			if got := e.driverStaged(t, v.handle); len(got) != 0 {
				t.Errorf("%s: the driver still records it staged at %v", v.name, got)
			}
			if _, err := os.Stat(v.staging); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s: %s is still there: %v", v.name, v.staging, err)
			}
		}
		left, err := mountinfo.Under(e.Root)
		if err != nil {
			t.Fatalf("reading the mount table: %v", err)
		}
		for _, p := range left {
			if p != e.Root {
				t.Errorf("%s is still mounted", p)
			}
		}
	})

	t.Run("a volume a pod bound to the node references is never unstaged until the pod is gone", func(t *testing.T) {
		e := newEnvIn(t, c)
		used, control := e.leftStaged(t, "used")
		pod := podUsing(t, c, used)
		e.restartKubelet(t, c)
		e.waitUnstaged(t, control)
		time.Sleep(2 * orphanGrace)
		for _, v := range used {
			if n := len(e.unstageCalls(t, v)); n != 0 {
				t.Errorf("%s: NodeUnstageVolume called %d times while pod %s references it", v.name, n, pod.Name)
			}
			if _, err := os.Stat(v.staging); err != nil {
				t.Errorf("%s: %v", v.name, err)
			}
		}
		zero := int64(0)
		if err := c.client.CoreV1().Pods(pod.Namespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
		for _, v := range used {
			e.waitUnstaged(t, v)
		}
	})

	t.Run("a volume still published to a pod dir is never unstaged", func(t *testing.T) {
		e := newEnvIn(t, c)
		published := []*stagedVolume{e.stage(t, "published-fs", false), e.stage(t, "published-block", true)}
		control := e.stage(t, "control-fs", false)
		for _, v := range published {
			e.publish(t, v, "aaaaaaaa-0000-0000-0000-000000000003")
			e.mapToPod(t, v)
		}
		e.publish(t, control, "aaaaaaaa-0000-0000-0000-000000000003")
		e.unpublish(t, control)
		e.restartKubelet(t, c)
		e.waitUnstaged(t, control)
		time.Sleep(2 * orphanGrace)
		for _, v := range published {
			if n := len(e.unstageCalls(t, v)); n != 0 {
				t.Errorf("%s: NodeUnstageVolume called %d times while it is published", v.name, n)
			}
			if !volumeplugintest.IsMountPoint(t, v.published) {
				t.Errorf("%s: %s is no longer mounted", v.name, v.published)
			}
		}
	})

	// The kubelet removes a pod's volumeDevices entry and its own bind mount of the device
	// before NodeUnpublishVolume, and makes them after NodePublishVolume: killed in between, it
	// never learns of the publish again (the kill the chaos run's seed 7 found).
	t.Run("a block volume left published for a pod that is gone is unpublished, then unstaged", func(t *testing.T) {
		e := newEnvIn(t, c)
		v := e.stage(t, "stranded-block", true)
		e.publish(t, v, "aaaaaaaa-0000-0000-0000-000000000006")
		dev := e.bindDevice(t, v)
		e.restartKubelet(t, c)
		e.waitUnstaged(t, v)
		if n := len(e.calls(t, "NodeUnpublishVolume", v)); n != 1 {
			t.Errorf("NodeUnpublishVolume called %d times, want 1", n)
		}
		for _, p := range []string{dev, v.published} {
			if volumeplugintest.IsMountPoint(t, p) {
				t.Errorf("%s is still mounted", p)
			}
			if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("%s is still there: %v", p, err)
			}
		}
		if got := e.driverStaged(t, v.handle); len(got) != 0 {
			t.Errorf("the driver still records it staged at %v", got)
		}
		if got := e.driverPublished(t, v.handle); len(got) != 0 {
			t.Errorf("the driver still records it published at %v", got)
		}
	})

	t.Run("a block volume published for a pod still bound to the node stays until the pod is gone", func(t *testing.T) {
		e := newEnvIn(t, c)
		v := e.stage(t, "bound-block", true)
		pod := podUsing(t, c, []*stagedVolume{v})
		e.publish(t, v, string(pod.UID))
		control := e.stage(t, "control-block", true)
		e.publish(t, control, "aaaaaaaa-0000-0000-0000-000000000007")
		e.restartKubelet(t, c)
		e.waitUnstaged(t, control)
		time.Sleep(2 * orphanGrace)
		if n := len(e.calls(t, "NodeUnpublishVolume", v)); n != 0 {
			t.Errorf("NodeUnpublishVolume called %d times while its pod is bound to the node", n)
		}
		if !volumeplugintest.IsMountPoint(t, v.published) {
			t.Errorf("%s is no longer mounted", v.published)
		}
		zero := int64(0)
		if err := c.client.CoreV1().Pods(pod.Namespace).Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
		e.waitUnstaged(t, v)
		if volumeplugintest.IsMountPoint(t, v.published) {
			t.Errorf("%s is still mounted after its pod is gone", v.published)
		}
	})

	t.Run("a volume the restarted kubelet stages again is left to the kubelet", func(t *testing.T) {
		e := newEnvIn(t, c)
		again, control := e.leftStaged(t, "again")
		e.restartKubelet(t, c)
		// No pod in the API server references them: the kubelet's own MountDevice (SetUpDevice)
		// is all that makes them its own, as between a new pod's staging and its publishing.
		for _, v := range again {
			e.stageAgain(t, v)
		}
		e.waitUnstaged(t, control)
		time.Sleep(2 * orphanGrace)
		for _, v := range again {
			if n := len(e.unstageCalls(t, v)); n != 0 {
				t.Errorf("%s: NodeUnstageVolume called %d times after the kubelet staged it again", v.name, n)
			}
		}
	})
}

// stagedVolume is a volume made in the driver and staged by the plugin.
type stagedVolume struct {
	name, handle string
	block        bool
	spec         *volume.Spec
	staging      string // the global mount path, or the block staging path
	pod          *v1.Pod
	published    string
}

func (e *env) stage(t *testing.T, name string, block bool) *stagedVolume {
	t.Helper()
	v := &stagedVolume{name: name, block: block, handle: e.CreateVolume(t, name, block)}
	v.spec = volumeplugintest.PVSpec(name, v.handle, block)
	e.stageAgain(t, v)
	return v
}

// leftStaged stages, publishes and unpublishes a filesystem and a block volume named
// <prefix>-fs and <prefix>-block, and a control filesystem volume, as a kubelet killed before
// NodeUnstageVolume leaves them.
func (e *env) leftStaged(t *testing.T, prefix string) (vols []*stagedVolume, control *stagedVolume) {
	t.Helper()
	vols = []*stagedVolume{e.stage(t, prefix+"-fs", false), e.stage(t, prefix+"-block", true)}
	control = e.stage(t, "control-fs", false)
	for _, v := range append(vols, control) {
		e.publish(t, v, "aaaaaaaa-0000-0000-0000-000000000002")
		e.unpublish(t, v)
	}
	return vols, control
}

// stageAgain is the kubelet's MountDevice (SetUpDevice for block) of v.
func (e *env) stageAgain(t *testing.T, v *stagedVolume) {
	t.Helper()
	if v.block {
		bm, err := e.plugin.NewBlockVolumeMapper(v.spec, volumeplugintest.Pod("aaaaaaaa-0000-0000-0000-00000000ffff"))
		if err != nil {
			t.Fatal(err)
		}
		if v.staging, err = bm.(volume.CustomBlockVolumeMapper).SetUpDevice(); err != nil {
			t.Fatal(err)
		}
		return
	}
	a, err := e.plugin.NewDeviceMounter()
	if err != nil {
		t.Fatal(err)
	}
	if v.staging, err = a.GetDeviceMountPath(v.spec); err != nil {
		t.Fatal(err)
	}
	if err := a.MountDevice(v.spec, "", v.staging, volume.DeviceMounterArgs{}); err != nil {
		t.Fatal(err)
	}
}

// publish is the kubelet's SetUp (MapPodDevice) of v in a pod with uid.
func (e *env) publish(t *testing.T, v *stagedVolume, uid string) {
	t.Helper()
	v.pod = volumeplugintest.Pod(uid)
	if v.block {
		bm, err := e.plugin.NewBlockVolumeMapper(v.spec, v.pod)
		if err != nil {
			t.Fatal(err)
		}
		if v.published, err = bm.(volume.CustomBlockVolumeMapper).MapPodDevice(); err != nil {
			t.Fatal(err)
		}
	} else {
		m, err := e.plugin.NewMounter(v.spec, v.pod)
		if err != nil {
			t.Fatal(err)
		}
		if err := m.SetUp(volume.MounterArgs{}); err != nil {
			t.Fatal(err)
		}
		v.published = m.GetPath()
	}
	if !volumeplugintest.IsMountPoint(t, v.published) {
		t.Fatalf("%s: %s is not mounted after publishing", v.name, v.published)
	}
}

// unpublish is the kubelet's TearDown (UnmapPodDevice) of v.
func (e *env) unpublish(t *testing.T, v *stagedVolume) {
	t.Helper()
	if v.block {
		bu, err := e.plugin.NewBlockVolumeUnmapper(v.name, v.pod.UID)
		if err != nil {
			t.Fatal(err)
		}
		if err := bu.(volume.CustomBlockVolumeUnmapper).UnmapPodDevice(); err != nil {
			t.Fatal(err)
		}
	} else {
		u, err := e.plugin.NewUnmounter(v.name, v.pod.UID)
		if err != nil {
			t.Fatal(err)
		}
		if err := u.TearDown(); err != nil {
			t.Fatal(err)
		}
	}
	if volumeplugintest.IsMountPoint(t, v.published) {
		t.Fatalf("%s: %s is still mounted after unpublishing", v.name, v.published)
	}
	if n := len(e.unstageCalls(t, v)); n != 0 {
		t.Fatalf("%s: NodeUnstageVolume called %d times before the restart", v.name, n)
	}
}

// restartKubelet closes the plugin (the kubelet was killed) and starts a new one on the same
// root, with the API server, the way a restarted kubelet does.
func (e *env) restartKubelet(t *testing.T, c *cluster) {
	t.Helper()
	e.plugin.Close()
	e.startPlugin(t, Config{Kubeconfig: c.kubeconfig, OrphanGracePeriod: orphanGrace}, c.client)
}

// podUsing creates, in the API server, a PersistentVolume and a bound claim for each of vols,
// and a pod bound to the node that uses the claims.
func podUsing(t *testing.T, c *cluster, vols []*stagedVolume) *v1.Pod {
	t.Helper()
	ctx := context.Background()
	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "user", Namespace: "default"},
		Spec:       v1.PodSpec{NodeName: volumeplugintest.NodeName, Containers: []v1.Container{{Name: "c", Image: "busybox"}}},
	}
	for _, v := range vols {
		pv := v.spec.PersistentVolume.DeepCopy()
		pv.Spec.Capacity = v1.ResourceList{v1.ResourceStorage: resource.MustParse("16Mi")}
		pv.Spec.ClaimRef = &v1.ObjectReference{Namespace: "default", Name: v.name}
		if _, err := c.client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		pvc := &v1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: v.name, Namespace: "default"},
			Spec: v1.PersistentVolumeClaimSpec{
				AccessModes: pv.Spec.AccessModes, VolumeName: pv.Name, VolumeMode: pv.Spec.VolumeMode,
				Resources: v1.VolumeResourceRequirements{Requests: pv.Spec.Capacity},
			},
		}
		if _, err := c.client.CoreV1().PersistentVolumeClaims("default").Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			c.client.CoreV1().PersistentVolumeClaims("default").Delete(context.Background(), pvc.Name, metav1.DeleteOptions{})
			c.client.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{})
		})
		pod.Spec.Volumes = append(pod.Spec.Volumes, v1.Volume{Name: v.name, VolumeSource: v1.VolumeSource{
			PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{ClaimName: v.name}}})
	}
	pod, err := c.client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		zero := int64(0)
		c.client.CoreV1().Pods("default").Delete(context.Background(), pod.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
	})
	return pod
}

// driverCall is one call the hostpath driver logged at -v=5 ("gRPCCall: {json}").
type driverCall struct {
	Method  string
	Request map[string]any
	Error   string
}

// mapToPod makes the pod's pods/<uid>/volumeDevices entry for the block volume v, as the
// kubelet's MapBlockVolume does after MapPodDevice.
func (e *env) mapToPod(t *testing.T, v *stagedVolume) {
	t.Helper()
	dir := filepath.Join(e.Root, "pods", string(v.pod.UID), "volumeDevices", "kubernetes.io~csi")
	if err := os.MkdirAll(dir, 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(v.published, filepath.Join(dir, v.name)); err != nil {
		t.Fatal(err)
	}
}

// bindDevice bind-mounts the block volume v's published device at the plugin's
// volumeDevices/<spec>/dev/<uid>, as the kubelet's MapBlockVolume does, and returns that path.
func (e *env) bindDevice(t *testing.T, v *stagedVolume) string {
	t.Helper()
	dev := filepath.Join(e.Root, "plugins", "kubernetes.io", "csi", "volumeDevices", v.name, "dev", string(v.pod.UID))
	if err := os.MkdirAll(filepath.Dir(dev), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dev, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount(v.published, dev, "", unix.MS_BIND, ""); err != nil {
		t.Fatalf("bind-mounting %s at %s: %v", v.published, dev, err)
	}
	t.Cleanup(func() { unix.Unmount(dev, unix.MNT_DETACH) })
	return dev
}

// unstageCalls are the NodeUnstageVolume calls of v the driver logged.
func (e *env) unstageCalls(t *testing.T, v *stagedVolume) []driverCall {
	t.Helper()
	return e.calls(t, "NodeUnstageVolume", v)
}

// calls are the calls of method (NodeUnstageVolume, …) with v's handle the driver logged.
func (e *env) calls(t *testing.T, method string, v *stagedVolume) []driverCall {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.Root, "driver.log"))
	if err != nil {
		t.Fatal(err)
	}
	var calls []driverCall
	for _, line := range strings.Split(string(b), "\n") {
		_, text, ok := strings.Cut(line, "gRPCCall: ")
		if !ok {
			continue
		}
		var c driverCall
		if err := json.Unmarshal([]byte(text), &c); err != nil {
			t.Fatalf("the driver's log line %q: %v", line, err)
		}
		if c.Method == "/csi.v1.Node/"+method && c.Request["volume_id"] == v.handle {
			calls = append(calls, c)
		}
	}
	return calls
}

// waitUnstaged waits until the driver logged a NodeUnstageVolume of v at its staging path that
// succeeded.
func (e *env) waitUnstaged(t *testing.T, v *stagedVolume) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		for _, c := range e.unstageCalls(t, v) {
			if c.Request["staging_target_path"] == v.staging && c.Error == "" {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: no successful NodeUnstageVolume at %s within 30 s: %+v", v.name, v.staging, e.unstageCalls(t, v))
		}
	}
}

// driverStaged is where the driver's state file records the volume handle staged.
func (e *env) driverStaged(t *testing.T, handle string) []string {
	t.Helper()
	return e.driverState(t, handle).Staged
}

// driverPublished is where the driver's state file records the volume handle published.
func (e *env) driverPublished(t *testing.T, handle string) []string {
	t.Helper()
	return e.driverState(t, handle).Published
}

type driverVolume struct {
	VolID     string
	Staged    []string
	Published []string
}

func (e *env) driverState(t *testing.T, handle string) driverVolume {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(e.State, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	var state struct{ Volumes []driverVolume }
	if err := json.Unmarshal(b, &state); err != nil {
		t.Fatalf("the driver's state file: %v", err)
	}
	for _, v := range state.Volumes {
		if v.VolID == handle {
			return v
		}
	}
	t.Fatalf("the driver's state file has no volume %s", handle)
	return driverVolume{}
}

// Without an API server kcsi cannot tell whether a pod uses a volume, so one staged before the
// restart stays staged (`kcsi list` reports it).
func TestWithoutAnAPIServerAVolumeStagedBeforeARestartStaysStaged(t *testing.T) {
	e := newEnv(t)
	v := e.stage(t, "standalone-fs", false)
	e.publish(t, v, "aaaaaaaa-0000-0000-0000-000000000005")
	e.unpublish(t, v)
	e.plugin.Close()
	e.startPlugin(t, Config{CSIDrivers: []any{volumeplugintest.HostpathCSIDriver()}, OrphanGracePeriod: time.Millisecond}, nil)
	time.Sleep(time.Second)
	if n := len(e.unstageCalls(t, v)); n != 0 {
		t.Errorf("NodeUnstageVolume called %d times without an API server", n)
	}
	if got := e.driverStaged(t, v.handle); len(got) != 1 {
		t.Errorf("the driver records it staged at %v", got)
	}
}
