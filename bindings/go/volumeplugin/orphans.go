package volumeplugin

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/volume"
	"kcsi.dev/kcsi"
)

// Volumes staged before the kubelet (re)started that no pod uses (kubernetes/kubernetes#85476,
// #121937). The kubelet rebuilds its actual state from the pod dirs only
// (reconciler/reconstruct.go reconstructVolumes → getVolumesFromPodDir): a kubelet killed
// after NodeUnpublishVolume removed the last pod dir and before NodeUnstageVolume never learns
// of the global mount again, and upstream's plugin leaves it staged for good. The plugin sees
// what the kubelet cannot: at Init it lists what is staged on disk (kcsi_list_device_mounts),
// and it sees every MountDevice, UnmountDevice, SetUpDevice and TearDownDevice the kubelet
// asks of it afterwards. A volume staged at Init is unstaged (kcsi_unmount_device_by_handle)
// when all of these hold, and never otherwise:
//   - no pod dir and no block publish dir named it at Init: the kubelet reconstructs those and
//     unstages them itself, as upstream;
//   - the kubelet has not staged or unstaged it since Init: from then on it is the kubelet's;
//   - no pod bound to this node (by the API server, any phase but Succeeded and Failed)
//     references it: by its PersistentVolumeClaim's (or generic ephemeral volume's claim's)
//     PersistentVolume's driver and handle, or by its spec name, on two checks of the API
//     server at least Config.OrphanGracePeriod apart, the last one just before unstaging;
//   - and no publish dir names it on disk at that moment.
// A MountDevice or SetUpDevice of the volume that arrives while kcsi is unstaging it waits
// for the unstage to end and then stages it afresh, so a pod scheduled in between is served,
// never raced.
//
// docs/crash-safety.md says what this can and cannot know.

// defaultOrphanGracePeriod: long enough for the kubelet, once restarted, to see the pods bound
// to it and stage their volumes again (which hands those volumes to the kubelet), short
// because the attach/detach controller detaches such a volume as soon as the restarted kubelet
// reports it no longer in use.
const defaultOrphanGracePeriod = 30 * time.Second

// orphan is one volume staged before Init that the kubelet has not taken over.
type orphan struct {
	m kcsi.DeviceMount
	// unusedSince: when a check first found no user; zero after a check found one.
	unusedSince time.Time
}

// orphans tracks the volumes staged before Init. Keys: stagedKey.
type orphans struct {
	h       *kcsi.Host
	client  clientset.Interface
	node    string
	podsDir string
	devDir  string // <root>/plugins/kubernetes.io/csi/volumeDevices
	grace   time.Duration

	mu        sync.Mutex
	ended     *sync.Cond // an unstage ended
	pending   map[string]*orphan
	unstaging map[string]bool
}

// fsStagedKey and blockStagedKey name a staged volume the way both the kubelet's calls and
// kcsi_list_device_mounts know it: a filesystem one by its global mount path, a block one by
// its spec name (its staging path is volumeDevices/staging/<spec>).
func fsStagedKey(deviceMountPath string) string { return "fs:" + filepath.Clean(deviceMountPath) }
func blockStagedKey(specName string) string     { return "block:" + specName }

func stagedKey(m kcsi.DeviceMount) string {
	if m.Kind == "block" {
		return blockStagedKey(m.SpecName)
	}
	return fsStagedKey(m.DeviceMountPath)
}

// startOrphans lists what is staged when a kubelet host starts and, when some of it may be
// left over and there is an API server to ask, unstages what no pod uses in the background
// until stop is closed. nil: nothing to watch (the calls on a nil *orphans do nothing).
func startOrphans(cfg Config, h *kcsi.Host, host volume.VolumeHost, stop <-chan struct{}) *orphans {
	if cfg.OrphanGracePeriod < 0 {
		return nil
	}
	o := &orphans{
		h: h, node: string(host.GetNodeName()), podsDir: host.GetPodsDir(),
		devDir: host.GetVolumeDevicePluginDir(PluginName), grace: cfg.OrphanGracePeriod,
		pending: map[string]*orphan{}, unstaging: map[string]bool{},
	}
	if o.grace == 0 {
		o.grace = defaultOrphanGracePeriod
	}
	o.ended = sync.NewCond(&o.mu)
	staged, err := h.DeviceMounts()
	if err != nil {
		klog.ErrorS(err, "kcsi: cannot list the volumes staged before this start; none is unstaged unless the kubelet asks")
		return nil
	}
	refs, err := readPublishRefs(o.podsDir, o.devDir)
	if err != nil {
		klog.ErrorS(err, "kcsi: cannot read the pod dirs; no volume staged before this start is unstaged unless the kubelet asks")
		return nil
	}
	for _, m := range staged {
		switch {
		case m.Driver == "" || m.VolumeHandle == "":
			klog.InfoS("kcsi: a staged volume's record is unreadable, so kcsi cannot unstage it; `kcsi list` says what to do",
				"path", m.DeviceMountPath, "error", m.VolumeDataError)
		case refs.uses(m):
			// The kubelet reconstructs it from the pod dir, and unstages it when no pod needs it.
		default:
			o.pending[stagedKey(m)] = &orphan{m: m}
		}
	}
	if len(o.pending) == 0 {
		return nil
	}
	if o.client = host.GetKubeClient(); o.client == nil {
		klog.InfoS("kcsi: volumes staged before this start are left staged: without an API server kcsi cannot tell whether a pod uses them; `kcsi list` says what to do",
			"count", len(o.pending))
		return nil
	}
	klog.InfoS("kcsi: volumes staged before this start are unstaged if no pod uses them", "count", len(o.pending), "gracePeriod", o.grace)
	go o.run(stop)
	return o
}

// claim hands the volume under key to the kubelet, which stages or unstages it now: kcsi never
// unstages it afterwards. It waits for an unstage of it kcsi has begun.
func (o *orphans) claim(key string) {
	if o == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for o.unstaging[key] {
		o.ended.Wait()
	}
	if c, ok := o.pending[key]; ok {
		delete(o.pending, key)
		klog.V(2).InfoS("kcsi: the kubelet took over a volume staged before this start", "driver", c.m.Driver, "volumeHandle", c.m.VolumeHandle)
	}
}

func (o *orphans) run(stop <-chan struct{}) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	tick := time.NewTicker(max(o.grace/2, time.Millisecond))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if o.sweep(ctx) == 0 {
			return
		}
	}
}

// sweep checks every pending volume once and unstages those unused for the grace period; it
// returns how many are still pending.
func (o *orphans) sweep(ctx context.Context) int {
	o.mu.Lock()
	var todo []*orphan
	for _, c := range o.pending {
		todo = append(todo, c)
	}
	o.mu.Unlock()
	if len(todo) == 0 {
		return 0
	}
	users, err := o.podUsers(ctx)
	if err != nil {
		klog.ErrorS(err, "kcsi: cannot tell whether pods use the volumes staged before this start; trying again", "node", o.node)
		return len(todo)
	}
	refs, err := readPublishRefs(o.podsDir, o.devDir)
	if err != nil {
		klog.ErrorS(err, "kcsi: cannot read the pod dirs; trying again")
		return len(todo)
	}
	now := time.Now()
	for _, c := range todo {
		switch {
		case users.uses(c.m) || refs.uses(c.m):
			c.unusedSince = time.Time{}
		case c.unusedSince.IsZero():
			c.unusedSince = now
		case now.Sub(c.unusedSince) >= o.grace:
			o.unstage(ctx, c)
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.pending)
}

// unstage unstages c unless the kubelet claimed it or a publish dir names it now.
func (o *orphans) unstage(ctx context.Context, c *orphan) {
	key := stagedKey(c.m)
	o.mu.Lock()
	if o.pending[key] != c {
		o.mu.Unlock()
		return
	}
	o.unstaging[key] = true
	o.mu.Unlock()
	done := false
	defer func() {
		o.mu.Lock()
		delete(o.unstaging, key)
		if done {
			delete(o.pending, key)
		}
		o.ended.Broadcast()
		o.mu.Unlock()
	}()
	if refs, err := readPublishRefs(o.podsDir, o.devDir); err != nil || refs.uses(c.m) {
		c.unusedSince = time.Time{}
		return
	}
	kv := []any{"driver", c.m.Driver, "volumeHandle", c.m.VolumeHandle, "path", c.m.DeviceMountPath}
	if err := o.h.UnmountDeviceByHandle(ctx, c.m.Driver, c.m.VolumeHandle); err != nil {
		// Next try a grace period later (a driver not yet registered is the common case).
		c.unusedSince = time.Now()
		if errors.Is(err, kcsi.ErrNotFound) {
			klog.V(2).InfoS("kcsi: cannot unstage a volume no pod uses yet", append(kv, "error", err)...)
		} else {
			klog.ErrorS(err, "kcsi: unstaging a volume no pod uses failed; trying again", kv...)
		}
		return
	}
	done = true
	klog.InfoS("kcsi: unstaged a volume staged before this start that no pod uses", kv...)
}

// volumeRefs are the spec names and "<driver>^<handle>" of volumes something refers to.
type volumeRefs struct {
	names   map[string]bool
	handles map[string]bool
}

func newVolumeRefs() volumeRefs {
	return volumeRefs{names: map[string]bool{}, handles: map[string]bool{}}
}

func (r volumeRefs) uses(m kcsi.DeviceMount) bool {
	spec := m.SpecName // block volumes; a filesystem one's is in its vol_data.json
	if spec == "" {
		spec = m.VolumeData["specVolID"]
	}
	return (spec != "" && r.names[spec]) || r.handles[m.Driver+"^"+m.VolumeHandle]
}

// readPublishRefs reads which volumes the pod dirs and the block publish dirs name (the
// kubelet's pods/<uid>/volumes/kubernetes.io~csi/<spec> with its vol_data.json,
// pods/<uid>/volumeDevices/kubernetes.io~csi/<spec>, and the plugin's
// volumeDevices/publish/<spec>/<uid> and volumeDevices/<spec>/dev/<uid>). An entry whose
// vol_data.json is unreadable still names its spec.
func readPublishRefs(podsDir, devDir string) (volumeRefs, error) {
	refs := newVolumeRefs()
	pods, err := readDirNames(podsDir)
	if err != nil {
		return refs, err
	}
	for _, uid := range pods {
		for _, sub := range []string{"volumes", "volumeDevices"} {
			dir := filepath.Join(podsDir, uid, sub, "kubernetes.io~csi")
			specs, err := readDirNames(dir)
			if err != nil {
				return refs, err
			}
			for _, spec := range specs {
				refs.names[spec] = true
				if sub == "volumes" {
					addRecordedHandle(refs, filepath.Join(dir, spec, "vol_data.json"))
				}
			}
		}
	}
	specs, err := readDirNames(filepath.Join(devDir, "publish"))
	if err != nil {
		return refs, err
	}
	for _, spec := range specs {
		if uids, err := readDirNames(filepath.Join(devDir, "publish", spec)); err != nil || len(uids) > 0 {
			refs.names[spec] = true
		}
	}
	specs, err = readDirNames(devDir)
	if err != nil {
		return refs, err
	}
	for _, spec := range specs {
		if uids, err := readDirNames(filepath.Join(devDir, spec, "dev")); err != nil || len(uids) > 0 {
			refs.names[spec] = true
		}
	}
	return refs, nil
}

// readDirNames lists dir; a dir that does not exist is empty.
func readDirNames(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names, err
}

func addRecordedHandle(refs volumeRefs, file string) {
	b, err := os.ReadFile(file)
	if err != nil {
		return
	}
	var data map[string]string
	if json.Unmarshal(b, &data) == nil && data["volumeHandle"] != "" {
		refs.handles[data["driverName"]+"^"+data["volumeHandle"]] = true
	}
}

// podUsers reads from the API server which volumes the pods bound to this node reference:
// each claim's PersistentVolume by name and by CSI driver and handle, and every other volume by
// its name (a CSI-migrated inline volume is staged under it). A claim or volume that does not
// exist (yet) references nothing: a pod that gets it later has it staged by the kubelet, which
// claims it. Only the reads the Node authorizer allows a kubelet: its own pods, and the claims
// and volumes of those.
func (o *orphans) podUsers(ctx context.Context) (volumeRefs, error) {
	refs := newVolumeRefs()
	pods, err := o.client.CoreV1().Pods("").List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.nodeName", o.node).String(),
	})
	if err != nil {
		return refs, err
	}
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.Status.Phase == v1.PodSucceeded || pod.Status.Phase == v1.PodFailed {
			continue // the kubelet never mounts a terminal pod's volumes again
		}
		for _, vol := range pod.Spec.Volumes {
			claim := ""
			switch {
			case vol.PersistentVolumeClaim != nil:
				claim = vol.PersistentVolumeClaim.ClaimName
			case vol.Ephemeral != nil:
				claim = pod.Name + "-" + vol.Name
			default:
				refs.names[vol.Name] = true
				continue
			}
			if err := o.addClaim(ctx, refs, pod.Namespace, claim); err != nil {
				return refs, err
			}
		}
	}
	return refs, nil
}

func (o *orphans) addClaim(ctx context.Context, refs volumeRefs, ns, name string) error {
	pvc, err := o.client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil || pvc.Spec.VolumeName == "" {
		return err
	}
	refs.names[pvc.Spec.VolumeName] = true
	pv, err := o.client.CoreV1().PersistentVolumes().Get(ctx, pvc.Spec.VolumeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if pv.Spec.CSI != nil {
		refs.handles[pv.Spec.CSI.Driver+"^"+pv.Spec.CSI.VolumeHandle] = true
	}
	return nil
}

// claimStaged tells the orphan tracker that the kubelet stages or unstages the volume under key.
func (p *Plugin) claimStaged(key string) { p.orphans.Load().claim(key) }
