package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"syscall"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
)

const ephemeralKey = "csi.storage.k8s.io/ephemeral"

func (d *driver) hasCap(t csi.NodeServiceCapability_RPC_Type) bool {
	return slices.Contains(d.cfg.nodeCaps, t)
}

func (d *driver) NodeGetCapabilities(context.Context, *csi.NodeGetCapabilitiesRequest) (*csi.NodeGetCapabilitiesResponse, error) {
	resp := &csi.NodeGetCapabilitiesResponse{}
	for _, t := range d.cfg.nodeCaps {
		resp.Capabilities = append(resp.Capabilities, &csi.NodeServiceCapability{
			Type: &csi.NodeServiceCapability_Rpc{Rpc: &csi.NodeServiceCapability_RPC{Type: t}}})
	}
	return resp, nil
}

func (d *driver) NodeGetInfo(context.Context, *csi.NodeGetInfoRequest) (*csi.NodeGetInfoResponse, error) {
	resp := &csi.NodeGetInfoResponse{NodeId: d.cfg.nodeID, MaxVolumesPerNode: d.cfg.maxVolumesPerNode}
	if t := d.topology(); t != nil {
		resp.AccessibleTopology = t[0]
	}
	return resp, nil
}

// lookup returns the volume or a NotFound error. Callers hold d.mu.
func (d *driver) lookup(id string) (*volume, error) {
	if v := d.volumes[id]; v != nil {
		return v, nil
	}
	return nil, status.Errorf(codes.NotFound, "volume id %s does not exist in the volumes list", id)
}

func (d *driver) NodeStageVolume(_ context.Context, req *csi.NodeStageVolumeRequest) (*csi.NodeStageVolumeResponse, error) {
	if !d.hasCap(csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME) {
		return nil, status.Error(codes.Unimplemented, "STAGE_UNSTAGE_VOLUME is disabled (--disable-node-cap)")
	}
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "Volume ID missing in request")
	}
	if req.GetStagingTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "Target path missing in request")
	}
	if req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "Volume Capability missing in request")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v, err := d.lookup(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if err := checkAccess(v, req.GetVolumeCapability()); err != nil {
		return nil, err
	}
	switch v.StagedPath {
	case req.GetStagingTargetPath():
		return &csi.NodeStageVolumeResponse{}, nil // idempotent
	case "":
		v.StagedPath = req.GetStagingTargetPath()
		return &csi.NodeStageVolumeResponse{}, d.saveErr()
	default:
		return nil, status.Errorf(codes.FailedPrecondition, "volume %q is already staged at %q", v.ID, v.StagedPath)
	}
}

func (d *driver) NodeUnstageVolume(_ context.Context, req *csi.NodeUnstageVolumeRequest) (*csi.NodeUnstageVolumeResponse, error) {
	if !d.hasCap(csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME) {
		return nil, status.Error(codes.Unimplemented, "STAGE_UNSTAGE_VOLUME is disabled (--disable-node-cap)")
	}
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "Volume ID missing in request")
	}
	if req.GetStagingTargetPath() == "" {
		return nil, status.Error(codes.InvalidArgument, "Target path missing in request")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v, err := d.lookup(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if len(v.Published) > 0 {
		return nil, status.Errorf(codes.FailedPrecondition, "volume %q is still published at %q on node %q",
			v.ID, slices.Sorted(maps.Keys(v.Published)), d.cfg.nodeID)
	}
	if v.StagedPath != req.GetStagingTargetPath() {
		klog.V(4).Infof("volume %q is not staged at %q: nothing to do", v.ID, req.GetStagingTargetPath())
		return &csi.NodeUnstageVolumeResponse{}, nil
	}
	v.StagedPath = ""
	return &csi.NodeUnstageVolumeResponse{}, d.saveErr()
}

func (d *driver) NodePublishVolume(_ context.Context, req *csi.NodePublishVolumeRequest) (*csi.NodePublishVolumeResponse, error) {
	if req.GetVolumeCapability() == nil {
		return nil, status.Error(codes.InvalidArgument, "Volume capability missing in request")
	}
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "Volume ID missing in request")
	}
	target := req.GetTargetPath()
	if target == "" {
		return nil, status.Error(codes.InvalidArgument, "Target path missing in request")
	}
	block, err := accessType(req.GetVolumeCapability())
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()

	id := req.GetVolumeId()
	if req.GetVolumeContext()[ephemeralKey] == "true" && d.volumes[id] == nil {
		if block || !validID(id) {
			return nil, status.Errorf(codes.InvalidArgument, "ephemeral volume %q: must be a mount volume with a file-name-safe id", id)
		}
		v := &volume{ID: id, Name: "ephemeral-" + id, Size: defaultSize, Ephemeral: true}
		if err := d.createBacking(v); err != nil {
			return nil, status.Errorf(codes.Internal, "ephemeral mode failed to create volume: %v", err)
		}
		d.volumes[id] = v
		klog.V(4).Infof("ephemeral mode: created volume %s", d.volPath(id))
	}
	v, err := d.lookup(id)
	if err != nil {
		return nil, err
	}
	if err := checkAccess(v, req.GetVolumeCapability()); err != nil {
		return nil, err
	}
	if d.hasCap(csi.NodeServiceCapability_RPC_STAGE_UNSTAGE_VOLUME) && !v.Ephemeral {
		if v.StagedPath == "" {
			return nil, status.Errorf(codes.FailedPrecondition, "volume %q must be staged before it is published", id)
		}
		if v.StagedPath != req.GetStagingTargetPath() {
			return nil, status.Errorf(codes.FailedPrecondition, "volume %q is staged at %q, not at staging_target_path %q",
				id, v.StagedPath, req.GetStagingTargetPath())
		}
	}
	_, again := v.Published[target]
	if req.GetVolumeCapability().GetAccessMode().GetMode() == csi.VolumeCapability_AccessMode_SINGLE_NODE_SINGLE_WRITER &&
		len(v.Published) > 0 && !again {
		return nil, status.Error(codes.FailedPrecondition, "Single node single writer access mode is already published")
	}

	if block {
		err = d.publishBlock(v, target, req.GetReadonly())
	} else {
		err = d.publishMount(v, target, req.GetReadonly())
	}
	if err != nil {
		if v.Ephemeral && len(v.Published) == 0 {
			_ = os.RemoveAll(d.volPath(id))
			delete(d.volumes, id)
		}
		return nil, err
	}
	if v.Published == nil {
		v.Published = map[string]publication{}
	}
	v.Published[target] = publication{ReadOnly: req.GetReadonly()}
	return &csi.NodePublishVolumeResponse{}, d.saveErr()
}

// publishMount mkdirs target (its parent must exist) and bind-mounts the volume directory onto it.
func (d *driver) publishMount(v *volume, target string, readOnly bool) error {
	created := false
	if err := os.Mkdir(target, 0o750); err == nil {
		created = true
	} else if !os.IsExist(err) {
		return status.Errorf(codes.Internal, "failed to create target path: %v", err)
	} else if mounted, err := d.mounter.IsMountPoint(target); err != nil {
		return status.Error(codes.Internal, err.Error())
	} else if mounted {
		return nil // already mounted there: idempotent
	}
	src := d.volPath(v.ID)
	opts := []string{"bind"}
	if readOnly {
		opts = append(opts, "ro")
	}
	if err := d.mounter.Mount(src, target, "", opts); err != nil {
		if created {
			_ = os.Remove(target)
		}
		return status.Errorf(codes.Internal, "failed to mount device: %s at %s: %v", src, target, err)
	}
	return nil
}

// publishBlock attaches the backing file to a loop device and bind-mounts it onto a target file.
func (d *driver) publishBlock(v *volume, target string, readOnly bool) error {
	loop, err := attachLoop(d.volPath(v.ID))
	if err != nil {
		return status.Errorf(codes.Internal, "failed to get the loop device: %v", err)
	}
	created := false
	if _, err := os.Lstat(target); os.IsNotExist(err) {
		f, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o660)
		if err != nil {
			return status.Errorf(codes.Internal, "failed to create target path: %s: %v", target, err)
		}
		f.Close()
		created = true
	} else if err != nil {
		return status.Errorf(codes.Internal, "failed to check if the target block file exists: %v", err)
	} else if mounted, err := d.mounter.IsMountPoint(target); err != nil {
		return status.Errorf(codes.Internal, "error checking path %s for mount: %v", target, err)
	} else if mounted {
		return nil // already mounted there: idempotent
	}
	opts := []string{"bind"}
	if readOnly {
		opts = append(opts, "ro")
	}
	if err := d.mounter.Mount(loop, target, "", opts); err != nil {
		if created {
			_ = os.Remove(target)
		}
		if len(v.Published) == 0 {
			_ = detachLoop(d.volPath(v.ID))
		}
		return status.Errorf(codes.Internal, "failed to mount block device: %s at %s: %v", loop, target, err)
	}
	return nil
}

func (d *driver) NodeUnpublishVolume(_ context.Context, req *csi.NodeUnpublishVolumeRequest) (*csi.NodeUnpublishVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "Volume ID missing in request")
	}
	target := req.GetTargetPath()
	if target == "" {
		return nil, status.Error(codes.InvalidArgument, "Target path missing in request")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v, err := d.lookup(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	mounted, err := d.mounter.IsMountPoint(target)
	if err != nil && !os.IsNotExist(err) {
		return nil, status.Error(codes.Internal, err.Error())
	}
	if mounted {
		if err := d.mounter.Unmount(target); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	// rmdir / unlink only: an unmounted target that is not empty is not ours to wipe.
	if err := os.Remove(target); err != nil && !os.IsNotExist(err) {
		return nil, status.Error(codes.Internal, err.Error())
	}
	delete(v.Published, target)
	klog.V(4).Infof("volume %s has been unpublished from %s", v.ID, target)
	if len(v.Published) == 0 {
		if v.Block {
			if err := detachLoop(d.volPath(v.ID)); err != nil {
				return nil, status.Error(codes.Internal, err.Error())
			}
		}
		if v.Ephemeral {
			if err := os.RemoveAll(d.volPath(v.ID)); err != nil {
				return nil, status.Errorf(codes.Internal, "failed to delete volume: %v", err)
			}
			delete(d.volumes, v.ID)
		}
	}
	return &csi.NodeUnpublishVolumeResponse{}, d.saveErr()
}

func (d *driver) NodeGetVolumeStats(_ context.Context, req *csi.NodeGetVolumeStatsRequest) (*csi.NodeGetVolumeStatsResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "Volume ID not provided")
	}
	path := req.GetVolumePath()
	if path == "" {
		return nil, status.Error(codes.InvalidArgument, "Volume Path not provided")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v, err := d.lookup(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	if _, err := os.Lstat(path); err != nil {
		return nil, status.Errorf(codes.NotFound, "Could not get file information from %s: %v", path, err)
	}
	if _, ok := v.Published[path]; !ok {
		return nil, status.Errorf(codes.NotFound, "volume %s is not published at %s", v.ID, path)
	}
	resp := &csi.NodeGetVolumeStatsResponse{VolumeCondition: &csi.VolumeCondition{Message: "volume is healthy"}}
	backing, err := os.Stat(d.volPath(v.ID))
	if err != nil {
		resp.VolumeCondition = &csi.VolumeCondition{Abnormal: true, Message: fmt.Sprintf("volume data is missing: %v", err)}
		return resp, nil
	}
	if mounted, err := d.mounter.IsMountPoint(path); err != nil || !mounted {
		resp.VolumeCondition = &csi.VolumeCondition{Abnormal: true, Message: fmt.Sprintf("volume is not mounted at %s (%v)", path, err)}
	}
	if v.Block {
		resp.Usage = []*csi.VolumeUsage{{Unit: csi.VolumeUsage_BYTES, Total: backing.Size()}}
		return resp, nil
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return nil, status.Errorf(codes.Internal, "statfs %s: %v", path, err)
	}
	bs := st.Bsize
	resp.Usage = []*csi.VolumeUsage{
		{Unit: csi.VolumeUsage_BYTES, Total: int64(st.Blocks) * bs, Available: int64(st.Bavail) * bs, Used: int64(st.Blocks-st.Bfree) * bs},
		{Unit: csi.VolumeUsage_INODES, Total: int64(st.Files), Available: int64(st.Ffree), Used: int64(st.Files - st.Ffree)},
	}
	return resp, nil
}

func (d *driver) NodeExpandVolume(_ context.Context, req *csi.NodeExpandVolumeRequest) (*csi.NodeExpandVolumeResponse, error) {
	if req.GetVolumeId() == "" {
		return nil, status.Error(codes.InvalidArgument, "Volume ID not provided")
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	v, err := d.lookup(req.GetVolumeId())
	if err != nil {
		return nil, err
	}
	path := req.GetVolumePath()
	if path == "" {
		return nil, status.Error(codes.InvalidArgument, "Volume path not provided")
	}
	info, err := os.Stat(path)
	if err != nil {
		return nil, status.Errorf(codes.NotFound, "Could not get file information from %s: %v", path, err)
	}
	switch m := info.Mode(); {
	case m.IsDir() && !v.Block, m&os.ModeDevice != 0 && v.Block:
	default:
		return nil, status.Errorf(codes.InvalidArgument, "volume %s (block=%v) does not match %s (mode %v)", v.ID, v.Block, path, m)
	}
	size := req.GetCapacityRange().GetRequiredBytes()
	if size == 0 {
		size = v.Size
	}
	if v.Block {
		devs, err := loopDevices(d.volPath(v.ID))
		for _, dev := range devs {
			if out, cErr := exec.Command("losetup", "-c", dev).CombinedOutput(); cErr != nil && err == nil {
				err = fmt.Errorf("losetup -c %s: %v: %s", dev, cErr, out)
			}
		}
		if err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
	}
	return &csi.NodeExpandVolumeResponse{CapacityBytes: size}, nil
}

// checkAccess rejects a capability whose access type does not match the volume's.
func checkAccess(v *volume, c *csi.VolumeCapability) error {
	block, err := accessType(c)
	switch {
	case err != nil:
		return err
	case block && !v.Block:
		return status.Error(codes.InvalidArgument, "cannot publish a non-block volume as block volume")
	case !block && v.Block:
		return status.Error(codes.InvalidArgument, "cannot publish a non-mount volume as mount volume")
	}
	return nil
}

// saveErr persists the state and turns a failure into an Internal error. Callers hold d.mu.
func (d *driver) saveErr() error {
	if err := d.save(); err != nil {
		return status.Errorf(codes.Internal, "saving state: %v", err)
	}
	return nil
}
