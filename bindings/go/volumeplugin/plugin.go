package volumeplugin

import (
	"context"
	"errors"
	"fmt"
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

// Config is what a VolumeHost cannot tell kcsi. Node name, root directory and the API
// client come from the VolumeHost at Init: inside the kubelet and the kube-controller-manager
// the zero Config is right.
type Config struct {
	// Kubeconfig makes kcsi use its own client, from this kubeconfig, instead of the
	// VolumeHost's: only for programs that have no client of their own to give (tools, tests).
	// Empty, kcsi's requests go out through the VolumeHost's client, with its identity,
	// credentials, user agent and QPS limit (kcsi is standalone when there is none).
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
	// reads that informer's lister, instead of listing and watching them itself: one watch
	// fewer per node. Needs a kubelet VolumeHost with an API client.
	CSIDriversFromVolumeHost bool
	// OrphanGracePeriod: how long a volume staged before Init must stay unused by every pod
	// bound to the node before kcsi unstages it (kubernetes/kubernetes#85476; see orphans.go).
	// Zero means 30 s; negative turns this off.
	OrphanGracePeriod time.Duration
}

// Plugin is kcsi as the kubernetes.io/csi volume plugin. Create it with New, hand it to the
// kubelet's volume plugin manager, and register RegistrationHandler for "CSIPlugin".
type Plugin struct {
	cfg  Config
	host volume.VolumeHost
	kcsi atomic.Pointer[kcsi.Host]
	// controller: Init got the attach/detach controller's host (no node, no pods dir).
	controller bool
	orphans    atomic.Pointer[orphans]
	// feeds: on the attach/detach controller, what kcsi reads from the controller's listers.
	feeds  atomic.Pointer[controllerFeeds]
	inited atomic.Bool

	// mu guards what follows: making kcsi's host, which Init may leave to later.
	mu sync.Mutex
	// startErr is why kcsi's host could not be made yet (nil once it is, or before Init).
	startErr  error
	lastStart time.Time
	relay     *hostRelay

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

// retryStartAfter is how soon a call may try again to make a host that could not be made.
const retryStartAfter = time.Second

// Init creates kcsi's host for the VolumeHost's node and root directory. With an API server
// it holds the kubelet's Ready status back until CSINode is initialized, as upstream does
// through SetKubeletError. Like upstream's Init it does not fail over the API or kcsi's
// set-up (a kube-controller-manager stops every controller when a plugin's Init fails): the
// problem is logged, every call that needs the host returns it, and the host is made as soon
// as the cause goes away.
func (p *Plugin) Init(host volume.VolumeHost) error {
	if host == nil {
		return invalid("Init: the volume host is nil")
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inited.Load() {
		return invalid("Init: called twice")
	}
	p.host = host
	// The attach/detach controller's host has no node and no pods dir (upstream's
	// csiPlugin.Init tells the two apart by the host's type the same way).
	_, adc := host.(volume.AttachDetachVolumeHost)
	p.controller = adc && host.GetNodeName() == "" && host.GetPodsDir() == ""
	p.inited.Store(true)
	if err := p.start(); err != nil {
		klog.ErrorS(err, "kcsi: cannot make its host yet; volume calls fail with this error until it can")
		go p.retryStart()
	}
	return nil
}

// start makes kcsi's host (p.mu held), recording why it could not.
func (p *Plugin) start() error {
	p.lastStart = time.Now()
	p.startErr = p.makeHost()
	return p.startErr
}

// retryStart keeps trying to make the host until it is made or the plugin is closed: a
// kubelet's CSINode start-up must not wait for a volume call.
func (p *Plugin) retryStart() {
	delay := retryStartAfter
	for {
		select {
		case <-p.stop:
			return
		case <-time.After(delay):
		}
		p.mu.Lock()
		err := p.startErr
		if err != nil && p.kcsi.Load() == nil {
			err = p.start()
		}
		p.mu.Unlock()
		if err == nil {
			klog.InfoS("kcsi: made its host")
			return
		}
		delay = min(2*delay, 30*time.Second)
	}
}

func (p *Plugin) makeHost() error {
	select {
	case <-p.stop:
		return errors.New("kcsi volume plugin: closed")
	default:
	}
	host := p.host
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
	if err := p.apiSource(&cfg); err != nil {
		return err
	}
	drivers, err := volumeHostCSIDrivers(p.cfg, host)
	if err != nil {
		return err
	}
	cfg.CSIDriversFromHost = drivers != nil
	if p.controller {
		cfg.Role = "controller"
		// kcsi reads the controller's listers, as upstream's plugin does (controller_feeds.go).
		_, _, listers := controllerListers(host)
		cfg.CSIDriversFromHost, cfg.VolumeAttachmentsFromHost = listers, listers
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
	kvh, ok := host.(volume.KubeletVolumeHost)
	csiNode := ok && (cfg.Kubeconfig != "" || cfg.KubeconfigData != "")
	if csiNode {
		kvh.SetKubeletError(errors.New("CSINode is not yet initialized"))
	}
	if p.controller {
		p.feeds.Store(newControllerFeeds(h, host))
	}
	p.kcsi.Store(h)
	if !p.controller {
		p.orphans.Store(startOrphans(p.cfg, h, host, p.stop))
	}
	addLegacyHost(h)
	if csiNode {
		go p.reportCSINode(h, kvh)
	}
	return nil
}

// apiSource points cfg at the API server: Config.Kubeconfig when set, else the VolumeHost's
// own client through the relay; none leaves a kubelet standalone.
func (p *Plugin) apiSource(cfg *kcsi.Config) error {
	client := p.host.GetKubeClient()
	if cfg.Kubeconfig != "" || client == nil {
		if p.controller && cfg.Kubeconfig == "" {
			return invalid("the attach/detach controller's VolumeHost has no API client and Config.Kubeconfig is empty: there is no API server to attach volumes through")
		}
		return nil
	}
	if p.relay == nil {
		relay, err := startHostRelay(client)
		if err != nil {
			return invalid("%v", err)
		}
		p.relay = relay
	}
	cfg.KubeconfigData = p.relay.kubeconfig
	return nil
}

// reportCSINode mirrors kcsi's CSINode start-up into the kubelet's runtime error, which keeps
// the node NotReady until it is cleared. It looks often at first: a restarted kubelet sends
// its first node status soon after Init, and Ready must not wait for the next one (10 s on).
func (p *Plugin) reportCSINode(h *kcsi.Host, kvh volume.KubeletVolumeHost) {
	const often = 5 * time.Millisecond
	started := time.Now()
	delay := often
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
		if time.Since(started) > 2*time.Second {
			delay = min(2*delay, 2*time.Second)
		}
	}
}

// Close frees kcsi's host. The kubelet never calls it; tests and embedders that restart a
// kubelet in one process do. Volumes stay as they are on disk.
func (p *Plugin) Close() {
	p.stopOnce.Do(func() { close(p.stop) })
	p.mu.Lock()
	defer p.mu.Unlock()
	if h := p.kcsi.Swap(nil); h != nil {
		removeLegacyHost(h)
		h.Close()
	}
	if p.relay != nil {
		p.relay.close()
		p.relay = nil
	}
}

// Host is kcsi's host, nil before Init.
func (p *Plugin) Host() *kcsi.Host { return p.kcsi.Load() }

// ready is kcsi's host, or why there is none: not initialised, or not made yet (then it is
// tried again, at most every retryStartAfter).
func (p *Plugin) ready() (*kcsi.Host, error) {
	if h := p.kcsi.Load(); h != nil {
		return h, nil
	}
	if !p.inited.Load() {
		return nil, errNotInitialized
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if h := p.kcsi.Load(); h != nil {
		return h, nil
	}
	if p.startErr == nil {
		return nil, errNotInitialized // closed
	}
	if time.Since(p.lastStart) >= retryStartAfter {
		if p.start() == nil {
			return p.kcsi.Load(), nil
		}
	}
	return nil, fmt.Errorf("kcsi volume plugin: not ready: %w", p.startErr)
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
	if !p.inited.Load() || spec == nil {
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
	p.feedDriverOf(spec)
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
	p.feedDriverOf(spec)
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
	p.feedDriverOf(spec)
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
	p.feedDriverOf(spec)
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
