package volumeplugin

import (
	"context"
	"strings"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubernetes/pkg/volume"
	"kcsi.dev/kcsi"
)

// attacher is upstream's csiAttacher: the controller's Attacher / Detacher and the kubelet's
// WaitForAttach, DeviceMounter and DeviceUnmounter.
type attacher struct {
	p *Plugin
	a *kcsi.Attacher
}

var (
	_ volume.Attacher        = (*attacher)(nil)
	_ volume.Detacher        = (*attacher)(nil)
	_ volume.DeviceMounter   = (*attacher)(nil)
	_ volume.DeviceUnmounter = (*attacher)(nil)
)

func (p *Plugin) newAttacher() (*attacher, error) {
	h, err := p.ready()
	if err != nil {
		return nil, err
	}
	a, err := h.NewAttacher()
	if err != nil {
		return nil, err
	}
	return &attacher{p: p, a: a}, nil
}

func (p *Plugin) NewAttacher() (volume.Attacher, error)               { return p.newAttacher() }
func (p *Plugin) NewDetacher() (volume.Detacher, error)               { return p.newAttacher() }
func (p *Plugin) NewDeviceMounter() (volume.DeviceMounter, error)     { return p.newAttacher() }
func (p *Plugin) NewDeviceUnmounter() (volume.DeviceUnmounter, error) { return p.newAttacher() }

// Attach creates the VolumeAttachment and waits for the external-attacher (the attach/detach
// controller's call: on a kubelet kcsi refuses it, as upstream). Like upstream it returns no
// device path: WaitForAttach on the node derives the attachment's name itself.
func (a *attacher) Attach(spec *volume.Spec, nodeName types.NodeName) (string, error) {
	s, err := kcsiSpec(spec)
	if err != nil {
		return "", err
	}
	attach := func() error {
		_, err := a.a.Attach(context.Background(), s, string(nodeName))
		return err
	}
	if pv := spec.PersistentVolume; pv != nil && pv.Spec.CSI != nil {
		a.p.feedDriverOf(spec)
		err = a.p.feeds.Load().during(attachmentName(pv.Spec.CSI.VolumeHandle, pv.Spec.CSI.Driver, string(nodeName)), attach)
	} else {
		err = attach() // kcsi refuses it with upstream's error
	}
	return "", upstreamText(err)
}

// Detach deletes the VolumeAttachment of volumeName ("<driver>^<handle>") and waits until it
// is gone (the attach/detach controller's call).
func (a *attacher) Detach(volumeName string, nodeName types.NodeName) error {
	detach := func() error { return a.a.Detach(context.Background(), volumeName, string(nodeName)) }
	driver, handle, ok := strings.Cut(volumeName, "^")
	if !ok {
		return upstreamText(detach()) // kcsi refuses it with upstream's error
	}
	return upstreamText(a.p.feeds.Load().during(attachmentName(handle, driver, string(nodeName)), detach))
}

// VolumesAreAttached: on the controller, kcsi's watch of the VolumeAttachments answers for
// all specs at once (a spec without a CSI PersistentVolume source is not attached, as
// upstream); on a kubelet each spec's VolumeAttachment is checked once.
func (a *attacher) VolumesAreAttached(specs []*volume.Spec, nodeName types.NodeName) (map[*volume.Spec]bool, error) {
	if a.p.controller {
		return a.controllerVolumesAreAttached(specs, nodeName)
	}
	out := make(map[*volume.Spec]bool, len(specs))
	for _, spec := range specs {
		if spec == nil {
			continue
		}
		need, err := a.p.CanAttach(spec)
		if err != nil {
			out[spec] = false
			continue
		}
		if !need {
			out[spec] = true
			continue
		}
		s, err := kcsiSpec(spec)
		if err != nil {
			out[spec] = false
			continue
		}
		_, err = a.a.WaitForAttach(context.Background(), s)
		out[spec] = err == nil
	}
	return out, nil
}

func (a *attacher) controllerVolumesAreAttached(specs []*volume.Spec, nodeName types.NodeName) (map[*volume.Spec]bool, error) {
	out := make(map[*volume.Spec]bool, len(specs))
	asked := make([]*volume.Spec, 0, len(specs))
	wire := make([]kcsi.Spec, 0, len(specs))
	for _, spec := range specs {
		if spec == nil {
			return nil, invalid("VolumesAreAttached: missing spec")
		}
		if spec.PersistentVolume == nil || spec.PersistentVolume.Spec.CSI == nil {
			out[spec] = false
			continue
		}
		s, err := kcsiSpec(spec)
		if err != nil {
			out[spec] = false
			continue
		}
		if f := a.p.feeds.Load(); f != nil {
			csi := spec.PersistentVolume.Spec.CSI
			f.driver(csi.Driver)
			f.attachment(attachmentName(csi.VolumeHandle, csi.Driver, string(nodeName)))
		}
		asked = append(asked, spec)
		wire = append(wire, s)
	}
	attached, err := a.a.VolumesAreAttached(wire, string(nodeName))
	if err != nil {
		return nil, upstreamText(err)
	}
	for i, spec := range asked {
		out[spec] = attached[i]
	}
	return out, nil
}

// WaitForAttach checks that the volume's VolumeAttachment is attached and returns its name.
func (a *attacher) WaitForAttach(spec *volume.Spec, _ string, _ *v1.Pod, timeout time.Duration) (string, error) {
	s, err := kcsiSpec(spec)
	if err != nil {
		return "", err
	}
	ctx := context.Background()
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	path, err := a.a.WaitForAttach(ctx, s)
	return path, kubeletError(err)
}

func (a *attacher) GetDeviceMountPath(spec *volume.Spec) (string, error) {
	s, err := kcsiSpec(spec)
	if err != nil {
		return "", err
	}
	return a.a.DeviceMountPath(s)
}

// MountDevice stages the volume (NodeStageVolume when the driver has STAGE_UNSTAGE_VOLUME).
func (a *attacher) MountDevice(spec *volume.Spec, _ string, deviceMountPath string, args volume.DeviceMounterArgs) error {
	s, err := kcsiSpec(spec)
	if err != nil {
		return err
	}
	a.p.claim(fsStagedKey(deviceMountPath))
	err = a.a.MountDevice(context.Background(), s, deviceMountPath,
		&kcsi.DeviceMounterArgs{FSGroup: args.FsGroup, SELinuxLabel: args.SELinuxLabel})
	return kubeletError(err)
}

// UnmountDevice unstages the volume staged at deviceMountPath (NodeUnstageVolume).
func (a *attacher) UnmountDevice(deviceMountPath string) error {
	a.p.claim(fsStagedKey(deviceMountPath))
	return kubeletError(a.a.UnmountDevice(context.Background(), deviceMountPath))
}
