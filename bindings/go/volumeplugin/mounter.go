package volumeplugin

import (
	"context"
	"errors"
	"path/filepath"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubernetes/pkg/volume"
	volumetypes "k8s.io/kubernetes/pkg/volume/util/types"
	utilstrings "k8s.io/utils/strings"
	"kcsi.dev/kcsi"
)

type mounter struct {
	p        *Plugin
	m        *kcsi.Mounter
	spec     *volume.Spec
	path     string
	readOnly bool
	// relabel is GetAttributes' SELinuxRelabel, found after a successful SetUp.
	relabel bool
}

var (
	_ volume.Volume          = (*mounter)(nil)
	_ volume.Mounter         = (*mounter)(nil)
	_ volume.MetricsProvider = (*mounter)(nil)
)

// NewMounter makes a mounter for spec in pod; it does no I/O and needs no registered driver.
func (p *Plugin) NewMounter(spec *volume.Spec, pod *v1.Pod) (volume.Mounter, error) {
	m, path, err := newForPod(p, "NewMounter", spec, pod, (*kcsi.Host).NewMounter, (*kcsi.Mounter).Path)
	if err != nil {
		return nil, err
	}
	// The mounter lives as long as the kubelet keeps it; the cleanup frees the C handle.
	return &mounter{p: p, m: m, spec: spec, path: path, readOnly: readOnlyOf(spec)}, nil
}

// readOnlyOf is upstream NewMounter's read-only flag: the inline volume's own, else the spec's.
func readOnlyOf(spec *volume.Spec) bool {
	if spec.Volume != nil && spec.Volume.CSI != nil {
		return spec.Volume.CSI.ReadOnly != nil && *spec.Volume.CSI.ReadOnly
	}
	return spec.ReadOnly
}

func (m *mounter) GetPath() string { return m.path }

func (m *mounter) SetUp(args volume.MounterArgs) error { return m.SetUpAt(m.path, args) }

// SetUpAt publishes the volume at the mounter's path (NodePublishVolume).
func (m *mounter) SetUpAt(dir string, args volume.MounterArgs) error {
	if dir != m.path {
		return invalid("SetUpAt: kcsi publishes at %s, not %s", m.path, dir)
	}
	a := &kcsi.MounterArgs{
		FSGroup:             args.FsGroup,
		SELinuxLabel:        args.SELinuxLabel,
		ReconstructedVolume: args.ReconstructedVolume,
		IsRemount:           args.IsRemount,
	}
	if args.FSGroupChangePolicy != nil {
		a.FSGroupChangePolicy = string(*args.FSGroupChangePolicy)
	}
	if err := m.m.SetUp(context.Background(), a); err != nil {
		return kubeletError(err)
	}
	// Upstream probes SELinux relabelling only when no -o context mount was made.
	contextMount := false
	if args.SELinuxLabel != "" {
		ok, err := m.p.SupportsSELinuxContextMount(m.spec)
		if err != nil {
			return volumetypes.NewUncertainProgressError("error checking for SELinux context mount support: " + err.Error())
		}
		contextMount = ok
	}
	if !contextMount {
		kvh, ok := m.p.host.(volume.KubeletVolumeHost)
		if ok {
			relabel, err := kvh.GetHostUtil().GetSELinuxSupport(dir)
			if err != nil {
				// The volume is mounted: uncertain, so the kubelet unmounts it with the pod.
				return volumetypes.NewUncertainProgressError("error checking for SELinux support: " + err.Error())
			}
			m.relabel = relabel
		}
	}
	return nil
}

func (m *mounter) GetAttributes() volume.Attributes {
	return volume.Attributes{ReadOnly: m.readOnly, Managed: !m.readOnly, SELinuxRelabel: m.relabel}
}

func (m *mounter) GetMetrics() (*volume.Metrics, error) {
	mt, err := m.m.Metrics(context.Background())
	return volumeMetrics(mt, err, m.spec)
}

// volumeMetrics converts kcsi's metrics; a driver without GET_VOLUME_STATS gives the
// kubelet's "not supported" metrics error, as upstream.
func volumeMetrics(mt *kcsi.Metrics, err error, spec *volume.Spec) (*volume.Metrics, error) {
	if errors.Is(err, kcsi.ErrNotSupported) {
		return nil, volume.NewNotSupportedErrorWithDriverName(driverOf(spec))
	}
	if err != nil {
		return nil, kubeletError(err)
	}
	out := &volume.Metrics{
		Used:       quantity(mt.UsedBytes, resource.BinarySI),
		Capacity:   quantity(mt.CapacityBytes, resource.BinarySI),
		Available:  quantity(mt.AvailableBytes, resource.BinarySI),
		Inodes:     quantity(mt.Inodes, resource.DecimalSI),
		InodesFree: quantity(mt.InodesFree, resource.DecimalSI),
		InodesUsed: quantity(mt.InodesUsed, resource.DecimalSI),
		Abnormal:   mt.Abnormal,
		Message:    mt.Message,
	}
	if t, err := time.Parse(time.RFC3339Nano, mt.Time); err == nil {
		out.Time = metav1.NewTime(t)
	} else {
		out.Time = metav1.Now()
	}
	return out, nil
}

func quantity(v *int64, f resource.Format) *resource.Quantity {
	if v == nil {
		return nil
	}
	return resource.NewQuantity(*v, f)
}

func driverOf(spec *volume.Spec) string {
	switch {
	case spec == nil:
	case spec.PersistentVolume != nil && spec.PersistentVolume.Spec.CSI != nil:
		return spec.PersistentVolume.Spec.CSI.Driver
	case spec.Volume != nil && spec.Volume.CSI != nil:
		return spec.Volume.CSI.Driver
	}
	return ""
}

type unmounter struct {
	u    *kcsi.Unmounter
	path string
}

var (
	_ volume.Unmounter       = (*unmounter)(nil)
	_ volume.MetricsProvider = (*unmounter)(nil)
)

// NewUnmounter reads the vol_data.json SetUp wrote (by kcsi or upstream) for volume name of
// pod podUID.
func (p *Plugin) NewUnmounter(name string, podUID types.UID) (volume.Unmounter, error) {
	h, err := p.ready()
	if err != nil {
		return nil, err
	}
	if podUID == "" {
		return nil, invalid("NewUnmounter: pod UID is empty")
	}
	u, err := h.NewUnmounter(name, string(podUID))
	if err != nil {
		return nil, err
	}
	dir := p.host.GetPodVolumeDir(podUID, utilstrings.EscapeQualifiedName(PluginName), utilstrings.EscapeQualifiedName(name))
	return &unmounter{u: u, path: filepath.Join(dir, "mount")}, nil
}

func (u *unmounter) GetPath() string { return u.path }

func (u *unmounter) TearDown() error { return u.TearDownAt(u.path) }

// TearDownAt unpublishes the volume at the unmounter's path (NodeUnpublishVolume).
func (u *unmounter) TearDownAt(dir string) error {
	if dir != u.path {
		return invalid("TearDownAt: kcsi unpublishes %s, not %s", u.path, dir)
	}
	return kubeletError(u.u.TearDown(context.Background()))
}

// GetMetrics: an unmounter has no metrics (upstream's has no provider at all).
func (u *unmounter) GetMetrics() (*volume.Metrics, error) {
	return nil, volume.NewNotSupportedError()
}
