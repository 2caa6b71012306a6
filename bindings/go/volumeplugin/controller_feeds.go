package volumeplugin

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	storagelisters "k8s.io/client-go/listers/storage/v1"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/volume"
	"kcsi.dev/kcsi"
)

// controllerFeeds reads the attach/detach controller's listers for kcsi, as upstream's plugin
// reads them (csi_attacher.go waitForVolumeAttachmentWithLister, csi_plugin.go
// getCSIDriver): kcsi sends no list or watch of VolumeAttachments or CSIDrivers of its own.
// The controller's host gives its plugins listers, not event handlers, so before each call
// the objects the call reads are fed to kcsi from the listers, and while an Attach or Detach
// waits its VolumeAttachment is fed every feedEvery: a read of the controller's in-memory
// cache, and a feed only when the object changed. The controller's informers are synced
// before it calls its plugins (attach_detach_controller.go Run).
type controllerFeeds struct {
	h           *kcsi.Host
	drivers     storagelisters.CSIDriverLister
	attachments storagelisters.VolumeAttachmentLister

	synced sync.Once
	mu     sync.Mutex
	fed    map[string]string // "<kind>/<name>" -> the resourceVersion kcsi holds
}

// feedEvery is how often a waiting Attach or Detach looks at its VolumeAttachment in the
// controller's cache (upstream polls its lister from 500 ms, backing off to 7 s).
const feedEvery = 50 * time.Millisecond

// controllerListers are the attach/detach controller's listers, when host is its host and
// has both.
func controllerListers(host volume.VolumeHost) (storagelisters.CSIDriverLister, storagelisters.VolumeAttachmentLister, bool) {
	adc, ok := host.(volume.AttachDetachVolumeHost)
	if !ok || adc.CSIDriverLister() == nil || adc.VolumeAttachmentLister() == nil {
		return nil, nil, false
	}
	return adc.CSIDriverLister(), adc.VolumeAttachmentLister(), true
}

func newControllerFeeds(h *kcsi.Host, host volume.VolumeHost) *controllerFeeds {
	drivers, attachments, ok := controllerListers(host)
	if !ok {
		return nil
	}
	return &controllerFeeds{h: h, drivers: drivers, attachments: attachments, fed: map[string]string{}}
}

// attachmentName is the VolumeAttachment kcsi's Attach creates for a volume on a node:
// upstream's getAttachmentName (csi_attacher.go), csi-<sha256(handle + driver + node)>.
func attachmentName(volumeHandle, driver, node string) string {
	return fmt.Sprintf("csi-%x", sha256.Sum256([]byte(volumeHandle+driver+node)))
}

// driver feeds kcsi the CSIDriver name as the controller's cache has it now.
func (f *controllerFeeds) driver(name string) {
	if f == nil || name == "" {
		return
	}
	obj, err := f.drivers.Get(name)
	f.feed("CSIDriver/"+name, obj, err, f.h.ApplyCSIDriver, f.h.DeleteCSIDriver, name)
}

// attachment feeds kcsi the VolumeAttachment name as the controller's cache has it now.
func (f *controllerFeeds) attachment(name string) {
	if f == nil {
		return
	}
	obj, err := f.attachments.Get(name)
	f.feed("VolumeAttachment/"+name, obj, err, f.h.ApplyVolumeAttachment, f.h.DeleteVolumeAttachment, name)
}

func (f *controllerFeeds) feed(key string, obj runtime.Object, err error, apply func(any) error, remove func(string) error, name string) {
	f.synced.Do(func() {
		// The controller runs its plugins once its informers have synced.
		for _, synced := range []func() error{f.h.CSIDriversSynced, f.h.VolumeAttachmentsSynced} {
			if err := synced(); err != nil {
				klog.ErrorS(err, "kcsi: marking the controller's objects synced failed")
			}
		}
	})
	version := ""
	switch {
	case apierrors.IsNotFound(err):
	case err != nil:
		klog.ErrorS(err, "kcsi: reading the attach/detach controller's cache failed", "object", key)
		return
	default:
		accessor, ok := obj.(interface{ GetResourceVersion() string })
		if !ok {
			return
		}
		version = accessor.GetResourceVersion()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	last, known := f.fed[key]
	if version == "" {
		// Only what kcsi was fed needs removing; forgetting it keeps the map to live objects.
		if !known {
			return
		}
		delete(f.fed, key)
		if err := remove(name); err != nil && !errors.Is(err, kcsi.ErrNotFound) {
			klog.ErrorS(err, "kcsi: removing an object gone from the controller's cache failed", "object", key)
		}
		return
	}
	if known && last == version {
		return
	}
	f.fed[key] = version
	if err := apply(obj); err != nil {
		delete(f.fed, key)
		klog.ErrorS(err, "kcsi: taking an object from the controller's cache failed", "object", key)
	}
}

// during feeds the VolumeAttachment name to kcsi now and every feedEvery until call returns.
func (f *controllerFeeds) during(name string, call func() error) error {
	if f == nil {
		return call()
	}
	f.attachment(name)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(feedEvery)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				f.attachment(name)
			}
		}
	}()
	err := call()
	close(done)
	wg.Wait()
	return err
}

// feedDriverOf feeds kcsi the CSIDriver of spec's CSI source on a controller host that reads
// the controller's listers (nothing elsewhere).
func (p *Plugin) feedDriverOf(spec *volume.Spec) {
	f := p.feeds.Load()
	if f == nil || spec == nil {
		return
	}
	switch {
	case spec.PersistentVolume != nil && spec.PersistentVolume.Spec.CSI != nil:
		f.driver(spec.PersistentVolume.Spec.CSI.Driver)
	case spec.Volume != nil && spec.Volume.CSI != nil:
		f.driver(spec.Volume.CSI.Driver)
	}
}
