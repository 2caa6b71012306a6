package volumeplugin

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubernetes/pkg/volume"
	"kcsi.dev/kcsi"
)

// attacher is the kubelet side of attaching and staging; upstream's csiAttacher is also its
// Detacher, DeviceMounter and DeviceUnmounter.
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

// Attach belongs to the attach/detach controller (it creates VolumeAttachments); kcsi is the
// node side only.
func (a *attacher) Attach(spec *volume.Spec, nodeName types.NodeName) (string, error) {
	return "", invalid("Attach: attaching is the attach/detach controller's job; run the kubelet with enableControllerAttachDetach")
}

// Detach: see Attach.
func (a *attacher) Detach(volumeName string, nodeName types.NodeName) error {
	return invalid("Detach: detaching is the attach/detach controller's job; run the kubelet with enableControllerAttachDetach")
}

// VolumesAreAttached checks each spec's VolumeAttachment once; volumes that need no attaching
// are attached.
func (a *attacher) VolumesAreAttached(specs []*volume.Spec, nodeName types.NodeName) (map[*volume.Spec]bool, error) {
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
	err = a.a.MountDevice(context.Background(), s, deviceMountPath,
		&kcsi.DeviceMounterArgs{FSGroup: args.FsGroup, SELinuxLabel: args.SELinuxLabel})
	return kubeletError(err)
}

// UnmountDevice unstages the volume staged at deviceMountPath (NodeUnstageVolume).
func (a *attacher) UnmountDevice(deviceMountPath string) error {
	return kubeletError(a.a.UnmountDevice(context.Background(), deviceMountPath))
}
