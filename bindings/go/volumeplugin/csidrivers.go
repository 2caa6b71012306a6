package volumeplugin

import (
	"errors"
	"fmt"

	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/kubernetes/pkg/volume"
	"kcsi.dev/kcsi"
)

// volumeHostCSIDrivers is the VolumeHost's CSIDriver informer when cfg asks kcsi to read its
// CSIDriver objects there (nil when it does not), or why it cannot.
func volumeHostCSIDrivers(cfg Config, host volume.VolumeHost) (cache.SharedIndexInformer, error) {
	if !cfg.CSIDriversFromVolumeHost {
		return nil, nil
	}
	const what = "Config.CSIDriversFromVolumeHost needs"
	kvh, ok := host.(volume.KubeletVolumeHost)
	if !ok || host.GetKubeClient() == nil || kvh.GetInformerFactory() == nil {
		return nil, invalid("%s a kubelet VolumeHost with an API client and an informer factory (the kubelet's volume manager starts it)", what)
	}
	return kvh.GetInformerFactory().Storage().V1().CSIDrivers().Informer(), nil
}

// feedCSIDrivers hands kcsi the informer's events. Once the handler has seen every object of
// the informer's first list, kcsi's lookups stop waiting for it.
func (p *Plugin) feedCSIDrivers(h *kcsi.Host, informer cache.SharedIndexInformer) error {
	reg, err := informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { applyCSIDriver(h, obj) },
		UpdateFunc: func(_, obj any) { applyCSIDriver(h, obj) },
		DeleteFunc: func(obj any) { deleteCSIDriver(h, obj) },
	})
	if err != nil {
		return fmt.Errorf("kcsi: cannot watch the VolumeHost's CSIDriver informer: %w", err)
	}
	go func() {
		if cache.WaitForCacheSync(p.stop, reg.HasSynced) {
			if err := h.CSIDriversSynced(); err != nil {
				klog.ErrorS(err, "kcsi: marking the CSIDriver objects synced failed")
			}
		}
	}()
	return nil
}

func applyCSIDriver(h *kcsi.Host, obj any) {
	d, ok := obj.(*storagev1.CSIDriver)
	if !ok {
		klog.ErrorS(nil, "kcsi: the CSIDriver informer delivered something else", "type", fmt.Sprintf("%T", obj))
		return
	}
	if err := h.ApplyCSIDriver(d); err != nil {
		klog.ErrorS(err, "kcsi: taking a CSIDriver from the VolumeHost's informer failed", "csiDriver", d.Name)
	}
}

func deleteCSIDriver(h *kcsi.Host, obj any) {
	name := ""
	switch d := obj.(type) {
	case *storagev1.CSIDriver:
		name = d.Name
	case cache.DeletedFinalStateUnknown:
		name = d.Key // cluster-scoped: the key is the name
	}
	if err := h.DeleteCSIDriver(name); err != nil && !errors.Is(err, kcsi.ErrNotFound) {
		klog.ErrorS(err, "kcsi: removing a CSIDriver the VolumeHost's informer deleted failed", "csiDriver", name)
	}
}
