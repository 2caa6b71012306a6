package volumeplugin

import (
	"context"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubernetes/pkg/volume"
	utilstrings "k8s.io/utils/strings"
	"kcsi.dev/kcsi"
)

type blockMapper struct {
	p      *Plugin
	m      *kcsi.BlockMapper
	spec   *volume.Spec
	podUID types.UID
	paths  kcsi.BlockPaths
}

var (
	_ volume.BlockVolumeMapper       = (*blockMapper)(nil)
	_ volume.CustomBlockVolumeMapper = (*blockMapper)(nil)
	_ volume.MetricsProvider         = (*blockMapper)(nil)
)

// NewBlockVolumeMapper makes a mapper for a volumeMode: Block PersistentVolume in pod and
// records the volume's data/vol_data.json.
func (p *Plugin) NewBlockVolumeMapper(spec *volume.Spec, pod *v1.Pod) (volume.BlockVolumeMapper, error) {
	m, paths, err := newForPod(p, "NewBlockVolumeMapper", spec, pod, (*kcsi.Host).NewBlockMapper, (*kcsi.BlockMapper).Paths)
	if err != nil {
		return nil, err
	}
	return &blockMapper{p: p, m: m, spec: spec, podUID: pod.UID, paths: *paths}, nil
}

func (b *blockMapper) GetGlobalMapPath(*volume.Spec) (string, error) {
	return b.paths.GlobalMapPath, nil
}

func (b *blockMapper) GetPodDeviceMapPath() (string, string) {
	return b.paths.PodDeviceMapPath, b.paths.PodDeviceMapName
}

func (b *blockMapper) GetStagingPath() string { return b.paths.StagingPath }

func (b *blockMapper) SupportsMetrics() bool { return true }

func (b *blockMapper) GetMetrics() (*volume.Metrics, error) {
	mt, err := b.m.Metrics(context.Background())
	return volumeMetrics(mt, err, b.spec)
}

// SetUpDevice stages the volume with block access; "" when the driver does not stage.
func (b *blockMapper) SetUpDevice() (string, error) {
	b.p.claim(blockStagedKey(b.spec.Name()))
	path, err := b.m.SetUpDevice(context.Background())
	return path, kubeletError(err)
}

// MapPodDevice publishes the volume with block access and returns the publish path.
func (b *blockMapper) MapPodDevice() (string, error) {
	b.p.claim(podPublish{b.spec.Name(), string(b.podUID)}.key())
	path, err := b.m.MapPodDevice(context.Background())
	return path, kubeletError(err)
}

type blockUnmapper struct {
	p             *Plugin
	name          string
	podUID        types.UID
	u             *kcsi.BlockUnmapper
	globalMapPath string
	podMapPath    string
	podMapName    string
}

var (
	_ volume.BlockVolumeUnmapper       = (*blockUnmapper)(nil)
	_ volume.CustomBlockVolumeUnmapper = (*blockUnmapper)(nil)
)

// NewBlockVolumeUnmapper reads the volume's data/vol_data.json (by kcsi or upstream).
func (p *Plugin) NewBlockVolumeUnmapper(name string, podUID types.UID) (volume.BlockVolumeUnmapper, error) {
	h, err := p.ready()
	if err != nil {
		return nil, err
	}
	u, err := h.NewBlockUnmapper(name, string(podUID))
	if err != nil {
		return nil, err
	}
	// The same paths the mapper reports, from the VolumeHost as upstream composes them.
	escaped := utilstrings.EscapeQualifiedName(name)
	return &blockUnmapper{
		p:             p,
		name:          name,
		podUID:        podUID,
		u:             u,
		globalMapPath: filepath.Join(p.host.GetVolumeDevicePluginDir(PluginName), escaped, "dev"),
		podMapPath:    p.host.GetPodVolumeDeviceDir(podUID, utilstrings.EscapeQualifiedName(PluginName)),
		podMapName:    escaped,
	}, nil
}

func (b *blockUnmapper) GetGlobalMapPath(*volume.Spec) (string, error) { return b.globalMapPath, nil }

func (b *blockUnmapper) GetPodDeviceMapPath() (string, string) { return b.podMapPath, b.podMapName }

// SupportsMetrics is false: metrics come from the mapper of a mapped volume.
func (b *blockUnmapper) SupportsMetrics() bool { return false }

func (b *blockUnmapper) GetMetrics() (*volume.Metrics, error) {
	return nil, volume.NewNotSupportedError()
}

// UnmapPodDevice unpublishes the pod's device (NodeUnpublishVolume).
func (b *blockUnmapper) UnmapPodDevice() error {
	b.p.claim(podPublish{b.name, string(b.podUID)}.key())
	return kubeletError(b.u.UnmapPodDevice(context.Background()))
}

// TearDownDevice unstages the volume (NodeUnstageVolume) and removes its leftover files.
func (b *blockUnmapper) TearDownDevice(mapPath, devicePath string) error {
	b.p.claim(blockStagedKey(b.name))
	return kubeletError(b.u.TearDownDevice(context.Background(), mapPath, devicePath))
}
