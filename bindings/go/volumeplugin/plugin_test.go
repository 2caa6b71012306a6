package volumeplugin

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/kubernetes/pkg/volume"
	volumetest "k8s.io/kubernetes/pkg/volume/testing"
	volumetypes "k8s.io/kubernetes/pkg/volume/util/types"
	"kcsi.dev/kcsi"
	"kcsi.dev/kcsi/volumeplugin/volumeplugintest"
)

func TestProbeVolumePluginsReturnsOnePluginNamedKubernetesIoCSI(t *testing.T) {
	ps := ProbeVolumePlugins(Config{})
	if len(ps) != 1 || ps[0].GetPluginName() != "kubernetes.io/csi" {
		t.Fatalf("got %d plugins, first %q", len(ps), ps[0].GetPluginName())
	}
	// The kubelet finds capabilities by type assertion on the plugin it got.
	for name, ok := range map[string]bool{
		"AttachableVolumePlugin":      is[volume.AttachableVolumePlugin](ps[0]),
		"DeviceMountableVolumePlugin": is[volume.DeviceMountableVolumePlugin](ps[0]),
		"BlockVolumePlugin":           is[volume.BlockVolumePlugin](ps[0]),
		"NodeExpandableVolumePlugin":  is[volume.NodeExpandableVolumePlugin](ps[0]),
	} {
		if !ok {
			t.Errorf("the probed plugin is not a %s", name)
		}
	}
}

func is[T any](v any) bool { _, ok := v.(T); return ok }

func TestErrorClassesBecomeTheKubeletsTypes(t *testing.T) {
	uncertain := kubeletError(&kcsi.Error{Op: "Mounter.SetUp", Result: kcsi.ResultTimeout, Class: kcsi.ClassUncertain, Message: "deadline"})
	if !volumetypes.IsUncertainProgressError(uncertain) || volumetypes.IsOperationFinishedError(uncertain) {
		t.Errorf("uncertain: got %T %v", uncertain, uncertain)
	}
	transient := kubeletError(&kcsi.Error{Op: "Mounter.SetUp", Result: kcsi.ResultNotFound, Class: kcsi.ClassTransient, Message: "driver not registered"})
	var tf *volumetypes.TransientOperationFailure
	if !errors.As(transient, &tf) || !strings.Contains(transient.Error(), "driver not registered") {
		t.Errorf("transient: got %T %v", transient, transient)
	}
	final := kubeletError(&kcsi.Error{Op: "Mounter.SetUp", Result: kcsi.ResultDriver, Class: kcsi.ClassFinal, GRPCCode: 3, Message: "bad"})
	if !errors.Is(final, kcsi.ErrDriver) || !volumetypes.IsOperationFinishedError(final) {
		t.Errorf("final: got %T %v", final, final)
	}
	if kubeletError(nil) != nil {
		t.Error("nil must stay nil")
	}
}

func TestNodeExpandErrorsGetUpstreamsTypes(t *testing.T) {
	if err := expandError(&kcsi.Error{Result: kcsi.ResultNotSupported, GRPCCode: -1}); !volumetypes.IsOperationNotSupportedError(err) {
		t.Errorf("no EXPAND_VOLUME: got %T", err)
	}
	if err := expandError(&kcsi.Error{Result: kcsi.ResultDriver, GRPCCode: 9}); !volumetypes.IsFailedPreconditionError(err) {
		t.Errorf("in use: got %T", err)
	}
	if err := expandError(&kcsi.Error{Result: kcsi.ResultDriver, GRPCCode: 11}); !volumetypes.IsInfeasibleError(err) {
		t.Errorf("out of range: got %T", err)
	}
}

func TestCallsBeforeInitFailWithoutPanicking(t *testing.T) {
	p := New(Config{})
	if _, err := p.GetVolumeName(volumeplugintest.PVSpec("pv", "h", false)); !errors.Is(err, errNotInitialized) {
		t.Errorf("GetVolumeName: %v", err)
	}
	if p.CanSupport(volumeplugintest.PVSpec("pv", "h", false)) {
		t.Error("CanSupport before Init")
	}
	if err := p.RegistrationHandler().ValidatePlugin(volumeplugintest.DriverName, "/x.sock", []string{"1.0.0"}); !errors.Is(err, errNotInitialized) {
		t.Errorf("ValidatePlugin: %v", err)
	}
	p.RegistrationHandler().DeRegisterPlugin(volumeplugintest.DriverName, "/x.sock")
}

func TestBadInputReturnsErrorsNotPanics(t *testing.T) {
	e := newEnv(t)
	p := e.plugin
	hostPath := volume.NewSpecFromVolume(&v1.Volume{Name: "hp", VolumeSource: v1.VolumeSource{HostPath: &v1.HostPathVolumeSource{Path: "/tmp"}}})
	if _, err := p.GetVolumeName(nil); err == nil {
		t.Error("GetVolumeName(nil)")
	}
	if _, err := p.GetVolumeName(hostPath); err == nil {
		t.Error("GetVolumeName of a hostPath volume")
	}
	if p.CanSupport(nil) || p.CanSupport(hostPath) || p.CanSupport(&volume.Spec{}) {
		t.Error("CanSupport accepted a non-CSI spec")
	}
	if _, err := p.NewMounter(nil, volumeplugintest.Pod("u1")); err == nil {
		t.Error("NewMounter(nil spec)")
	}
	if _, err := p.NewMounter(hostPath, volumeplugintest.Pod("u1")); err == nil {
		t.Error("NewMounter of a hostPath volume")
	}
	if _, err := p.NewMounter(volumeplugintest.PVSpec("pv", "h", false), nil); err == nil {
		t.Error("NewMounter(nil pod)")
	}
	if _, err := p.NewMounter(volumeplugintest.PVSpec("pv", "h", false), volumeplugintest.Pod("")); err == nil {
		t.Error("NewMounter of a pod without UID")
	}
	if _, err := p.NewBlockVolumeMapper(volumeplugintest.PVSpec("pv", "h", true), volumeplugintest.Pod("")); err == nil {
		t.Error("NewBlockVolumeMapper of a pod without UID")
	}
	if _, err := p.NewUnmounter("pv", ""); err == nil {
		t.Error("NewUnmounter without pod UID")
	}
	if _, err := p.NewUnmounter("no-such-volume", "u1"); err == nil {
		t.Error("NewUnmounter of a volume never set up")
	}
	if _, err := p.CanAttach(nil); err == nil {
		t.Error("CanAttach(nil)")
	}
	if _, err := p.SupportsSELinuxContextMount(hostPath); err == nil {
		t.Error("SupportsSELinuxContextMount of a hostPath volume")
	}
	if _, err := p.NodeExpand(volume.NodeResizeOptions{}); err == nil {
		t.Error("NodeExpand without spec")
	}
	if _, err := p.ConstructVolumeSpec("pv", filepath.Join(e.Root, "pods", "u1", "volumes", "kubernetes.io~csi", "pv")); err == nil {
		t.Error("ConstructVolumeSpec without vol_data.json")
	}
	a, err := p.NewAttacher()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.GetDeviceMountPath(nil); err == nil {
		t.Error("GetDeviceMountPath(nil)")
	}
	if _, err := a.Attach(volumeplugintest.PVSpec("pv", "h", false), volumeplugintest.NodeName); err == nil {
		t.Error("Attach must be refused on the node")
	}
}

func TestQueriesAnswerLikeUpstream(t *testing.T) {
	e := newEnv(t)
	p := e.plugin
	pv := volumeplugintest.PVSpec("pv", `odd"handle\with/chars-ü`, false)
	name, err := p.GetVolumeName(pv)
	if err != nil || name != volumeplugintest.DriverName+`^odd"handle\with/chars-ü` {
		t.Errorf("GetVolumeName = %q, %v", name, err)
	}
	inline := volume.NewSpecFromVolume(&v1.Volume{Name: "eph", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: volumeplugintest.DriverName}}})
	if _, err := p.GetVolumeName(inline); err == nil {
		t.Error("GetVolumeName of an inline volume must fail, as upstream")
	}
	if !p.CanSupport(pv) || !p.CanSupport(inline) {
		t.Error("CanSupport")
	}
	if ok, err := p.CanAttach(pv); err != nil || ok {
		t.Errorf("CanAttach with attachRequired: false = %v, %v", ok, err)
	}
	if ok, err := p.CanDeviceMount(pv); err != nil || !ok {
		t.Errorf("CanDeviceMount(pv) = %v, %v", ok, err)
	}
	if ok, err := p.CanDeviceMount(inline); err != nil || ok {
		t.Errorf("CanDeviceMount(inline) = %v, %v", ok, err)
	}
	if p.RequiresRemount(pv) {
		t.Error("RequiresRemount without requiresRepublish")
	}
	if ok, err := p.SupportsSELinuxContextMount(pv); err != nil || ok {
		t.Errorf("SupportsSELinuxContextMount = %v, %v", ok, err)
	}
}

// GetVolumeName and CanSupport answer common specs in Go: the answers (and whether there is an
// error) must be kcsi's own, through the C API with the whole spec, and upstream's.
func TestGoAnsweredQueriesAgreeWithKcsiAndUpstream(t *testing.T) {
	p := New(Config{CSIDrivers: []any{volumeplugintest.HostpathCSIDriver()}})
	t.Cleanup(p.Close)
	volumetest.NewFakeKubeletVolumeHostWithCSINodeName(t, t.TempDir(), nil, []volume.VolumePlugin{p}, volumeplugintest.NodeName, nil, nil)
	up := volumeplugintest.UpstreamPlugin(t, t.TempDir())
	inline := &v1.Volume{Name: "eph", VolumeSource: v1.VolumeSource{CSI: &v1.CSIVolumeSource{Driver: volumeplugintest.DriverName}}}
	both := volumeplugintest.PVSpec("both", "h", false)
	both.Volume = inline
	specs := map[string]*volume.Spec{
		"csi pv":         volumeplugintest.PVSpec("pv", "h", false),
		"odd handle":     volumeplugintest.PVSpec("pv", `odd"handle\with/chars-ü^x`, false),
		"empty handle":   volumeplugintest.PVSpec("pv", "", false),
		"inline":         volume.NewSpecFromVolume(inline),
		"pv without csi": volume.NewSpecFromPersistentVolume(&v1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "nfs"}}, false),
		"both":           both,
		"empty":          {},
	}
	for name, spec := range specs {
		s, err := kcsiSpec(spec)
		var kName string
		var kNameErr error
		kSupport := false
		if err == nil {
			kName, kNameErr = p.Host().VolumeName(s)
			kSupport, _ = p.Host().CanSupport(s)
		} else {
			kNameErr = err
		}
		got, gotErr := p.GetVolumeName(spec)
		upName, upErr := up.GetVolumeName(spec)
		if got != kName || (gotErr == nil) != (kNameErr == nil) || got != upName || (gotErr == nil) != (upErr == nil) {
			t.Errorf("%s: GetVolumeName = %q, %v; kcsi's C API %q, %v; upstream %q, %v", name, got, gotErr, kName, kNameErr, upName, upErr)
		}
		if p.CanSupport(spec) != kSupport || kSupport != up.CanSupport(spec) {
			t.Errorf("%s: CanSupport = %v; kcsi's C API %v; upstream %v", name, p.CanSupport(spec), kSupport, up.CanSupport(spec))
		}
	}
}

func TestPersistentVolumeStagesPublishesAndTearsDownThroughTheDriver(t *testing.T) {
	e := newEnv(t)
	p := e.plugin
	handle := e.CreateVolume(t, "vol-fs", false)
	spec := volumeplugintest.PVSpec("pv-fs", handle, false)
	pod := volumeplugintest.Pod("11111111-2222-3333-4444-555555555555")

	a, err := p.NewDeviceMounter()
	if err != nil {
		t.Fatal(err)
	}
	dmp, err := a.GetDeviceMountPath(spec)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(dmp, filepath.Join(e.Root, "plugins/kubernetes.io/csi", volumeplugintest.DriverName)) || filepath.Base(dmp) != "globalmount" {
		t.Errorf("device mount path %s", dmp)
	}
	if err := a.MountDevice(spec, "", dmp, volume.DeviceMounterArgs{}); err != nil {
		t.Fatal(err)
	}
	m, err := p.NewMounter(spec, pod)
	if err != nil {
		t.Fatal(err)
	}
	want := filepath.Join(e.Root, "pods", string(pod.UID), "volumes/kubernetes.io~csi/pv-fs/mount")
	if m.GetPath() != want {
		t.Errorf("GetPath = %s, want %s", m.GetPath(), want)
	}
	if err := m.SetUp(volume.MounterArgs{}); err != nil {
		t.Fatal(err)
	}
	if !volumeplugintest.IsMountPoint(t, want) {
		t.Fatalf("%s is not mounted after SetUp", want)
	}
	if attrs := m.GetAttributes(); attrs.ReadOnly || !attrs.Managed {
		t.Errorf("attributes %+v", attrs)
	}
	if err := os.WriteFile(filepath.Join(want, "hello"), []byte("through the bind mount"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(e.State, handle, "hello")); err != nil || string(b) != "through the bind mount" {
		t.Errorf("the file did not land in the driver's volume: %q, %v", b, err)
	}
	mt, err := m.GetMetrics()
	if err != nil || mt.Capacity == nil || mt.Capacity.Value() <= 0 || mt.Time.IsZero() {
		t.Errorf("GetMetrics = %+v, %v", mt, err)
	}

	rv, err := p.ConstructVolumeSpec("pv-fs", filepath.Dir(want))
	if err != nil {
		t.Fatal(err)
	}
	if rv.Spec.PersistentVolume == nil || rv.Spec.PersistentVolume.Spec.CSI.VolumeHandle != handle || rv.Spec.Name() != "pv-fs" {
		t.Errorf("reconstructed %+v", rv.Spec)
	}
	if name, err := p.GetVolumeName(rv.Spec); err != nil || name != volumeplugintest.DriverName+"^"+handle {
		t.Errorf("reconstructed volume name %q, %v", name, err)
	}

	u, err := p.NewUnmounter("pv-fs", pod.UID)
	if err != nil {
		t.Fatal(err)
	}
	if u.GetPath() != want {
		t.Errorf("unmounter path %s", u.GetPath())
	}
	if err := u.TearDown(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(want)); !os.IsNotExist(err) {
		t.Errorf("the volume dir is still there after TearDown: %v", err)
	}
	du, err := p.NewDeviceUnmounter()
	if err != nil {
		t.Fatal(err)
	}
	if err := du.UnmountDevice(dmp); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(dmp)); !os.IsNotExist(err) {
		t.Errorf("the global mount dir is still there after UnmountDevice: %v", err)
	}
}

func TestSetUpWithoutARegisteredDriverIsTransient(t *testing.T) {
	e := newEnv(t)
	e.plugin.RegistrationHandler().DeRegisterPlugin(volumeplugintest.DriverName, e.Socket)
	m, err := e.plugin.NewMounter(volumeplugintest.PVSpec("pv", "h", false), volumeplugintest.Pod("u2"))
	if err != nil {
		t.Fatal(err)
	}
	err = m.SetUp(volume.MounterArgs{})
	var tf *volumetypes.TransientOperationFailure
	if !errors.As(err, &tf) {
		t.Fatalf("SetUp without driver: %T %v", err, err)
	}
}

func TestBlockVolumeMapsAndUnmapsThroughTheDriver(t *testing.T) {
	e := newEnv(t)
	p := e.plugin
	handle := e.CreateVolume(t, "vol-block", true)
	spec := volumeplugintest.PVSpec("pv-block", handle, true)
	pod := volumeplugintest.Pod("66666666-2222-3333-4444-555555555555")

	bm, err := p.NewBlockVolumeMapper(spec, pod)
	if err != nil {
		t.Fatal(err)
	}
	m := bm.(volume.CustomBlockVolumeMapper)
	staging, err := m.SetUpDevice()
	if err != nil {
		t.Fatal(err)
	}
	if staging != m.GetStagingPath() {
		t.Errorf("SetUpDevice = %s, GetStagingPath = %s", staging, m.GetStagingPath())
	}
	publish, err := m.MapPodDevice()
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(publish); err != nil || fi.Mode()&os.ModeDevice == 0 {
		t.Errorf("publish path %s is not a device: %v %v", publish, fi, err)
	}
	if !m.SupportsMetrics() {
		t.Error("SupportsMetrics")
	}
	global, _ := m.GetGlobalMapPath(spec)
	podDir, podName := m.GetPodDeviceMapPath()
	// The kubelet links the device at <globalMapPath>/<podUID> (util.MapBlockVolume); the
	// block mapper's metrics are taken there, as upstream's.
	if err := os.MkdirAll(global, 0o750); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(global, string(pod.UID))
	if err := os.Symlink(publish, link); err != nil {
		t.Fatal(err)
	}
	mt, err := m.GetMetrics()
	t.Logf("block metrics: %+v, %v", mt, err)
	if err != nil || mt.Capacity == nil || mt.Capacity.Value() <= 0 {
		t.Errorf("block GetMetrics = %+v, %v", mt, err)
	}
	os.Remove(link)

	bu, err := p.NewBlockVolumeUnmapper("pv-block", pod.UID)
	if err != nil {
		t.Fatal(err)
	}
	if g, _ := bu.GetGlobalMapPath(spec); g != global {
		t.Errorf("unmapper global map path %s, mapper's %s", g, global)
	}
	if d, n := bu.GetPodDeviceMapPath(); d != podDir || n != podName {
		t.Errorf("unmapper pod device map path %s %s, mapper's %s %s", d, n, podDir, podName)
	}
	u := bu.(volume.CustomBlockVolumeUnmapper)
	if err := u.UnmapPodDevice(); err != nil {
		t.Fatal(err)
	}
	if err := u.TearDownDevice(global, ""); err != nil {
		t.Fatal(err)
	}
	spec2, err := p.ConstructBlockVolumeSpec(pod.UID, "pv-block", global)
	if err == nil {
		t.Errorf("ConstructBlockVolumeSpec after TearDownDevice found %+v", spec2)
	}
}

func TestSELinuxContextMountFollowsTheGateAndTheCSIDriver(t *testing.T) {
	volumeplugintest.NeedsRoot(t)
	root := t.TempDir()
	on := true
	d := volumeplugintest.HostpathCSIDriver()
	d.Spec.SELinuxMount = &on
	for _, c := range []struct {
		gate bool
		want bool
	}{{false, false}, {true, true}} {
		p := New(Config{CSIDrivers: []any{d}, FeatureGates: map[string]bool{"SELinuxMountReadWriteOncePod": c.gate}})
		volumetest.NewFakeKubeletVolumeHostWithCSINodeName(t, root, nil, []volume.VolumePlugin{p}, volumeplugintest.NodeName, nil, nil)
		got, err := p.SupportsSELinuxContextMount(volumeplugintest.PVSpec("pv", "h", false))
		if err != nil || got != c.want {
			t.Errorf("gate %v: SupportsSELinuxContextMount = %v, %v; want %v", c.gate, got, err, c.want)
		}
		p.Close()
	}
}
