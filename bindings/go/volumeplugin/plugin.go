package volumeplugin

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/features"
	"k8s.io/kubernetes/pkg/volume"
	"kcsi.dev/kcsi"
)

// PluginName is upstream's CSIPluginName. The kubelet derives the on-disk layout
// (pods/<uid>/volumes/kubernetes.io~csi/...) and its name-keyed lookups from it.
const PluginName = "kubernetes.io/csi"

// Config is what a VolumeHost cannot tell kcsi. Node name and root directory come from the
// VolumeHost at Init; a host without them (the attach/detach controller's
// AttachDetachVolumeHost) makes kcsi's controller host, which needs Kubeconfig.
type Config struct {
	// Kubeconfig is the API server's kubeconfig, usually the kubelet's own; empty means
	// standalone (no Node/CSINode updates, CSIDriver objects from CSIDrivers), which Init
	// refuses when the VolumeHost has an API client: kcsi makes its own client and cannot
	// take the kubelet's.
	Kubeconfig string
	// Timeout bounds each volume operation; zero means kcsi's default, the kubelet's 2 minutes.
	Timeout time.Duration
	// FeatureGates override the kubelet's gates kcsi consults (CSIVolumeHealth,
	// SELinuxMountReadWriteOncePod), which are otherwise read from the kubelet's default
	// feature gate at Init.
	FeatureGates map[string]bool
	// CSIDrivers stand in for CSIDriver objects in standalone mode (see kcsi.Config).
	CSIDrivers []any
	// CSIDriversFromVolumeHost makes kcsi read the CSIDriver objects from the VolumeHost's
	// informer (the kubelet's own, which its volume manager starts), as upstream's plugin
	// reads that informer's lister, instead of listing and watching them with its own client:
	// one watch and one API server connection fewer per node. Needs Kubeconfig and a kubelet
	// VolumeHost with an API client.
	CSIDriversFromVolumeHost bool
}

// Plugin is kcsi as the kubernetes.io/csi volume plugin. Create it with New, hand it to the
// kubelet's volume plugin manager, and register RegistrationHandler for "CSIPlugin".
type Plugin struct {
	cfg  Config
	host volume.VolumeHost
	kcsi atomic.Pointer[kcsi.Host]
	// controller: Init got the attach/detach controller's host (no node, no pods dir).
	controller bool

	stopOnce sync.Once
	stop     chan struct{}
}

// New returns the plugin; it does nothing until the kubelet calls Init.
func New(cfg Config) *Plugin { return &Plugin{cfg: cfg, stop: make(chan struct{})} }

// ProbeVolumePlugins returns the plugin in the form the kubelet's plugin list takes, in place
// of csi.ProbeVolumePlugins(). Use New instead when the registration handler is needed too.
func ProbeVolumePlugins(cfg Config) []volume.VolumePlugin {
	return []volume.VolumePlugin{New(cfg)}
}

// ProbeAttachableVolumePlugins returns the plugin for the kube-controller-manager's
// attach/detach controller, in place of csi.ProbeVolumePlugins() in its plugin list: Init then
// gets an AttachDetachVolumeHost and kcsi runs as a controller host (Attach, Detach and
// VolumesAreAttached on its own watch of the VolumeAttachments).
func ProbeAttachableVolumePlugins(cfg Config) []volume.VolumePlugin {
	return []volume.VolumePlugin{New(cfg)}
}

var (
	_ volume.VolumePlugin                = (*Plugin)(nil)
	_ volume.AttachableVolumePlugin      = (*Plugin)(nil)
	_ volume.DeviceMountableVolumePlugin = (*Plugin)(nil)
	_ volume.BlockVolumePlugin           = (*Plugin)(nil)
	_ volume.NodeExpandableVolumePlugin  = (*Plugin)(nil)
)

// Init creates kcsi's host for the VolumeHost's node and root directory. With a kubeconfig it
// holds the kubelet's Ready status back until CSINode is initialized, as upstream does
// through SetKubeletError.
func (p *Plugin) Init(host volume.VolumeHost) error {
	if host == nil {
		return invalid("Init: the volume host is nil")
	}
	if p.kcsi.Load() != nil {
		return invalid("Init: called twice")
	}
	if p.cfg.Kubeconfig == "" && host.GetKubeClient() != nil {
		return invalid("Init: the kubelet has an API client but Config.Kubeconfig is empty; " +
			"set it to the kubelet's kubeconfig (kcsi makes its own client from it and cannot use " +
			"the VolumeHost's), or run the kubelet without an API server for a standalone kcsi")
	}
	gates := map[string]bool{
		string(features.CSIVolumeHealth):              utilfeature.DefaultFeatureGate.Enabled(features.CSIVolumeHealth),
		string(features.SELinuxMountReadWriteOncePod): utilfeature.DefaultFeatureGate.Enabled(features.SELinuxMountReadWriteOncePod),
		// Kubernetes 1.36 has no such gate any more: csi_plugin.go Init always lists Portworx
		// among the migrated plugins on CSINode.
		"CSIMigrationPortworx": true,
	}
	for k, v := range p.cfg.FeatureGates {
		gates[k] = v
	}
	cfg := kcsi.Config{
		NodeName:     string(host.GetNodeName()),
		Kubeconfig:   p.cfg.Kubeconfig,
		Timeout:      p.cfg.Timeout,
		FeatureGates: gates,
		CSIDrivers:   p.cfg.CSIDrivers,
	}
	drivers, err := volumeHostCSIDrivers(p.cfg, host)
	if err != nil {
		return err
	}
	cfg.CSIDriversFromHost = drivers != nil
	// The attach/detach controller's host has no node and no pods dir (upstream's
	// csiPlugin.Init tells the two apart by the host's type the same way).
	_, adc := host.(volume.AttachDetachVolumeHost)
	controller := adc && cfg.NodeName == "" && host.GetPodsDir() == ""
	if controller {
		cfg.Role = "controller"
	} else {
		cfg.RootDir = filepath.Dir(host.GetPodsDir())
	}
	h, err := kcsi.NewHost(cfg)
	if err != nil {
		return err
	}
	if drivers != nil {
		if err := p.feedCSIDrivers(h, drivers); err != nil {
			h.Close()
			return err
		}
	}
	p.host = host
	p.controller = controller
	p.kcsi.Store(h)
	addLegacyHost(h)
	if kvh, ok := host.(volume.KubeletVolumeHost); ok && p.cfg.Kubeconfig != "" {
		kvh.SetKubeletError(errors.New("CSINode is not yet initialized"))
		go p.reportCSINode(h, kvh)
	}
	return nil
}

// reportCSINode mirrors kcsi's CSINode start-up into the kubelet's runtime error, which keeps
// the node NotReady until it is cleared.
func (p *Plugin) reportCSINode(h *kcsi.Host, kvh volume.KubeletVolumeHost) {
	delay := 50 * time.Millisecond
	for {
		st, err := h.Status()
		switch {
		case err != nil:
			klog.ErrorS(err, "kcsi: reading the host status failed")
		case st.CSINodeInitialized:
			kvh.SetKubeletError(nil)
			return
		case st.LastError != nil:
			kvh.SetKubeletError(errors.New(*st.LastError))
		}
		select {
		case <-p.stop:
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, 2*time.Second)
	}
}

// Close frees kcsi's host. The kubelet never calls it; tests and embedders that restart a
// kubelet in one process do. Volumes stay as they are on disk.
func (p *Plugin) Close() {
	p.stopOnce.Do(func() { close(p.stop) })
	if h := p.kcsi.Swap(nil); h != nil {
		removeLegacyHost(h)
		h.Close()
	}
}

// Host is kcsi's host, nil before Init.
func (p *Plugin) Host() *kcsi.Host { return p.kcsi.Load() }

func (p *Plugin) ready() (*kcsi.Host, error) {
	if h := p.kcsi.Load(); h != nil {
		return h, nil
	}
	return nil, errNotInitialized
}

func (p *Plugin) GetPluginName() string { return PluginName }

// GetVolumeName is "<driver>^<volumeHandle>" of a CSI PersistentVolume spec. The kubelet's
// reconciler asks it of every volume every 100 ms, so a plain CSI PersistentVolume, the
// common case, is named here, as kcsi_get_volume_name names it, without a call into kcsi;
// kcsi answers every other spec (with its error for the ones that have no name).
func (p *Plugin) GetVolumeName(spec *volume.Spec) (string, error) {
	h, err := p.ready()
	if err != nil {
		return "", err
	}
	if spec == nil {
		return "", invalid("GetVolumeName: volume spec is nil")
	}
	if pv := spec.PersistentVolume; pv != nil && pv.Spec.CSI != nil && spec.Volume == nil {
		return pv.Spec.CSI.Driver + "^" + pv.Spec.CSI.VolumeHandle, nil
	}
	return withHead(spec, h.VolumeName)
}

// CanSupport reports whether the spec has a CSI source. That needs nothing but the spec, so
// it is answered here, by upstream's (and kcsi_can_support's) rule, without a call into kcsi:
// the kubelet asks it of every volume, for every plugin, on every reconcile.
func (p *Plugin) CanSupport(spec *volume.Spec) bool {
	if p.kcsi.Load() == nil || spec == nil {
		return false
	}
	return (spec.PersistentVolume != nil && spec.PersistentVolume.Spec.CSI != nil) ||
		(spec.Volume != nil && spec.Volume.CSI != nil)
}

// RequiresRemount is the CSIDriver's requiresRepublish; false when it cannot be found.
func (p *Plugin) RequiresRemount(spec *volume.Spec) bool {
	h, err := p.ready()
	if err != nil || spec == nil {
		return false
	}
	ok, err := withHead(spec, h.RequiresRemount)
	return err == nil && ok
}

// SupportsMountOption is true, as upstream: CSI passes mount options to the driver.
func (p *Plugin) SupportsMountOption() bool { return true }

// SupportsSELinuxContextMount is the CSIDriver's seLinuxMount under the gate
// SELinuxMountReadWriteOncePod.
func (p *Plugin) SupportsSELinuxContextMount(spec *volume.Spec) (bool, error) {
	h, err := p.ready()
	if err != nil {
		return false, err
	}
	if spec == nil {
		return false, invalid("SupportsSELinuxContextMount: volume spec is nil")
	}
	return withHead(spec, h.SupportsSELinuxContextMount)
}

// CanAttach is false for inline volumes and drivers whose CSIDriver says attachRequired: false.
func (p *Plugin) CanAttach(spec *volume.Spec) (bool, error) {
	h, err := p.ready()
	if err != nil {
		return false, err
	}
	if spec == nil {
		return false, invalid("CanAttach: volume spec is nil")
	}
	// The reconciler asks it of every volume every 100 ms: a plain CSI PersistentVolume
	// passes only its driver's name (kcsi_driver_attach_required), no spec.
	if pv := spec.PersistentVolume; pv != nil && pv.Spec.CSI != nil && spec.Volume == nil {
		return h.DriverAttachRequired(pv.Spec.CSI.Driver)
	}
	return withHead(spec, h.CanAttach)
}

// CanDeviceMount is true for PersistentVolumes (they are staged), false for inline volumes.
func (p *Plugin) CanDeviceMount(spec *volume.Spec) (bool, error) {
	h, err := p.ready()
	if err != nil {
		return false, err
	}
	if spec == nil {
		return false, invalid("CanDeviceMount: volume spec is nil")
	}
	return withHead(spec, h.CanDeviceMount)
}

// VerifyExhaustedResource reports whether the volume's attach failed with ResourceExhausted
// and, if so, refreshes the driver's CSINode allocatable count first (upstream's, under
// MutableCSINodeAllocatableCount); false on any error, which is logged, as upstream.
func (p *Plugin) VerifyExhaustedResource(spec *volume.Spec) bool {
	h, err := p.ready()
	if err != nil || spec == nil || spec.PersistentVolume == nil || spec.PersistentVolume.Spec.CSI == nil {
		klog.ErrorS(err, "Invalid volume spec for CSI")
		return false
	}
	ok, err := withHead(spec, h.VerifyExhaustedResource)
	if err != nil {
		klog.ErrorS(err, "kcsi: VerifyExhaustedResource failed")
		return false
	}
	return ok
}

// GetDeviceMountRefs lists the other mounts of deviceMountPath's device, from the VolumeHost's
// mounter as upstream does.
func (p *Plugin) GetDeviceMountRefs(deviceMountPath string) ([]string, error) {
	if p.host == nil {
		return nil, errNotInitialized
	}
	return p.host.GetMounter().GetMountRefs(deviceMountPath)
}

// RequiresFSResize is true: CSI volumes are expanded on the node by NodeExpandVolume.
func (p *Plugin) RequiresFSResize() bool { return true }

// NodeExpand expands the volume on this node (NodeExpandVolume), with upstream's error types.
func (p *Plugin) NodeExpand(opts volume.NodeResizeOptions) (bool, error) {
	h, err := p.ready()
	if err != nil {
		return false, err
	}
	spec, err := kcsiSpec(opts.VolumeSpec)
	if err != nil {
		return false, err
	}
	ok, err := h.NodeExpand(context.Background(), kcsi.NodeExpandOptions{
		Spec:            spec,
		DevicePath:      opts.DevicePath,
		DeviceMountPath: opts.DeviceMountPath,
		DeviceStagePath: opts.DeviceStagePath,
		NewSize:         opts.NewSize.String(),
		OldSize:         opts.OldSize.String(),
	})
	return ok, expandError(err)
}

// ConstructVolumeSpec rebuilds a mounted volume's spec from its vol_data.json after a restart.
func (p *Plugin) ConstructVolumeSpec(volumeName, mountPath string) (volume.ReconstructedVolume, error) {
	h, err := p.ready()
	if err != nil {
		return volume.ReconstructedVolume{}, err
	}
	rv, err := h.ConstructVolumeSpec(volumeName, mountPath)
	if err != nil {
		return volume.ReconstructedVolume{}, err
	}
	spec, err := volumeSpec(rv.Spec)
	if err != nil {
		return volume.ReconstructedVolume{}, err
	}
	return volume.ReconstructedVolume{Spec: spec, SELinuxMountContext: rv.SELinuxMountContext}, nil
}

// ConstructBlockVolumeSpec rebuilds a block volume's spec from its data/vol_data.json.
func (p *Plugin) ConstructBlockVolumeSpec(podUID types.UID, volumeName, mapPath string) (*volume.Spec, error) {
	h, err := p.ready()
	if err != nil {
		return nil, err
	}
	s, err := h.ConstructBlockVolumeSpec(string(podUID), volumeName, mapPath)
	if err != nil {
		return nil, err
	}
	return volumeSpec(s)
}

// newForPod is NewMounter and NewBlockVolumeMapper: kcsi's handle for spec in pod, made by
// create, and what paths reads of it (the handle is freed when that fails).
func newForPod[T interface{ Close() }, P any](p *Plugin, op string, spec *volume.Spec, pod *v1.Pod,
	create func(*kcsi.Host, kcsi.Spec, any) (T, error), paths func(T) (P, error)) (T, P, error) {
	var handle T
	var none P
	h, err := p.ready()
	if err != nil {
		return handle, none, err
	}
	s, err := kcsiSpec(spec)
	if err != nil {
		return handle, none, err
	}
	if err := podArg(op, pod); err != nil {
		return handle, none, err
	}
	handle, err = create(h, s, pod)
	if err != nil {
		return handle, none, err
	}
	got, err := paths(handle)
	if err != nil {
		handle.Close()
		return handle, none, err
	}
	return handle, got, nil
}

// podArg checks what every per-pod call needs of the pod.
func podArg(op string, pod *v1.Pod) error {
	if pod == nil {
		return invalid("%s: pod is nil", op)
	}
	if pod.UID == "" {
		return invalid("%s: pod %s/%s has no UID", op, pod.Namespace, pod.Name)
	}
	return nil
}
