package volumeplugin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"time"

	clientset "k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/volume"
	"k8s.io/mount-utils"
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
//   - no pod dir named it at Init, and no block publish dir of a pod whose dir names it: the
//     kubelet reconstructs those and unstages them itself, as upstream;
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
// A block volume can also be left published: the kubelet removes a pod's
// pods/<uid>/volumeDevices entry before NodeUnpublishVolume and makes it after
// NodePublishVolume, so a kubelet killed in between never learns of that publish again (see
// diskRefs.stranded). Such a publish is unpublished (the kubelet's bind mount of the device,
// then NodeUnpublishVolume) once the pod's dir still does not name it and no pod of that UID
// is bound to the node, on two checks at least the grace period apart, unless the kubelet maps
// or unmaps it for that pod first. Then the volume's stage can go too.
//
// docs/crash-safety.md says what this can and cannot know.

// defaultOrphanGracePeriod: long enough for the kubelet, once restarted, to see the pods bound
// to it and stage their volumes again (which hands those volumes to the kubelet), short
// because the attach/detach controller detaches such a volume as soon as the restarted kubelet
// reports it no longer in use.
const defaultOrphanGracePeriod = 30 * time.Second

// orphan is one volume staged before Init, or one stranded block publish, that the kubelet has
// not taken over.
type orphan struct {
	m   kcsi.DeviceMount // a staged volume, or
	pub *podPublish      // a stranded block publish
	// unusedSince: when a check first found no user; zero after a check found one.
	unusedSince time.Time
}

// orphans tracks what was left before Init. Keys: stagedKey and podPublish.key.
type orphans struct {
	h       *kcsi.Host
	client  clientset.Interface
	node    string
	podsDir string
	devDir  string // <root>/plugins/kubernetes.io/csi/volumeDevices
	grace   time.Duration

	mu        sync.Mutex
	ended     *sync.Cond // an unstage or unpublish ended
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

func (c *orphan) key() string {
	if c.pub != nil {
		return c.pub.key()
	}
	return stagedKey(c.m)
}

// startOrphans lists what is staged and published when a kubelet host starts and, when some of
// it may be left over and there is an API server to ask, unstages and unpublishes what no pod
// uses in the background until stop is closed. nil: nothing to watch (the calls on a nil
// *orphans do nothing).
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
	for _, p := range refs.stranded {
		o.pending[p.key()] = &orphan{pub: &p}
	}
	if len(o.pending) == 0 {
		return nil
	}
	if o.client = host.GetKubeClient(); o.client == nil {
		klog.InfoS("kcsi: volumes staged or published before this start are left: without an API server kcsi cannot tell whether a pod uses them; `kcsi list` says what to do",
			"count", len(o.pending))
		return nil
	}
	klog.InfoS("kcsi: volumes staged or published before this start are undone if no pod uses them",
		"count", len(o.pending), "gracePeriod", o.grace)
	go o.run(stop)
	return o
}

// claim hands what key names to the kubelet, which stages, unstages, maps or unmaps it now:
// kcsi never undoes it afterwards. It waits for an unstage or unpublish of it kcsi has begun.
func (o *orphans) claim(key string) {
	if o == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	for o.unstaging[key] {
		o.ended.Wait()
	}
	if _, ok := o.pending[key]; ok {
		delete(o.pending, key)
		klog.V(2).InfoS("kcsi: the kubelet took over a volume staged or published before this start", "key", key)
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

// sweep checks everything pending once and undoes what was unused for the grace period, the
// stranded publishes before the stages they hold; it returns how many are still pending.
func (o *orphans) sweep(ctx context.Context) int {
	o.mu.Lock()
	var pubs, stages []*orphan
	for _, c := range o.pending {
		if c.pub != nil {
			pubs = append(pubs, c)
		} else {
			stages = append(stages, c)
		}
	}
	o.mu.Unlock()
	if len(pubs)+len(stages) == 0 {
		return 0
	}
	users, err := o.podUsers(ctx)
	if err != nil {
		klog.ErrorS(err, "kcsi: cannot tell whether pods use the volumes staged before this start; trying again", "node", o.node)
		return len(pubs) + len(stages)
	}
	refs, err := readPublishRefs(o.podsDir, o.devDir)
	if err != nil {
		klog.ErrorS(err, "kcsi: cannot read the pod dirs; trying again")
		return len(pubs) + len(stages)
	}
	now := time.Now()
	for _, c := range pubs {
		if o.due(c, users.pods[c.pub.uid], now) {
			o.undo(ctx, c)
		}
	}
	for _, c := range stages {
		if o.due(c, users.uses(c.m) || refs.uses(c.m), now) {
			o.undo(ctx, c)
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.pending)
}

// due records a check of c and says whether it has been unused for the grace period.
func (o *orphans) due(c *orphan, used bool, now time.Time) bool {
	switch {
	case used:
		c.unusedSince = time.Time{}
	case c.unusedSince.IsZero():
		c.unusedSince = now
	default:
		return now.Sub(c.unusedSince) >= o.grace
	}
	return false
}

// undo unstages or unpublishes c unless the kubelet claimed it or the disk names it now.
func (o *orphans) undo(ctx context.Context, c *orphan) {
	key := c.key()
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
	refs, err := readPublishRefs(o.podsDir, o.devDir)
	switch {
	case err != nil || (c.pub == nil && refs.usesStrictly(c.m)):
		c.unusedSince = time.Time{}
		return
	case c.pub != nil && !refs.isStranded(*c.pub):
		// Gone from disk, or the pod's dir names it again: nothing left for kcsi to undo.
		done = true
		return
	}
	if c.pub != nil {
		err = o.unpublish(ctx, *c.pub)
	} else {
		err = o.h.UnmountDeviceByHandle(ctx, c.m.Driver, c.m.VolumeHandle)
	}
	kv := []any{"driver", c.m.Driver, "volumeHandle", c.m.VolumeHandle, "path", c.m.DeviceMountPath}
	if c.pub != nil {
		kv = []any{"volume", c.pub.spec, "podUID", c.pub.uid}
	}
	if err != nil {
		// Next try a grace period later (a driver not yet registered is the common case).
		c.unusedSince = time.Now()
		if errors.Is(err, kcsi.ErrNotFound) {
			klog.V(2).InfoS("kcsi: cannot undo yet what no pod uses", append(kv, "error", err)...)
		} else {
			klog.ErrorS(err, "kcsi: undoing what no pod uses failed; trying again", kv...)
		}
		return
	}
	done = true
	if c.pub != nil {
		klog.InfoS("kcsi: unpublished a block volume published before this start for a pod that is gone", kv...)
	} else {
		klog.InfoS("kcsi: unstaged a volume staged before this start that no pod uses", kv...)
	}
}

// unpublish undoes a stranded block publish in the kubelet's order (util.UnmapBlockVolume,
// then UnmapPodDevice): the kubelet's bind mount of the device at volumeDevices/<spec>/dev/<uid>,
// then NodeUnpublishVolume of volumeDevices/publish/<spec>/<uid>.
func (o *orphans) unpublish(ctx context.Context, p podPublish) error {
	if dev := filepath.Join(o.devDir, p.spec, "dev", p.uid); exists(dev) {
		if err := mount.CleanupMountPoint(dev, mount.New(""), false); err != nil {
			return err
		}
	}
	if !exists(filepath.Join(o.devDir, "publish", p.spec, p.uid)) {
		return nil
	}
	u, err := o.h.NewBlockUnmapper(p.spec, p.uid)
	if err != nil {
		return err
	}
	defer u.Close()
	return u.UnmapPodDevice(ctx)
}

// claim tells the orphan tracker that the kubelet stages, unstages, maps or unmaps what key
// names.
func (p *Plugin) claim(key string) { p.orphans.Load().claim(key) }

// exists: path is there, or cannot be told absent.
func exists(path string) bool {
	_, err := os.Lstat(path)
	return !errors.Is(err, os.ErrNotExist)
}
